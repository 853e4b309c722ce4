package journal

// WriteOut hands every record queued so far — lazy ones included — to the operating system
// with one write(2), without fsync, and returns once they are in the file. From then on
// they survive the death of the process (SIGKILL, a panic, the OOM killer): the kernel
// keeps what was written. They do not yet survive a power cut or a kernel crash; the
// writer goroutine fsyncs them as it does any record (with the next batch somebody waits for, or
// within LazyDelay), and Wait is still the way to know a record is durable.
//
// The outbox's owner calls it before a command goes out on the wire, so that after a kill
// the journal knows every command that was sent and every ack taken in before it (package
// doc, "Process death and power loss").
//
// It is cheap and safe for concurrent use. With nothing queued since the last write it
// costs two atomic loads. Concurrent callers coalesce: one writes everything queued, and a
// caller whose records somebody else wrote meanwhile returns without a write of its own.
// The records go to the file in the order they were appended, after those of the batch the
// writer goroutine may be writing at the time (WriteOut waits for that write, not for its
// fsync; but for a segment rotation in progress, fsyncs included).
//
// WriteOut returns the error with which the journal refuses appends (its records may not
// all be in the file, and the journal writes nothing more), ErrClosed once Close began and
// something is still queued, or nil. A nil holds until the file is cut: a later failed
// fsync makes the journal cut the file back to what the last good fsync covered, records
// written out since included (package doc, "Invariants").
func (j *Journal) WriteOut() error {
	if p := j.failed.Load(); p != nil {
		return *p
	}
	last := j.issued.Load()
	if j.written.Load() >= last {
		return nil
	}
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if j.written.Load() >= last {
		return nil // somebody else's write took ours along
	}
	j.mu.Lock()
	switch {
	case j.err != nil:
		err := j.err
		j.mu.Unlock()
		return err
	case j.closed || j.seg == nil:
		j.mu.Unlock()
		return ErrClosed
	case len(j.buf) == 0: // cannot happen: what is not written is in buf, or failed
		j.mu.Unlock()
		return nil
	}
	b, upto := j.buf, j.next-1
	j.buf, j.spare = j.spare[:0], nil
	j.mu.Unlock()
	if err := j.writeLocked(b, upto, true); err != nil {
		j.wake(j.kick) // the writer reports the failure and fails the waiters
		return err
	}
	return nil
}
