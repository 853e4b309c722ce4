package outbox

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync/atomic"
)

// The payload file. A queued command's payload (the person record the terminal gets) is
// needed only when the command is sent and when a snapshot is written. On the heap, the
// queued commands' payloads would be live, and the GC's headroom doubles that in RSS.
// So the table writes each payload to payloads.cache beside the journal and keeps an 8-byte
// reference in the item (payRef: offset and length), read back with pread (os.File.ReadAt)
// when the command is sent. Not mmap: mapped pages that were touched count in RSS again.
//
// The file is a cache, not a record: the journal holds every payload durably. It is never
// fsynced; Open recreates it empty and the replay writes it again, Close removes it.
//
// Layout: records one after another, each the payload's CRC-32C (4 bytes, little endian)
// followed by the payload. The checksum turns a damaged file into a read error rather than
// garbage sent to a terminal. Writes go through a 32 KiB buffer, so an intake batch or a
// replay of 100,000 adds costs one write per 32 KiB, not one per payload; a record still in
// the buffer is read from it.
//
// Reclaiming space: a record is never overwritten; once its message leaves the table its
// bytes are dead. When the dead bytes exceed both the live ones and spillMinDead (1 MiB),
// the live records are copied in file order into a fresh file that replaces the old one
// (when nothing is live, the file is truncated instead). Every byte a rewrite copies is
// live, and fewer live bytes are copied than died since the previous rewrite, so rewriting
// costs at most one more write of each byte written, and the file stays below twice its
// live bytes plus 1 MiB. Fixed-size segments freed when their last payload leaves would
// skip the copy but not compaction: one command waiting long (an offline
// terminal's queue) pins a whole segment, and with one FIFO per terminal, terminals
// draining at different speeds leave a few stragglers in most segments. The rewrite runs
// under the table lock: sequential reads and writes of the live bytes (BenchmarkSpillRewrite,
// docs/benchmarks.md), about once per as many commands finished as are live, so the pause
// is shared among them; the replaced file is closed (its pages freed) after the lock is
// released. It waits while a snapshot reads
// the file (spill.pins). Copying outside the lock, then adopting under it what did not move
// meanwhile, would remove the pause at the cost of a goroutine and that reconciliation.
//
// Failures: a failed write (disk full, I/O error) keeps the payloads it held on the heap
// (Stats.PayloadsOnHeap counts them, PayloadWriteErrors the
// failures); the next write tries the file again, and the next rewrite moves them back.
// A failed read (I/O error, checksum mismatch) when a command is due leaves the command
// queued at the head of its device's FIFO, counts (PayloadReadErrors) and asks for the
// payload from the journal (repair.go), which sends the command once it is back; until
// then, or for good if the journal's copy is damaged too, the device tries again after
// 1 s, doubling up to 1 min. A snapshot that cannot read a payload is not written (the
// journal keeps its segments); it asks for the repair too, and is tried again after it.
// Reopening the outbox rebuilds the whole file from the journal.

const (
	spillName    = "payloads.cache"
	spillHdr     = 4        // CRC-32C of the payload
	spillBufSize = 32 << 10 // write buffer; a record longer than this is written directly
	spillWindow  = 64 << 10 // read size of a rewrite
	spillMinDead = 1 << 20  // dead bytes below which the file is never rewritten
	payLenBits   = 24       // payRef: length bits; the offset has the other 40
	maxSpillLen  = 1<<payLenBits - 1
	maxSpillEnd  = 1<<(64-payLenBits) - 1 // 1 TiB: past it, payloads stay on the heap
	maxReadRetry = 6                      // read retries back off 1 s << 6 at most (capped at 1 min)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// payRef locates a payload in the payload file: the record's offset << payLenBits | the
// payload's length. 0: the payload is not in the file (empty, or in table.heapPay).
type payRef uint64

func makeRef(off int64, n int) payRef { return payRef(uint64(off)<<payLenBits | uint64(n)) }
func (r payRef) off() int64           { return int64(r >> payLenBits) }
func (r payRef) len() int             { return int(r & maxSpillLen) }
func (r payRef) size() int64          { return spillHdr + int64(r.len()) }

// spillFile is what the payload file needs of an *os.File; tests inject failures here.
type spillFile interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
	Close() error
}

