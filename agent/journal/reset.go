package journal

import (
	"errors"
	"os"
)

// Reset replaces the journal's whole content by the records write emits and, if the
// journal refuses appends after a failed write or fsync (ErrNoSpace, ErrFailed), makes it
// take appends again. It is the way back from a full disk for an owner that holds its whole
// state in memory (the broker's sessions): once space is free, Reset with that state, and
// the journal goes on without a Close and Open, and without reading a byte of the files the
// failure may have left in doubt.
//
// write is called once with an emit function, as by WriteSnapshot; it runs on the
// journal's writer goroutine, so it must not call the journal's methods. The caller must
// not append concurrently: the state it emits must be the whole state. Every record
// appended before Reset that was not durable when the journal failed is lost for good:
// Wait for it returns the error it failed with, and so does Wait for it later.
//
// The records go to a new snapshot (temporary file, fsync, rename, fsync of the directory),
// then a new segment is created and the older files are deleted; a crash at any point
// leaves either the old files or the new snapshot, as with WriteSnapshot. If Reset fails,
// nothing changed (the journal still refuses appends if it did, and takes them if it did),
// except when the new snapshot was already in place but the new segment could not be
// created: the journal then refuses appends (the old segment is superseded) and a later
// Reset starts over. Reset needs as much free space as the records take.
func (j *Journal) Reset(write func(emit func(rec []byte) error) error) error {
	reply := make(chan error, 1)
	select {
	case j.rset <- resetRequest{write: write, reply: reply}:
	case <-j.done:
		return ErrClosed
	}
	return <-reply
}

type resetRequest struct {
	write func(emit func([]byte) error) error
	reply chan error
}

// lostRecords are the records from..to that a Reset dropped after they failed with err.
type lostRecords struct {
	from, to Seq
	err      error
}

// maxLostRanges bounds Journal.lost: a Wait for a record lost that many Resets ago (which
// nobody makes) finds it no longer and reports ErrClosed, as for a number never issued.
const maxLostRanges = 16

// lostLocked returns the error with which record seq failed if a Reset dropped it. Called
// with mu held.
func (j *Journal) lostLocked(seq Seq) error {
	for i := len(j.lost) - 1; i >= 0; i-- {
		if l := j.lost[i]; seq >= l.from && seq <= l.to {
			return l.err
		} else if seq > l.to {
			break
		}
	}
	return nil
}

// reset runs Reset's work on the writer goroutine, after a flush: every batch accepted
// before it is settled (durable, or failed with the journal).
func (j *Journal) reset(write func(emit func([]byte) error) error) error {
	j.snapMu.Lock() // no compaction meanwhile: it would delete files by the old numbers
	defer j.snapMu.Unlock()
	j.mu.Lock()
	closed, first, oldSnap, num := j.closed, j.firstSeg, j.snapNum, j.segNum+1
	j.mu.Unlock()
	if closed {
		return ErrClosed
	}
	// The snapshot replaces every segment there is: it is numbered after the open one, and
	// the segment it names is the one appends go to from now on.
	size, renamed, err := j.writeSnapshotFile(num, write)
	if err != nil {
		if renamed {
			// In place but not known durable: it supersedes the open segment, so it goes
			// again, or nothing more may be appended there.
			if rerr := j.fs.Remove(j.snapPath(num)); rerr != nil && !os.IsNotExist(rerr) {
				j.failAndReport(err, nil)
			}
		}
		return err
	}
	j.wmu.Lock()
	f, reserved, err := j.createSegment(num)
	if err != nil {
		// The old segment is superseded by the snapshot now: nothing more may go into it.
		j.failAndReport(err, j.wmu.Unlock)
		return err
	}
	old := j.seg
	if old != nil {
		j.releaseReserved()
	}
	j.seg, j.segSize, j.syncedSize, j.segReserved = f, fileHeaderSize, fileHeaderSize, reserved
	j.openBytes.Store(fileHeaderSize)
	j.mu.Lock()
	if j.err != nil {
		// Appends are refused since the failure and the flush before this failed every
		// batch accepted earlier: the records not durable are every one issued since.
		if last := j.next - 1; last > j.durable {
			if len(j.lost) == maxLostRanges {
				j.lost = append(j.lost[:0], j.lost[1:]...)
			}
			j.lost = append(j.lost, lostRecords{from: j.durable + 1, to: last, err: j.err})
			j.durable = last
		}
		j.err = nil
		j.failed.Store(nil)
		j.unreported = false
	}
	j.written.Store(uint64(j.next - 1))
	j.segNum, j.firstSeg, j.snapNum, j.snapBytes = num, num, num, size
	clear(j.sealedBytes)
	j.stats.Resets++
	j.mu.Unlock()
	j.wmu.Unlock()
	if old != nil {
		old.Close() // its content is superseded; a failed fsync made its state unknown anyway
	}
	// The new state is durable: the old files can go. One that stays is removed by the next
	// Open (a leftover of a compaction), so a failure here is only logged.
	var rmErr error
	for n := first; n < num; n++ {
		if err := j.fs.Remove(j.segPath(n)); err != nil && !os.IsNotExist(err) {
			rmErr = errors.Join(rmErr, err)
		}
	}
	if oldSnap > 0 {
		if err := j.fs.Remove(j.snapPath(oldSnap)); err != nil && !os.IsNotExist(err) {
			rmErr = errors.Join(rmErr, err)
		}
	}
	if err := j.fs.SyncDir(j.dir); err != nil {
		rmErr = errors.Join(rmErr, err)
	}
	if rmErr != nil {
		j.log.Warn("journal: reset: old files not removed; the next Open removes them", "dir", j.dir, "err", rmErr)
	}
	return nil
}
