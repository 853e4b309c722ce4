package backlog

// Write-behind (Options.Durability WriteBehind): records are appended only for entries
// still waiting their delay after they came, and a reported record only when the journal
// holds one of the entries it covers.

import (
	"errors"
	"slices"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// armWriteLocked runs writeDue after d. Called with mu held.
func (b *Backlog) armWriteLocked(d time.Duration) {
	b.writeArmed = true
	if b.writeTimer == nil {
		b.writeTimer = time.AfterFunc(d, b.writeDue)
		return
	}
	b.writeTimer.Reset(d)
}

// writeDue appends the records of the live entries that have waited writeDelay, and
// arms itself again for the next one due. It runs on its timer's goroutine.
func (b *Backlog) writeDue() {
	b.mu.Lock()
	b.writeArmed = false
	if b.closing {
		b.mu.Unlock()
		return
	}
	n := b.writeDueLocked()
	compact := b.records-b.live >= b.opt.CompactAfter || b.deadBytesDueLocked()
	b.mu.Unlock()
	if n > 0 {
		b.observe(Written)
	}
	if compact {
		poke(b.compactC)
	}
}

// writeDueLocked appends the records of the unwritten live entries added writeDelay ago
// or earlier (all of them with a writeDelay of 0, or after Close began), in id order,
// and arms the timer for the first one not yet due. It returns how many it appended.
// Called with mu held; a durable backlog has nothing unwritten.
func (b *Backlog) writeDueLocked() int {
	if b.durable {
		return 0
	}
	cut := time.Since(b.epoch) - b.writeDelay
	i, _ := slices.BinarySearchFunc(b.pending, b.writtenThrough+1, func(e entry, id uint64) int { return cmpID(e.id, id) })
	n := 0
	for ; i < len(b.pending); i++ {
		e := &b.pending[i]
		if e.added > cut && !b.closing {
			b.armWriteLocked(e.added - cut)
			break
		}
		b.writtenThrough = e.id
		if e.payload == nil {
			continue // superseded or dropped before it was due: replay needs no trace of it
		}
		b.scratch = appendRecord(b.scratch[:0], b.opt.Keyed, e.kind, e.id, e.key, e.payload)
		if _, err := b.j.AppendAsync(b.scratch); err != nil {
			// The entries stay in the backlog (published while the process lives) but are
			// not durable; adds are refused from now on.
			b.journalFailedLocked(err)
			b.writtenThrough = b.nextID - 1
			break
		}
		b.lastWritten = e.id
		b.records++
		n++
	}
	return n
}

// journalFailedLocked records that the journal refused an append. Called with mu held.
func (b *Backlog) journalFailedLocked(err error) {
	if b.journalErr != nil {
		return
	}
	b.journalErr = err
	if !b.failedLog && !errors.Is(err, journal.ErrClosed) {
		b.failedLog = true
		b.log.Error("the backlog's journal refuses appends; nothing more is taken until a restart", "err", err)
	}
}

// recordGoneLocked appends (lazily: losing it in a crash only sends those again) a
// reported record saying that every entry up to id left the backlog — only when the
// journal holds an add record it does not yet cover. Called with mu held.
func (b *Backlog) recordGoneLocked(id uint64) error {
	if b.lastWritten <= b.reportedThrough || id <= b.reportedThrough {
		return nil
	}
	b.scratch = appendRecord(b.scratch[:0], b.opt.Keyed, kindReported, id, "", nil)
	_, err := b.j.AppendLazy(b.scratch)
	b.records++
	b.reportedThrough = id
	return err
}
