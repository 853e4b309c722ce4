package journal

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// The writer goroutine and the writes to the open segment it shares with WriteOut
// (writeout.go): batches, fsyncs, rotation, and how a failure is recorded and reported.

// maxSpareBuffer bounds the write buffer kept for the next batch. A batch larger than that
// (a burst, a whitelist's 256 KiB parts) gets a buffer of its own, which goes with it: the
// two buffers would otherwise stay at the largest batch's size, idle, while the process
// runs. Below it a steady stream of batches reuses the same two buffers.
const maxSpareBuffer = 64 << 10

// run is the writer goroutine: it owns the open segment. Every append kicks it; it takes
// everything queued, writes it with one write and one fsync, and wakes the waiters. Appends
// that arrive during the fsync form the next batch: that is the group commit.
//
// SyncBatch adds a pause between batches, not before the first: a batch starts at least
// BatchWindow after the previous one ended. An append that finds the writer idle for that
// long goes at once; under a stream of appends there is still one batch per BatchWindow
// plus one write and fsync.
func (j *Journal) run() {
	var lastEnd time.Time // when the last batch's write and fsync ended (zero: none yet)
	defer func() {
		j.mu.Lock()
		if b := j.open; b != nil { // cannot happen: Close flushes; never strand a waiter
			j.open = nil
			b.err = ErrClosed
			close(b.done)
		}
		j.mu.Unlock()
		close(j.done)
	}()
	for {
		var reply chan checkpointResult
		var rq *resetRequest
		quitting := false
		select {
		case <-j.kick:
		case reply = <-j.ckpt:
		case r := <-j.rset:
			rq = &r
		case <-j.quit:
			quitting = true
		case <-j.lazy:
			// Only lazy records are queued: give them company for up to LazyDelay. This
			// timer is armed only while such records wait; an idle journal has none.
			t := time.NewTimer(j.opts.LazyDelay)
			select {
			case <-t.C:
			case <-j.kick:
			case reply = <-j.ckpt:
			case r := <-j.rset:
				rq = &r
			case <-j.quit:
				quitting = true
			}
			t.Stop()
		}
		if reply == nil && rq == nil && !quitting && j.opts.Sync == SyncBatch && !lastEnd.IsZero() {
			if pause := j.opts.BatchWindow - time.Since(lastEnd); pause > 0 {
				t := time.NewTimer(pause)
				select {
				case <-t.C:
				case <-j.quit:
					quitting = true
				}
				t.Stop()
			}
		}
		if j.flush() {
			lastEnd = time.Now()
		}
		if reply != nil {
			reply <- j.checkpoint()
		}
		if rq != nil {
			rq.reply <- j.reset(rq.write)
		}
		if quitting {
			return
		}
	}
}

// flush writes and fsyncs the open batch, if any, and wakes its waiters. It reports
// whether there was a batch.
func (j *Journal) flush() bool {
	j.wmu.Lock()
	j.mu.Lock()
	bt := j.open
	if j.err != nil {
		// Queued before the journal failed: they fail with it. A failure that WriteOut
		// found is reported here, before the waiters of its records wake.
		err, report := j.err, j.takeUnreportedLocked()
		j.open, j.flushing = nil, bt
		j.buf = j.buf[:0]
		j.mu.Unlock()
		j.wmu.Unlock()
		if report {
			j.reportFailure(err)
		}
		if bt != nil {
			bt.err = err
			close(bt.done)
		}
		j.mu.Lock()
		j.flushing = nil
		j.mu.Unlock()
		return bt != nil
	}
	if bt == nil {
		j.mu.Unlock()
		j.wmu.Unlock()
		return false
	}
	j.open, j.flushing = nil, bt
	b, n := j.buf, bt.last-j.durable
	j.buf, j.spare = j.spare[:0], nil
	j.mu.Unlock()

	// What WriteOut wrote of this batch is in the file already; b holds the rest. The
	// fsync runs without wmu, so a WriteOut meanwhile costs the sender one write, not an
	// fsync; it is covered by this fsync or the next.
	err := j.writeLocked(b, bt.last, false)
	end := j.segSize
	j.wmu.Unlock()
	if err == nil {
		err = j.syncTo(end)
	}
	wrote := err == nil
	if wrote {
		err = j.rotateIfFull()
	}

	j.mu.Lock()
	if wrote {
		j.durable = bt.last
		j.stats.Records += uint64(n)
		j.stats.Batches++
	} else {
		bt.err = err
	}
	if err != nil {
		j.failLocked(err)
	}
	if !j.takeUnreportedLocked() {
		j.flushing = nil
		j.mu.Unlock()
		close(bt.done)
		return true
	}
	ferr := j.err
	j.mu.Unlock()
	// Appends are refused from here on; the waiters wake after OnFailure ran, so whoever
	// sees the error also sees the owner's reaction to it. That includes a Wait that starts
	// now: j.flushing stays set until then, and Wait looks at it before at j.err.
	j.reportFailure(ferr)
	close(bt.done)
	j.mu.Lock()
	j.flushing = nil
	j.mu.Unlock()
	return true
}

