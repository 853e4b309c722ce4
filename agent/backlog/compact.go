package backlog

import (
	"context"
	"errors"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// deadBytesDue reports whether j's files hold more dead bytes than both floor and live,
// the bytes its live records take. Backlogs compact by dead records (a count:
// Options.CompactAfter) and also by dead bytes, so that large records cannot pile up
// under the count: a deadletter carries the refused message, a forwarded ack the
// terminal's message. A backlog's files then stay within its live bytes plus
// max(floor, live) dead bytes plus the record that crossed it; the open segment's
// reserved blocks and, while a snapshot is written, the snapshot (live) come on top.
func deadBytesDue(j *journal.Journal, live, floor int64) bool {
	return j.Stats().FileBytes-live > max(floor, live)
}

// deadBytesDueLocked reports whether the journal's dead bytes call for a snapshot.
// Checked where records die (reported, written), not on the Add path. Called with mu
// held.
func (b *Backlog) deadBytesDueLocked() bool {
	return deadBytesDue(b.j, int64(b.bytes+b.live*RecordOverhead), SegmentSize)
}

// runCompactor writes a snapshot whenever one is due, until ctx ends.
func (b *Backlog) runCompactor(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.compactC:
		}
		if err := b.compact(); err != nil && !errors.Is(err, journal.ErrClosed) {
			b.log.Error("compacting the backlog's journal failed; it keeps growing until the next try", "err", err)
		}
		b.observe(Compacted)
	}
}

// compact replaces the journal by a snapshot of the backlog. The checkpoint is taken
// without holding mu, so Add never waits for the journal's flush: adds that land between
// the checkpoint and the capture are in the snapshot and again in the segment after it,
// and replay skips the second copy (the seen record closes the snapshot).
func (b *Backlog) compact() error {
	b.compactMu.Lock() // the publisher's and the compactor's goroutines both compact
	defer b.compactMu.Unlock()
	b.mu.Lock()
	before := b.records
	b.mu.Unlock()
	cp, err := b.j.Checkpoint()
	if err != nil {
		return err
	}
	b.mu.Lock()
	live := make([]entry, 0, b.live)
	for _, e := range b.pending {
		if e.payload != nil {
			live = append(live, e)
		}
	}
	next := b.nextID
	// The snapshot holds the live entries not yet written too: a reported record must
	// cover them from now on. (writeDue may still append them after the snapshot: replay
	// skips those, as it does adds that landed between the checkpoint and the capture.)
	b.lastWritten = max(b.lastWritten, next-1)
	// The snapshot, and what came after the checkpoint (counted high: some of those may
	// have landed before it, in the segments the snapshot replaces).
	b.records = len(live) + 1 + b.records - before
	again := b.records-b.live >= b.opt.CompactAfter
	b.mu.Unlock()
	if again { // a burst during the checkpoint: go again once this one is written
		defer poke(b.compactC)
	}
	var buf []byte
	return b.j.WriteSnapshot(cp, func(emit func([]byte) error) error {
		for _, e := range live {
			buf = appendRecord(buf[:0], b.opt.Keyed, e.kind, e.id, e.key, e.payload)
			if err := emit(buf); err != nil {
				return err
			}
		}
		return emit(appendRecord(buf[:0], b.opt.Keyed, kindSeen, next, "", nil))
	})
}
