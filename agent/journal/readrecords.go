package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
)

// ReadRecords calls fn for every record in the journal's files, oldest first: the
// snapshot's, then each segment's. Unlike Replay it may be called at any time while the
// journal runs, appends included, from any goroutine; it is for finding an old record
// again (the outbox gets a payload back from it when its cache of payloads is damaged),
// not for the hot path: it reads every file.
//
// It sees every record that was in the file when it was called (every record whose Wait
// returned nil, or that a WriteOut before the call wrote), and no record written after:
// the newest segment is read up to where it ended at the call. A compaction waits until
// it returns, so the files it reads stay (WriteSnapshot would delete segments); Close
// waits too.
//
// Damage does not stop it: a damaged frame (or file header) is skipped up to the next
// valid frame, as Options.SkipCorrupt does at Open, and listed in the returned losses, so
// that one bad record does not hide the others from a caller looking for particular ones.
// The error is an I/O error, fn's error (which stops it), or ErrClosed. The slice passed
// to fn is valid only until fn returns. Memory: a 64 KiB window (or the largest record)
// per file, never a whole file.
func (j *Journal) ReadRecords(fn func(rec []byte) error) ([]Loss, error) {
	j.snapMu.Lock()
	defer j.snapMu.Unlock()
	// wmu: segNum and segSize agree (no rotation or write half done); taken before mu.
	j.wmu.Lock()
	j.mu.Lock()
	closed, snap, first, last, lastEnd := j.closed, j.snapNum, j.firstSeg, j.segNum, j.segSize
	j.mu.Unlock()
	j.wmu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	var losses []Loss
	var w fileWindow
	read := func(path string, kind [6]byte, number uint64, end int64) error {
		ra, closeFile, err := j.openReaderAt(path)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		defer closeFile()
		if end < 0 {
			if end, err = fileSize(ra); err != nil {
				return fmt.Errorf("journal: %s: %w", path, err)
			}
		}
		w.reset(ra, end)
		l, err := w.records(path, kind, number, j.opts.MaxRecordSize, fn)
		losses = append(losses, l...)
		return err
	}
	if snap > 0 {
		if err := read(j.snapPath(snap), snapshotKind, snap, -1); err != nil {
			return losses, err
		}
	}
	for n := first; n <= last; n++ {
		end := int64(-1) // a sealed segment: all of it
		if n == last {
			end = lastEnd
		}
		if err := read(j.segPath(n), segmentKind, n, end); err != nil {
			return losses, err
		}
	}
	return losses, nil
}

// openReaderAt opens path for reading through the journal's FS: its File when that reads
// at offsets (OSFS's does), or else the whole file read into memory.
func (j *Journal) openReaderAt(path string) (io.ReaderAt, func(), error) {
	f, err := j.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	if ra, ok := f.(io.ReaderAt); ok {
		return ra, func() { f.Close() }, nil
	}
	f.Close()
	data, err := j.fs.ReadFile(path, nil)
	if err != nil {
		return nil, nil, err
	}
	return bytesReaderAt(data), func() {}, nil
}

// fileSize is the size of what ra reads: Stat when it has it, else found by reading.
func fileSize(ra io.ReaderAt) (int64, error) {
	if s, ok := ra.(interface{ Stat() (os.FileInfo, error) }); ok {
		st, err := s.Stat()
		if err != nil {
			return 0, err
		}
		return st.Size(), nil
	}
	if b, ok := ra.(bytesReaderAt); ok {
		return int64(len(b)), nil
	}
	return 0, errors.New("cannot tell the file's size")
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// readWindow is how much fileWindow reads at a time.
const readWindow = 64 << 10

// fileWindow reads a file's bytes [0, end) through a window: one pread per readWindow
// bytes, not one per frame.
type fileWindow struct {
	ra  io.ReaderAt
	end int64
	buf []byte
	off int64 // of buf in the file
}

func (w *fileWindow) reset(ra io.ReaderAt, end int64) {
	w.ra, w.end, w.buf, w.off = ra, end, w.buf[:0], 0
}

// errPastEnd: the bytes asked for run past the end being read (damage, not an I/O error).
var errPastEnd = errors.New("runs past the end of the file")

// at returns the n bytes at off, valid until the next call.
func (w *fileWindow) at(off int64, n int) ([]byte, error) {
	if off >= w.off && off+int64(n) <= w.off+int64(len(w.buf)) {
		return w.buf[off-w.off:][:n], nil
	}
	if off+int64(n) > w.end {
		return nil, errPastEnd
	}
	size := int(min(max(readWindow, int64(n)), w.end-off))
	w.buf = slices.Grow(w.buf[:0], size)[:size]
	if got, err := w.ra.ReadAt(w.buf, off); got < size {
		w.buf = w.buf[:0]
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF // the file shrank below what it held at the call
		}
		return nil, err
	}
	w.off = off
	return w.buf[:n], nil
}