// failLocked makes err the error with which the journal refuses appends, unless it has one
// already; the writer goroutine reports it (takeUnreportedLocked). Called with mu held.
func (j *Journal) failLocked(err error) {
	if j.err != nil {
		return
	}
	j.err = err
	j.failed.Store(&err)
	j.unreported = true
}

// takeUnreportedLocked reports whether the journal's failure still has to be reported,
// and marks it reported: the caller calls reportFailure. Called with mu held.
func (j *Journal) takeUnreportedLocked() bool {
	r := j.unreported
	j.unreported = false
	return r
}

// failAndReport makes err the error with which the journal refuses appends (failLocked)
// and reports it (reportFailure) unless the failure was reported already. release, when
// not nil, releases the lock the caller holds (wmu) in between: appends must be refused
// before it is released, and OnFailure runs with no lock held. Called on the writer
// goroutine without mu.
func (j *Journal) failAndReport(err error, release func()) {
	j.mu.Lock()
	j.failLocked(err)
	report := j.takeUnreportedLocked()
	j.mu.Unlock()
	if release != nil {
		release()
	}
	if report {
		j.reportFailure(err)
	}
}

// reportFailure logs err, with which the journal now refuses appends, and hands it to
// OnFailure. Called once, on the writer goroutine, with no lock held.
func (j *Journal) reportFailure(err error) {
	j.log.Error("journal refuses appends", "dir", j.dir, "err", err)
	if j.opts.OnFailure != nil {
		j.opts.OnFailure(err)
	}
}

// writeLocked writes the frames b, the records up to upto, at the end of the open segment
// and recycles b. Called with wmu held, by the writer goroutine and by WriteOut (byWriteOut,
// for the stats). A failed write is cut off, so that the file ends at its last whole
// record, and makes the journal refuse appends before wmu is released: no later record may
// reach the file after a lost one.
func (j *Journal) writeLocked(b []byte, upto Seq, byWriteOut bool) error {
	var err error
	if len(b) > 0 {
		if _, werr := j.seg.WriteAt(b, j.segSize); werr != nil {
			path := j.segPath(j.segNum)
			terr := j.seg.Truncate(j.segSize)
			if errors.Is(werr, syscall.ENOSPC) && terr == nil {
				err = fmt.Errorf("%w: writing %s: %v", ErrNoSpace, path, werr)
			} else {
				err = fmt.Errorf("%w: writing %s: %v", ErrFailed, path, errors.Join(werr, terr))
			}
		} else {
			j.segSize += int64(len(b))
			j.openBytes.Store(j.segSize)
		}
	}
	j.mu.Lock()
	if cap(b) <= maxSpareBuffer { // a large batch's buffer would stay, idle, after it
		j.spare = b[:0]
	}
	if err != nil {
		j.failLocked(err)
		j.mu.Unlock()
		return err
	}
	j.stats.Bytes += uint64(len(b))
	if byWriteOut {
		j.stats.WriteOuts++
	}
	j.mu.Unlock()
	j.written.Store(uint64(upto))
	return nil
}

