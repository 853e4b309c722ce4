package outbox

import "bytes"

// maybeCompact starts a compaction when the journal holds many more records than the table
// has live entries. It runs in the background; the table is locked only while the journal
// seals its segment and the live state is copied.
func (o *Outbox) maybeCompact() {
	if o.compacting || o.closed {
		return
	}
	live := o.t.items.len() + len(o.pending)
	if dead := o.records - live; dead < o.compactN || dead < live {
		return
	}
	o.compacting = true
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		if err := o.compact(); err != nil {
			o.log.Error("outbox: compaction failed; the journal keeps growing until the next try", "err", err)
		}
	}()
}

// compact writes the live table as a snapshot and lets the journal drop older segments.
func (o *Outbox) compact() error {
	o.mu.Lock()
	defer func() {
		o.mu.Lock()
		o.compacting = false
		o.mu.Unlock()
	}()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	cp, err := o.j.Checkpoint()
	if err != nil {
		o.mu.Unlock()
		return err
	}
	// Every record appended so far is in segments older than cp; the snapshot must hold
	// their effect: the table, plus adds that are durable but not applied yet.
	var recs []*record
	o.t.snapshotRecords(func(r *record) error {
		recs = append(recs, r)
		return nil
	})
	for _, p := range o.pending {
		c := *p.rec
		c.Payload = bytes.Clone(p.rec.Payload) // the caller's buffer: it may reuse it once Enqueue returns
		recs = append(recs, &c)
	}
	o.records = len(recs)
	o.mu.Unlock()
	var buf []byte
	return o.j.WriteSnapshot(cp, func(emit func([]byte) error) error {
		for _, r := range recs {
			r.Version = recordVersion
			var err error
			if buf, err = r.MarshalMsg(buf[:0]); err != nil {
				return err
			}
			if err := emit(buf); err != nil {
				return err
			}
		}
		return nil
	})
}