func createSpillFile(path string) (spillFile, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
}

// spill is the payload file. The table owns it and changes it under the outbox's lock;
// only pins let a snapshot read f without the lock (f then stays, and so do its records).
type spill struct {
	path    string
	create  func(path string) (spillFile, error)
	log     *slog.Logger
	minDead int64
	eager   bool // tests: rewrite at minDead dead bytes, however many are live

	f        spillFile
	size     int64   // bytes written to f
	buf      []byte  // records after size, not written yet
	bufItems []*item // the items whose records went into buf
	live     int64   // bytes of records items refer to
	dead     int64   // bytes of records no item refers to
	// retryDead: after a failed rewrite, the dead bytes at which to try again.
	retryDead int64
	pins      int // snapshots reading f without the lock
	// retired is the file a rewrite replaced, to be closed without the lock.
	retired spillFile
	failing bool // the last write failed (logged once until one succeeds)

	writeErrors uint64
	readErrors  atomic.Uint64 // also counted by snapshots, outside the lock
	rewrites    uint64
}

// openSpill creates the payload file in dir, empty. create nil means the file system.
func openSpill(dir string, create func(string) (spillFile, error), minDead int64, log *slog.Logger) (*spill, error) {
	if create == nil {
		create = createSpillFile
	}
	if minDead <= 0 {
		minDead = spillMinDead
	}
	s := &spill{path: filepath.Join(dir, spillName), create: create, log: log, minDead: minDead}
	os.Remove(s.path + ".new") // a rewrite cut short by a crash
	f, err := create(s.path)
	if err != nil {
		return nil, fmt.Errorf("outbox: creating the payload file: %w", err)
	}
	s.f = f
	return s, nil
}

// close closes and removes the file: the next Open rebuilds it from the journal.
func (s *spill) close() {
	s.f.Close()
	if s.retired != nil {
		s.retired.Close()
		s.retired = nil
	}
	os.Remove(s.path)
}

// takeRetired returns the file a rewrite replaced, if any, for the caller to close once
// it released the outbox's lock.
func (s *spill) takeRetired() io.Closer {
	if s == nil || s.retired == nil {
		return nil
	}
	f := s.retired
	s.retired = nil
	return f
}

func (s *spill) writeFailed(err error) {
	s.writeErrors++
	if !s.failing {
		s.failing = true
		s.log.Error("outbox: cannot write the payload file; payloads stay in memory until it works again", "path", s.path, "err", err)
	}
}

func (s *spill) wrote() {
	if s.failing {
		s.failing = false
		s.log.Info("outbox: the payload file takes payloads again", "path", s.path)
	}
}

// readSpill reads the record at ref from f into dst (grown as needed), checks it against
// its checksum and returns it: the payload is rec[spillHdr:].
func readSpill(f spillFile, ref payRef, dst []byte) (rec []byte, err error) {
	n := int(ref.size())
	dst = slices.Grow(dst[:0], n)[:n]
	if got, err := f.ReadAt(dst, ref.off()); got < n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("outbox: reading the payload file at %d: %w", ref.off(), err)
	}
	return dst, checkRecord(ref, dst)
}

func checkRecord(ref payRef, rec []byte) error {
	if binary.LittleEndian.Uint32(rec) != crc32.Checksum(rec[spillHdr:], castagnoli) {
		return fmt.Errorf("outbox: payload file damaged at %d: %w", ref.off(), errSpillChecksum)
	}
	return nil
}

// spillReader reads records in ascending offset order through a window of the file: one
// pread per spillWindow bytes rather than one per record. Records are not checked.
type spillReader struct {
	f   spillFile
	end int64 // the file's size
	win []byte
	off int64 // of win in the file
}

// record returns the record at ref, valid until the next call.
func (r *spillReader) record(ref payRef) ([]byte, error) {
	off, n := ref.off(), ref.size()
	if off < r.off || off+n > r.off+int64(len(r.win)) {
		w := min(max(spillWindow, n), r.end-off)
		if w < n {
			return nil, fmt.Errorf("outbox: payload file: record at %d runs past its end %d", off, r.end)
		}
		r.win = slices.Grow(r.win[:0], int(w))[:w]
		got, err := r.f.ReadAt(r.win, off)
		if int64(got) < n {
			r.win = r.win[:0]
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("outbox: reading the payload file at %d: %w", off, err)
		}
		// A short window that holds the record will do: the file may end before what it
		// should hold (cut by something else), and the records before that point are good.
		r.win, r.off = r.win[:got], off
	}
	return r.win[off-r.off:][:n], nil
}