// syncTo fsyncs the open segment, which holds at least end bytes, unless SyncNone. After a
// failed fsync the kernel's view of the file is unknown: the journal refuses appends (before
// wmu is released, as after a failed write) and cuts the file back to what the previous
// fsync covered, best effort. Called by the writer goroutine without wmu.
func (j *Journal) syncTo(end int64) error {
	if j.opts.Sync == SyncNone {
		return nil
	}
	err := j.seg.Sync() // seg changes only on this goroutine
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if err == nil {
		j.syncedSize = max(j.syncedSize, end)
		return nil
	}
	path := j.segPath(j.segNum)
	if errors.Is(err, syscall.ENOSPC) {
		err = fmt.Errorf("%w: fsync %s: %v", ErrNoSpace, path, err)
	} else {
		err = fmt.Errorf("%w: fsync %s: %v", ErrFailed, path, err)
	}
	j.mu.Lock()
	j.failLocked(err)
	j.mu.Unlock()
	j.seg.Truncate(j.syncedSize) // best effort
	j.segSize = j.syncedSize
	j.openBytes.Store(j.segSize)
	return err
}

// rotateIfFull starts a new segment once the open one has reached SegmentSize. Called by
// the writer goroutine without wmu.
func (j *Journal) rotateIfFull() error {
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if j.segSize < j.opts.SegmentSize {
		return nil
	}
	err := j.rotate()
	if err != nil {
		j.mu.Lock()
		j.failLocked(err) // before wmu is released: the segment may be closed
		j.mu.Unlock()
	}
	return err
}

// rotate seals the open segment and starts the next one. Called with wmu held.
func (j *Journal) rotate() error {
	j.releaseReserved() // before the fsync, which makes the release durable too
	if j.opts.Sync != SyncNone {
		if err := j.seg.Sync(); err != nil {
			return fmt.Errorf("%w: fsync %s: %v", ErrFailed, j.segPath(j.segNum), err)
		}
	}
	if err := j.seg.Close(); err != nil {
		return fmt.Errorf("%w: close %s: %v", ErrFailed, j.segPath(j.segNum), err)
	}
	j.seg = nil
	f, reserved, err := j.createSegment(j.segNum + 1)
	if err != nil {
		return err
	}
	sealed := j.segSize
	j.seg, j.segSize, j.syncedSize, j.segReserved = f, fileHeaderSize, fileHeaderSize, reserved
	j.mu.Lock()
	j.sealedBytes[j.segNum] = sealed
	j.openBytes.Store(fileHeaderSize)
	j.segNum++
	j.mu.Unlock()
	return nil
}

// createSegment creates segment num with its header and its blocks preallocated, durably.
// It reports whether blocks may be reserved beyond the file's end (preallocateSegment).
func (j *Journal) createSegment(num uint64) (File, bool, error) {
	path := j.segPath(num)
	f, err := j.fs.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false, j.ioErr("create", path, err)
	}
	// Before the first fsync, which then commits the allocation with the header, so that
	// the first batch's fsync does not carry it.
	reserved := j.preallocateSegment(f, path)
	if _, err := f.WriteAt(appendFileHeader(nil, segmentKind, num), 0); err != nil {
		f.Close()
		return nil, false, j.ioErr("write header of", path, err)
	}
	if j.opts.Sync != SyncNone {
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, false, j.ioErr("fsync", path, err)
		}
		if err := j.fs.SyncDir(j.dir); err != nil {
			f.Close()
			return nil, false, j.ioErr("fsync directory", j.dir, err)
		}
	}
	return f, reserved, nil
}

// preallocateSegment reserves the blocks of the first SegmentSize bytes of the segment f,
// which appends will fill, without changing its size (package doc, "Segment
// preallocation"). It reports whether blocks may now be reserved beyond f's end. A failure
// is only logged: preallocation saves write stalls, and tmpfs or a filesystem without
// fallocate (some network and FUSE filesystems) is quietly left alone.
func (j *Journal) preallocateSegment(f File, path string) bool {
	if j.opts.noPreallocate {
		return false
	}
	reserved, err := preallocate(f, j.opts.SegmentSize)
	if err != nil {
		j.log.Warn("journal: cannot preallocate segment", "file", path, "bytes", j.opts.SegmentSize, "err", err)
	}
	return reserved
}

// releaseReserved frees the blocks preallocated beyond the end of the open segment, which
// is about to be sealed or closed: ftruncate to its own size (on ext4 this drops blocks
// fallocate reserved past the end). A failure is only logged; the blocks then stay with the
// file until it is deleted. Called with wmu held.
func (j *Journal) releaseReserved() {
	if !j.segReserved {
		return
	}
	j.segReserved = false
	if err := j.seg.Truncate(j.segSize); err != nil {
		j.log.Warn("journal: cannot release preallocated blocks", "file", j.segPath(j.segNum), "err", err)
	}
}