// frame checks the frame at off and returns its payload and the offset after it. Damage
// comes back as errShortFrame, errBadLength or ErrChecksum; anything else is an I/O error.
func (w *fileWindow) frame(off int64, maxRecord int) (payload []byte, next int64, err error) {
	h, err := w.at(off, frameHeaderSize)
	if err != nil {
		if err == errPastEnd {
			err = errShortFrame
		}
		return nil, 0, err
	}
	if crc32.Checksum(h[:8], castagnoli) != binary.LittleEndian.Uint32(h[8:12]) {
		return nil, 0, ErrChecksum
	}
	n := binary.LittleEndian.Uint32(h[0:4])
	sum := binary.LittleEndian.Uint32(h[4:8])
	if n == 0 || int64(n) > int64(maxRecord) {
		return nil, 0, errBadLength
	}
	b, err := w.at(off, frameHeaderSize+int(n))
	if err != nil {
		if err == errPastEnd {
			err = errShortFrame
		}
		return nil, 0, err
	}
	payload = b[frameHeaderSize:]
	if crc32.Checksum(payload, castagnoli) != sum {
		return nil, 0, ErrChecksum
	}
	return payload, off + frameHeaderSize + int64(n), nil
}

func isDamage(err error) bool {
	return err == errShortFrame || err == errBadLength || err == ErrChecksum
}

// records calls fn for each valid frame of the file, skipping damaged ranges (returned).
func (w *fileWindow) records(path string, kind [6]byte, number uint64, maxRecord int, fn func([]byte) error) ([]Loss, error) {
	var losses []Loss
	off := int64(fileHeaderSize)
	hdr, err := w.at(0, fileHeaderSize)
	switch {
	case err == errPastEnd:
		if w.end == 0 {
			return nil, nil // a segment created a moment ago, its header not written yet
		}
		return []Loss{{File: path, Offset: 0, Bytes: w.end, Err: fmt.Errorf("%w: header is %d bytes", ErrBadFormat, w.end)}}, nil
	case err != nil:
		return nil, fmt.Errorf("journal: reading %s: %w", path, err)
	}
	if num, err := parseFileHeader(hdr, kind); err != nil {
		losses = append(losses, Loss{File: path, Offset: 0, Bytes: fileHeaderSize, Err: err})
	} else if num != number {
		losses = append(losses, Loss{File: path, Offset: 8, Bytes: 8, Err: fmt.Errorf("%w: header says number %d, not %d", ErrBadFormat, num, number)})
	}
	for off < w.end {
		p, next, err := w.frame(off, maxRecord)
		if err == nil {
			if err := fn(p); err != nil {
				return losses, err
			}
			off = next
			continue
		}
		if !isDamage(err) {
			return losses, fmt.Errorf("journal: reading %s at %d: %w", path, off, err)
		}
		// Look for the next valid frame, one offset at a time (the header checksum makes
		// that cheap), as recovery does: only damaged files pay for it.
		cause, skipTo := err, w.end
		for o := off + 1; o+frameHeaderSize <= w.end; o++ {
			_, _, err := w.frame(o, maxRecord)
			if err == nil {
				skipTo = o
				break
			}
			if !isDamage(err) {
				return losses, fmt.Errorf("journal: reading %s at %d: %w", path, o, err)
			}
		}
		losses = append(losses, Loss{File: path, Offset: off, Bytes: skipTo - off, Err: cause})
		off = skipTo
	}
	return losses, nil
}
