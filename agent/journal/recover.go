package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Recovery reports what Open found in the directory.
type Recovery struct {
	Snapshot        string // the snapshot replay starts from ("" when none)
	SnapshotRecords int    // records in it
	Segments        int    // segment files replayed
	Records         int    // records in the segments
	// TornTail is the file whose damaged end was cut off ("" when the tail was clean), at
	// TornOffset, TornBytes long. A torn tail is the unfinished last batch of a crash: none
	// of its records was acknowledged.
	TornTail   string
	TornOffset int64
	TornBytes  int64
	// Lost lists damaged ranges skipped because of Options.SkipCorrupt.
	Lost []Loss
}

// Loss is a damaged byte range that recovery skipped (Options.SkipCorrupt).
type Loss struct {
	File   string
	Offset int64
	Bytes  int64
	Err    error
}

// fileSet is the live files of a directory in replay order.
type fileSet struct {
	snapshot uint64   // 0: none
	segments []uint64 // ascending, contiguous, all >= snapshot
}

func (j *Journal) listFiles() (fileSet, error) {
	names, err := j.fs.ReadDir(j.dir)
	if err != nil {
		return fileSet{}, fmt.Errorf("journal: %w", err)
	}
	var fs fileSet
	var segs, snaps []uint64
	for _, name := range names {
		switch {
		case strings.HasSuffix(name, tempExt):
			// An unfinished snapshot from a crash during compaction: never renamed, never used.
			if err := j.fs.Remove(filepath.Join(j.dir, name)); err != nil {
				return fileSet{}, fmt.Errorf("journal: removing %s: %w", name, err)
			}
		case strings.HasSuffix(name, segmentExt):
			if n, err := strconv.ParseUint(strings.TrimSuffix(name, segmentExt), 10, 64); err == nil {
				segs = append(segs, n)
			}
		case strings.HasSuffix(name, snapshotExt):
			if n, err := strconv.ParseUint(strings.TrimSuffix(name, snapshotExt), 10, 64); err == nil {
				snaps = append(snaps, n)
			}
		}
	}
	slices.Sort(segs)
	slices.Sort(snaps)
	if len(snaps) > 0 {
		fs.snapshot = snaps[len(snaps)-1]
	}
	for _, n := range segs {
		if n >= fs.snapshot {
			fs.segments = append(fs.segments, n)
		}
	}
	for i := 1; i < len(fs.segments); i++ {
		if fs.segments[i] != fs.segments[i-1]+1 {
			return fileSet{}, fmt.Errorf("journal: segment %d missing between %s and %s",
				fs.segments[i-1]+1, j.segPath(fs.segments[i-1]), j.segPath(fs.segments[i]))
		}
	}
	if fs.snapshot > 0 && len(fs.segments) > 0 && fs.segments[0] != fs.snapshot {
		return fileSet{}, fmt.Errorf("journal: snapshot %s is followed by %s; segment %d is missing",
			j.snapPath(fs.snapshot), j.segPath(fs.segments[0]), fs.snapshot)
	}
	// Leftovers of a compaction that crashed after its rename: already covered by the snapshot.
	for _, n := range segs {
		if n < fs.snapshot {
			j.fs.Remove(j.segPath(n))
		}
	}
	for _, n := range snaps[:max(0, len(snaps)-1)] {
		j.fs.Remove(j.snapPath(n))
	}
	return fs, nil
}

// scanResult is what scanning one file found.
type scanResult struct {
	records  int
	validEnd int  // offset after the last valid frame (the file's new length if torn)
	torn     bool // the damage reached the end of the last segment: cut it off
	lost     []Loss
	number   uint64
	emptyHdr bool // last segment without a complete header (crash right after creation)
}

// scan validates data (the contents of path) and calls fn for every valid record. last says
// the file is the newest segment, the only place a torn tail may be.
func (j *Journal) scan(path string, data []byte, kind [6]byte, last bool, fn func([]byte) error) (scanResult, error) {
	var r scanResult
	num, err := parseFileHeader(data, kind)
	if err != nil {
		if last && kind == segmentKind && len(data) <= fileHeaderSize {
			r.emptyHdr = true
			return r, nil
		}
		return r, &CorruptError{File: path, Offset: 0, Err: err}
	}
	r.number = num
	maxRec := j.opts.MaxRecordSize
	off := fileHeaderSize
	for off < len(data) {
		p, next, err := readFrame(data, off, maxRec)
		if err == nil {
			r.records++
			if fn != nil {
				if err := fn(p); err != nil {
					return r, err
				}
			}
			off = next
			continue
		}
		nv := nextValidFrame(data, off, maxRec)
		if nv < 0 && last {
			r.torn = true
			break
		}
		if !j.opts.SkipCorrupt {
			return r, &CorruptError{File: path, Offset: int64(off), Err: err}
		}
		end := nv
		if nv < 0 {
			end = len(data)
		}
		r.lost = append(r.lost, Loss{File: path, Offset: int64(off), Bytes: int64(end - off), Err: err})
		off = end
	}
	r.validEnd = off
	return r, nil
}

