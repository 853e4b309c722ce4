package journal

import (
	"fmt"
	"os"
)

// Checkpoint marks a point in the log: every record appended before Checkpoint was called
// lies in a segment older than Checkpoint.Segment, every record appended after it returns in
// that segment or a newer one.
type Checkpoint struct {
	Segment uint64
}

type checkpointResult struct {
	cp  Checkpoint
	err error
}

// Checkpoint writes what is queued, then starts a new segment (unless the open one holds no
// records yet) and returns the point a snapshot may replace the log up to. The caller must
// not append concurrently if it needs the snapshot to match an exact state: hold the lock
// that orders your appends across Checkpoint and the capture of your state.
func (j *Journal) Checkpoint() (Checkpoint, error) {
	reply := make(chan checkpointResult, 1)
	select {
	case j.ckpt <- reply:
	case <-j.done:
		return Checkpoint{}, ErrClosed
	}
	r := <-reply
	return r.cp, r.err
}

// checkpoint runs on the writer goroutine after a flush.
func (j *Journal) checkpoint() checkpointResult {
	j.wmu.Lock()
	if err := j.Err(); err != nil {
		j.wmu.Unlock()
		return checkpointResult{err: err}
	}
	if j.segSize > fileHeaderSize {
		if err := j.rotate(); err != nil {
			// The segment may be closed now: appends must be refused (before wmu is
			// released, so that no WriteOut finds it closed), and the owner told, as after
			// a failed batch.
			j.failAndReport(err, j.wmu.Unlock)
			return checkpointResult{err: err}
		}
	}
	j.mu.Lock()
	cp := Checkpoint{Segment: j.segNum}
	j.mu.Unlock()
	j.wmu.Unlock()
	return checkpointResult{cp: cp}
}

// WriteSnapshot writes a snapshot that replaces every segment older than cp.Segment, then
// deletes those segments and older snapshots. write is called once with an emit function;
// each emitted record goes into the snapshot (records are copied; the slice may be reused).
//
// The snapshot is written to a temporary file, fsynced, renamed into place, and the
// directory is fsynced before anything is deleted, so a crash at any point leaves either
// the old segments or the complete snapshot.
func (j *Journal) WriteSnapshot(cp Checkpoint, write func(emit func(rec []byte) error) error) error {
	j.snapMu.Lock()
	defer j.snapMu.Unlock()
	j.mu.Lock()
	closed, first, oldSnap := j.closed, j.firstSeg, j.snapNum
	j.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if cp.Segment <= first {
		return nil // nothing older to replace
	}
	off, renamed, err := j.writeSnapshotFile(cp.Segment, write)
	if err != nil {
		if renamed {
			// In place but not known durable, and not recorded: the segments it would
			// replace stay, and nothing else would delete it before the next Open.
			_ = j.fs.Remove(j.snapPath(cp.Segment))
		}
		return err
	}
	// The snapshot is durable: the files it replaces can go. A crash from here on leaves
	// leftovers that Open removes.
	for n := first; n < cp.Segment; n++ {
		if err := j.fs.Remove(j.segPath(n)); err != nil && !os.IsNotExist(err) {
			return j.ioErr("remove", j.segPath(n), err)
		}
	}
	if oldSnap > 0 && oldSnap != cp.Segment {
		if err := j.fs.Remove(j.snapPath(oldSnap)); err != nil && !os.IsNotExist(err) {
			return j.ioErr("remove", j.snapPath(oldSnap), err)
		}
	}
	j.mu.Lock()
	j.snapNum = cp.Segment
	j.firstSeg = cp.Segment
	j.snapBytes = off
	for n := range j.sealedBytes {
		if n < cp.Segment {
			delete(j.sealedBytes, n)
		}
	}
	j.stats.Snapshots++
	j.mu.Unlock()
	return j.fs.SyncDir(j.dir)
}

// writeSnapshotFile writes the snapshot numbered num with the records write emits, durably
// (temporary file, fsync, rename, fsync of the directory), and returns its size. On an error
// renamed says whether the snapshot is in place nevertheless (the directory's fsync failed).
func (j *Journal) writeSnapshotFile(num uint64, write func(emit func([]byte) error) error) (size int64, renamed bool, err error) {
	final := j.snapPath(num)
	tmp := final + tempExt
	f, err := j.fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	if err != nil {
		return 0, false, j.ioErr("create", tmp, err)
	}
	fail := func(err error) (int64, bool, error) {
		f.Close()
		j.fs.Remove(tmp)
		return 0, false, err
	}
	buf := appendFileHeader(make([]byte, 0, 1<<16), snapshotKind, num)
	var off int64
	flush := func() error {
		if _, err := f.WriteAt(buf, off); err != nil {
			return j.ioErr("write", tmp, err)
		}
		off += int64(len(buf))
		buf = buf[:0]
		return nil
	}
	emit := func(rec []byte) error {
		if len(rec) == 0 {
			return ErrEmptyRecord
		}
		if len(rec) > j.opts.MaxRecordSize {
			return fmt.Errorf("%w: %d bytes", ErrTooLarge, len(rec))
		}
		buf = appendFrame(buf, rec)
		if len(buf) >= 1<<20 {
			return flush()
		}
		return nil
	}
	if err := write(emit); err != nil {
		return fail(err)
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(j.ioErr("fsync", tmp, err))
	}
	if err := f.Close(); err != nil {
		j.fs.Remove(tmp)
		return 0, false, j.ioErr("close", tmp, err)
	}
	if err := j.fs.Rename(tmp, final); err != nil {
		j.fs.Remove(tmp)
		return 0, false, j.ioErr("rename", tmp, err)
	}
	if err := j.fs.SyncDir(j.dir); err != nil {
		return 0, true, j.ioErr("fsync directory", j.dir, err)
	}
	return off, true, nil
}
