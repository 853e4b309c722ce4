package agent

// The forward log's write-behind (see forwarder): records are appended only for messages
// still waiting forwardLazyDelay after they came, and a reported record only when the
// journal holds one of the messages it covers.

import (
	"errors"
	"slices"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// armWriteLocked runs writeDue after d. Called with mu held.
func (f *forwarder) armWriteLocked(d time.Duration) {
	f.writeArmed = true
	if f.writeTimer == nil {
		f.writeTimer = time.AfterFunc(d, f.writeDue)
		return
	}
	f.writeTimer.Reset(d)
}

// writeDue appends the records of the live entries that have waited writeDelay, and
// arms itself again for the next one due. It runs on its timer's goroutine.
func (f *forwarder) writeDue() {
	f.mu.Lock()
	f.writeArmed = false
	if f.closing {
		f.mu.Unlock()
		return
	}
	n := f.writeDueLocked()
	compact := f.records-f.live >= f.compactAfter || f.deadBytesDueLocked()
	f.mu.Unlock()
	if n > 0 {
		poke(f.written)
	}
	if compact {
		poke(f.compactC)
	}
}

// writeDueLocked appends the records of the unwritten live entries added writeDelay ago
// or earlier (all of them with a writeDelay of 0, or after close began), in id order,
// and arms the timer for the first one not yet due. It returns how many it appended.
// Called with mu held.
func (f *forwarder) writeDueLocked() int {
	cut := time.Since(f.epoch) - f.writeDelay
	i, _ := slices.BinarySearchFunc(f.pending, f.writtenThrough+1, func(e fwdEntry, id uint64) int { return cmpID(e.id, id) })
	n := 0
	for ; i < len(f.pending); i++ {
		e := &f.pending[i]
		if e.added > cut && !f.closing {
			f.armWriteLocked(e.added - cut)
			break
		}
		f.writtenThrough = e.id
		if e.payload == nil {
			continue // superseded or dropped before it was due: replay needs no trace of it
		}
		f.scratch = appendForwardRecord(f.scratch[:0], e.kind, e.id, e.device, e.payload)
		if _, err := f.j.AppendAsync(f.scratch); err != nil {
			// The entries stay in the backlog (published while the process lives) but are
			// not durable; adds are refused from now on.
			f.journalFailedLocked(err)
			f.writtenThrough = f.nextID - 1
			break
		}
		f.lastWritten = e.id
		f.records++
		n++
	}
	return n
}

// journalFailedLocked records that the journal refused an append. Called with mu held.
func (f *forwarder) journalFailedLocked(err error) {
	if f.journalErr != nil {
		return
	}
	f.journalErr = err
	if !f.failedLog && !errors.Is(err, journal.ErrClosed) {
		f.failedLog = true
		f.log.Error("the forward log refuses appends; acks and heartbeats are not forwarded until a restart", "err", err)
	}
}

// recordGoneLocked appends (lazily: losing it in a crash only sends those again) a
// reported record saying that every entry up to id left the backlog — only when the
// journal holds an add record it does not yet cover. Called with mu held.
func (f *forwarder) recordGoneLocked(id uint64) error {
	if f.lastWritten <= f.reportedThrough || id <= f.reportedThrough {
		return nil
	}
	f.scratch = appendForwardRecord(f.scratch[:0], fwdRecordReported, id, "", nil)
	_, err := f.j.AppendLazy(f.scratch)
	f.records++
	f.reportedThrough = id
	return err
}