// setPayload stores p as it's payload: in the payload file, or on the heap when there is
// none, it cannot take p, or writing fails. p may alias a caller's or a replay buffer.
func (t *table) setPayload(it *item, p []byte) {
	s := t.spill
	if len(p) == 0 {
		return
	}
	n := int64(spillHdr + len(p))
	if s == nil || len(p) > maxSpillLen || s.size+int64(len(s.buf))+n > maxSpillEnd {
		t.heapPay[it] = bytes.Clone(p)
		return
	}
	if int64(len(s.buf))+n > spillBufSize {
		t.flushSpill()
	}
	sum := crc32.Checksum(p, castagnoli)
	if n > spillBufSize {
		// Too long for the buffer: written at once, in two writes rather than a copy.
		var hdr [spillHdr]byte
		binary.LittleEndian.PutUint32(hdr[:], sum)
		if _, err := s.f.WriteAt(hdr[:], s.size); err != nil {
			s.writeFailed(err)
			t.heapPay[it] = bytes.Clone(p)
			return
		}
		if _, err := s.f.WriteAt(p, s.size+spillHdr); err != nil {
			s.writeFailed(err)
			t.heapPay[it] = bytes.Clone(p)
			return
		}
		s.wrote()
		it.pay = makeRef(s.size, len(p))
		s.size += n
		s.live += n
		return
	}
	if s.buf == nil {
		s.buf = make([]byte, 0, spillBufSize)
	}
	it.pay = makeRef(s.size+int64(len(s.buf)), len(p))
	s.buf = binary.LittleEndian.AppendUint32(s.buf, sum)
	s.buf = append(s.buf, p...)
	s.bufItems = append(s.bufItems, it)
	s.live += n
	if len(s.bufItems) >= 1024 { // many tiny payloads: bound the list too
		t.flushSpill()
	}
}

// flushSpill writes the buffer. If that fails, the payloads in it that are still live go
// to the heap: nothing refers to the buffer's bytes afterwards.
func (t *table) flushSpill() {
	s := t.spill
	if s == nil || len(s.buf) == 0 {
		return
	}
	if _, err := s.f.WriteAt(s.buf, s.size); err != nil {
		s.writeFailed(err)
		var liveInBuf int64
		for _, it := range s.bufItems {
			if it.pay == 0 || it.pay.off() < s.size {
				continue // left the table since
			}
			rec := s.buf[it.pay.off()-s.size:][:it.pay.size()]
			t.heapPay[it] = bytes.Clone(rec[spillHdr:])
			liveInBuf += it.pay.size()
			it.pay = 0
		}
		s.live -= liveInBuf
		s.dead -= int64(len(s.buf)) - liveInBuf
	} else {
		s.wrote()
		s.size += int64(len(s.buf))
	}
	s.buf = s.buf[:0]
	clear(s.bufItems)
	s.bufItems = s.bufItems[:0]
}

// payload returns it's payload: a fresh copy read from the payload file, or the heap copy
// itself (never modify it).
func (t *table) payload(it *item) ([]byte, error) {
	if it.pay == 0 {
		return t.heapPay[it], nil
	}
	s := t.spill
	if s == nil {
		return nil, ErrClosed // the file went with Close
	}
	if off := it.pay.off(); off >= s.size {
		rec := s.buf[off-s.size:][:it.pay.size()]
		if err := checkRecord(it.pay, rec); err != nil {
			return nil, err
		}
		return bytes.Clone(rec[spillHdr:]), nil
	}
	rec, err := readSpill(s.f, it.pay, nil)
	if err != nil {
		s.readErrors.Add(1)
		return nil, err
	}
	return rec[spillHdr:], nil
}

