package backlog

import (
	"context"
	"errors"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// A Backlog is the Source of its own Drainer (Start).

// Take appends up to n live entries from the head of the backlog to batch.
func (b *Backlog) Take(batch []Message, n int) ([]Message, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := 0
	for ; i < len(b.pending) && len(batch) < n; i++ {
		if e := &b.pending[i]; e.payload != nil {
			batch = append(batch, Message{ID: e.id, Kind: e.kind, Topic: b.topic(e.kind, e.key), Payload: e.payload})
		}
	}
	if len(batch) == 0 && len(b.pending) > 0 {
		// Only dead entries. Replay would make them dead again only if it had their
		// killers' records, which write-behind may never have written: a reported record
		// covers them, if the journal holds one of them.
		_ = b.recordGoneLocked(b.pending[len(b.pending)-1].id)
		clear(b.pending)
		b.resetPending()
	}
	return batch, b.live > len(batch), nil
}

// topic is the upstream topic of an entry, cached per kind and key. The cache is read
// and written by Take only, which the one publishing goroutine calls.
func (b *Backlog) topic(kind byte, key string) string {
	k := coalesceKey{kind, key}
	t, ok := b.topics[k]
	if !ok {
		t = b.opt.Topic(kind, key)
		if len(b.topics) >= maxTopicCache {
			clear(b.topics)
		}
		b.topics[k] = t
	}
	return t
}

// maxTopicCache bounds the topic cache (keys come from configuration, so it stays far
// smaller; the bound is for a caller with many keys).
const maxTopicCache = 4096

// Live reports whether the entry of m is still to be sent.
func (b *Backlog) Live(m *Message) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.indexOf(m.ID)
	return i >= 0 && b.pending[i].payload != nil
}

// Accepted removes the entries of done from the backlog, counts them, and records that
// (recordGoneLocked).
func (b *Backlog) Accepted(_ context.Context, done []Message) (int, error) {
	sent := 0
	for i := range done {
		if done[i].Skipped {
			continue
		}
		sent++
	}
	if b.m.PublishedByKind != nil { // one Add per kind, and each kind's series from the first round on
		for _, k := range b.opt.Kinds {
			n := 0
			for i := range done {
				if !done[i].Skipped && done[i].Kind == k.Code {
					n++
				}
			}
			b.m.PublishedByKind.With(k.Name).Add(uint64(n))
		}
	}
	if b.m.Published != nil {
		b.m.Published.Add(uint64(sent))
	}
	through := done[len(done)-1].ID
	b.mu.Lock()
	b.removeReported(through)
	err := b.recordGoneLocked(through)
	compact := b.records-b.live >= b.opt.CompactAfter || b.deadBytesDueLocked()
	b.gaugeLocked()
	b.mu.Unlock()
	b.observe(Reported)
	if compact {
		// Here, on the publishing goroutine: the next round (and the next durable Add's
		// wait) finds the journal compacted, so the files stay within their bound.
		if cerr := b.compact(); cerr != nil && !errors.Is(cerr, journal.ErrClosed) {
			b.log.Error("compacting the backlog's journal failed; it keeps growing until the next try", "err", cerr)
		}
		b.observe(Compacted)
	}
	return sent, err
}