// recover validates the directory, cuts a torn tail, and opens the last segment for appends.
func (j *Journal) recover() error {
	files, err := j.listFiles()
	if err != nil {
		return err
	}
	var rec Recovery
	var buf []byte // one read buffer for every file
	if files.snapshot > 0 {
		path := j.snapPath(files.snapshot)
		data, err := j.fs.ReadFile(path, buf)
		buf = data
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		r, err := j.scan(path, data, snapshotKind, false, nil)
		if err != nil {
			return err
		}
		rec.Snapshot, rec.SnapshotRecords, rec.Lost = path, r.records, r.lost
		j.snapNum, j.snapBytes = files.snapshot, int64(len(data))
	}
	if len(files.segments) == 0 {
		first := max(files.snapshot, 1)
		f, reserved, err := j.createSegment(first)
		if err != nil {
			return err
		}
		j.seg, j.segNum, j.segSize, j.firstSeg, j.segReserved = f, first, fileHeaderSize, first, reserved
		j.recovery = rec
		return nil
	}
	for i, n := range files.segments {
		path := j.segPath(n)
		last := i == len(files.segments)-1
		data, err := j.fs.ReadFile(path, buf)
		buf = data
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		r, err := j.scan(path, data, segmentKind, last, nil)
		if err != nil {
			return err
		}
		if !r.emptyHdr && r.number != n {
			return &CorruptError{File: path, Offset: 8, Err: fmt.Errorf("%w: header says segment %d", ErrBadFormat, r.number)}
		}
		rec.Segments++
		rec.Records += r.records
		rec.Lost = append(rec.Lost, r.lost...)
		if !last {
			j.sealedBytes[n] = int64(len(data))
			continue
		}
		if r.emptyHdr {
			f, reserved, err := j.createSegment(n)
			if err != nil {
				return err
			}
			j.seg, j.segSize, j.segReserved = f, fileHeaderSize, reserved
		} else {
			f, err := j.fs.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				return fmt.Errorf("journal: %w", err)
			}
			j.seg, j.segSize = f, int64(r.validEnd)
			if r.torn || r.validEnd < len(data) {
				rec.TornTail, rec.TornOffset, rec.TornBytes = path, int64(r.validEnd), int64(len(data)-r.validEnd)
				j.log.Warn("journal: cutting torn tail", "file", path, "offset", r.validEnd, "bytes", len(data)-r.validEnd)
				if err := f.Truncate(int64(r.validEnd)); err != nil {
					return j.ioErr("truncate", path, err)
				}
				if err := f.Sync(); err != nil {
					return j.ioErr("fsync", path, err)
				}
			}
			// Appends continue here: reserve its blocks again (a no-op where they are
			// still reserved, after a kill; the file's size stays validEnd).
			j.segReserved = j.preallocateSegment(f, path)
		}
		j.segNum = n
	}
	j.firstSeg = files.segments[0]
	for _, l := range rec.Lost {
		j.log.Error("journal: skipped damaged records", "file", l.File, "offset", l.Offset, "bytes", l.Bytes, "err", l.Err)
	}
	j.recovery = rec
	return nil
}

// Replay calls fn for every record in order: the snapshot's first, then the segments'. The
// slice passed to fn is valid only until fn returns. An error from fn stops the replay and
// is returned. Replay must be called before the first append; it may be called more than once.
func (j *Journal) Replay(fn func(rec []byte) error) error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	if j.appended {
		j.mu.Unlock()
		return ErrReplayAfterAppend
	}
	snap, first, last := j.snapNum, j.firstSeg, j.segNum
	j.mu.Unlock()
	var buf []byte // one read buffer for every file: records are valid only until fn returns
	if snap > 0 {
		path := j.snapPath(snap)
		data, err := j.fs.ReadFile(path, buf)
		buf = data
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		if _, err := j.scan(path, data, snapshotKind, false, fn); err != nil {
			return err
		}
	}
	for n := first; n <= last; n++ {
		path := j.segPath(n)
		data, err := j.fs.ReadFile(path, buf)
		buf = data
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		if len(data) <= fileHeaderSize {
			continue
		}
		// After recovery the last segment ends at a valid frame, so "last" only matters if
		// something damaged the file since Open; treat it like any other damage then.
		if _, err := j.scan(path, data, segmentKind, false, fn); err != nil {
			var ce *CorruptError
			if errors.As(err, &ce) {
				return fmt.Errorf("journal: file changed since Open: %w", err)
			}
			return err
		}
	}
	return nil
}