// dropPayload lets it's payload go: it left the table.
func (t *table) dropPayload(it *item) {
	if it.pay == 0 {
		delete(t.heapPay, it)
		return
	}
	s := t.spill
	n := it.pay.size()
	it.pay = 0
	if s == nil {
		return // closed
	}
	s.live -= n
	s.dead += n
	t.maybeRewriteSpill()
}

// maybeRewriteSpill reclaims the dead bytes once they outnumber the live ones and
// spill.minDead (see the comment at the top of the file).
func (t *table) maybeRewriteSpill() {
	s := t.spill
	if s == nil || s.pins > 0 || s.dead < s.minDead || (s.dead <= s.live && !s.eager) || s.dead < s.retryDead {
		return
	}
	if err := t.rewriteSpill(); err != nil {
		s.retryDead = s.dead + s.minDead
		s.log.Warn("outbox: could not rewrite the payload file; it keeps its dead bytes for now", "path", s.path, "err", err)
	}
}

// rewriteSpill copies the live records, in file order, into a fresh file that replaces
// the old one, with the payloads a failed write left on the heap after them; when there
// are neither, it truncates the file.
func (t *table) rewriteSpill() error {
	s := t.spill
	t.flushSpill()
	if s.live == 0 && len(t.heapPay) == 0 {
		if err := s.f.Truncate(0); err != nil {
			return err
		}
		s.size, s.dead, s.retryDead = 0, 0, 0
		s.rewrites++
		return nil
	}
	type liveRef struct {
		ref payRef
		it  *item
	}
	live := make([]liveRef, 0, t.items.len())
	for _, it := range t.items.all() {
		if it.pay != 0 {
			live = append(live, liveRef{it.pay, it})
		}
	}
	// By offset (the high bits of ref): the reads below go forward through the file. The
	// refs are copied beside the pointers so that sorting does not chase them. sort.Slice
	// rather than slices.SortFunc: a rewrite is rare, and each element type slices.SortFunc
	// sorts adds its own instance of generic code to a binary that is near its size budget.
	sort.Slice(live, func(i, j int) bool { return live[i].ref < live[j].ref })
	tmp := s.path + ".new"
	nf, err := s.create(tmp)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			nf.Close()
			os.Remove(tmp)
		}
	}()
	r := spillReader{f: s.f, end: s.size}
	var out []byte
	var outOff, end int64
	for _, l := range live {
		rec, err := r.record(l.ref)
		if err != nil {
			return err
		}
		if len(out)+len(rec) > spillWindow {
			if _, err := nf.WriteAt(out, outOff); err != nil {
				return err
			}
			outOff += int64(len(out))
			out = out[:0]
		}
		out = append(out, rec...)
		end += int64(len(rec))
	}
	// Payloads a failed write left on the heap come back to the file if it takes them now.
	var back []*item
	var backBytes int64
	for it, p := range t.heapPay {
		if len(p) > maxSpillLen || end+backBytes+spillHdr+int64(len(p)) > maxSpillEnd {
			continue
		}
		if len(out)+spillHdr+len(p) > spillWindow {
			if _, err := nf.WriteAt(out, outOff); err != nil {
				return err
			}
			outOff += int64(len(out))
			out = out[:0]
		}
		out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(p, castagnoli))
		out = append(out, p...)
		back = append(back, it)
		backBytes += spillHdr + int64(len(p))
	}
	if _, err := nf.WriteAt(out, outOff); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return err
	}
	done = true
	// Closing the replaced file frees its pages, which takes milliseconds: the outbox does
	// it once its lock is released (Outbox.unlock, or Close).
	if s.retired != nil {
		s.retired.Close()
	}
	s.retired, s.f = s.f, nf
	var off int64
	for _, l := range live {
		n := l.ref.len()
		l.it.pay = makeRef(off, n)
		off += spillHdr + int64(n)
	}
	for _, it := range back {
		n := len(t.heapPay[it])
		it.pay = makeRef(off, n)
		off += spillHdr + int64(n)
		delete(t.heapPay, it)
	}
	if end != s.live {
		s.log.Error("outbox: payload file accounting was off; corrected by the rewrite", "counted", s.live, "found", end)
	}
	end += backBytes
	s.size, s.live, s.dead, s.retryDead = end, end, 0, 0
	s.rewrites++
	return nil
}
