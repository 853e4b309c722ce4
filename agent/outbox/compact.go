package outbox

import (
	"bytes"
	"fmt"
	"sort"
)

// maybeCompact starts a compaction when the journal holds many more records than the table
// has live entries: compactN dead records, or compactBytes appended since the last snapshot
// and more than it, once the dead records also outnumber the live ones. It runs in the
// background; the table is locked only while the journal seals its segment and the live
// state is copied.
func (o *Outbox) maybeCompact() {
	if o.compacting || o.closed {
		return
	}
	live := o.t.items.len() + len(o.pending)
	dead := o.records - live
	if dead < live {
		return
	}
	if dead < o.compactN {
		if appended := o.j.Stats().FileBytes - o.baseBytes; appended < max(o.compactBytes, o.baseBytes) {
			return
		}
	}
	o.startCompaction()
}

// startCompaction runs a compaction in the background. Called with o.mu held, when none
// runs and the outbox is open.
func (o *Outbox) startCompaction() {
	o.compacting = true
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		err := o.compact()
		if err != nil {
			o.log.Error("outbox: compaction failed; the journal keeps growing until the next try", "err", err)
		}
		if o.afterCompact != nil {
			o.afterCompact(err)
		}
	}()
}

// compact writes the live table as a snapshot and lets the journal drop older segments.
// Payloads in the payload file are read while the snapshot is written, without the lock:
// the file is pinned meanwhile (no rewrite moves a record), and its buffer was written out
// first, so every record a snapshot refers to is in the file.
func (o *Outbox) compact() error {
	o.mu.Lock()
	s := o.t.spill // set at Open, cleared by Close only after the compactor returned
	pinned := false
	var bad *snapRecord // the message whose payload could not be read
	var snapErr error
	written := false
	defer func() {
		o.mu.Lock()
		o.compacting = false
		if bad != nil && !o.closed {
			// Before unpinning: until then only a repair changes bad's record.
			o.compactAfterRepair(bad.r.ID, bad.r.Ord, bad.ref)
		} else if written {
			o.repair.compact = false
			o.baseBytes = o.j.Stats().FileBytes
		}
		if pinned {
			s.pins--
			o.t.maybeRewriteSpill()
		}
		o.unlock() // closes a file the rewrite replaced
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
	var rd spillReader
	if s != nil {
		o.t.flushSpill()
		s.pins++
		pinned, rd = true, spillReader{f: s.f, end: s.size}
	}
	// Every record appended so far is in segments older than cp; the snapshot must hold
	// their effect: the table, plus adds that are durable but not applied yet.
	var recs []snapRecord
	o.t.snapshotRecords(func(r *record, ref payRef) error {
		recs = append(recs, snapRecord{r, ref})
		return nil
	})
	// Messages other than results may come in any order: in file order, their payloads are
	// read a window at a time. Results keep their finish order (a restart reports them in
	// it) and are read one by one.
	inFileOrder := len(recs) - len(o.t.results)
	byFile := recs[:inFileOrder]
	sort.SliceStable(byFile, func(i, j int) bool { return byFile[i].ref < byFile[j].ref }) // sort, not slices: see spill.go
	for _, p := range o.pending {
		c := *p.rec
		c.Payload = bytes.Clone(p.rec.Payload) // the caller's buffer: it may reuse it once Enqueue returns
		recs = append(recs, snapRecord{r: &c})
	}
	o.records = len(recs)
	o.mu.Unlock()
	var buf, pay []byte
	snapErr = o.j.WriteSnapshot(cp, func(emit func([]byte) error) error {
		for i, sr := range recs {
			r := sr.r
			if sr.ref != 0 {
				var rec []byte
				var err error
				if i < inFileOrder {
					if rec, err = rd.record(sr.ref); err == nil {
						err = checkRecord(sr.ref, rec)
					}
				} else if rec, err = readSpill(rd.f, sr.ref, pay); err == nil {
					pay = rec
				}
				if err != nil {
					s.readErrors.Add(1)
					bad = &recs[i]
					return fmt.Errorf("message %.64q: %w", r.ID, err)
				}
				r.Payload = rec[spillHdr:]
			}
			r.Version = recordVersion
			var err error
			if buf, err = r.MarshalMsg(buf[:0]); err != nil {
				return err
			}
			r.Payload = nil
			if err := emit(buf); err != nil {
				return err
			}
		}
		return nil
	})
	written = snapErr == nil
	return snapErr
}

type snapRecord struct {
	r   *record
	ref payRef // where the payload is, when it is in the payload file
}

// compactAfterRepair handles a snapshot that could not read message id's payload at ref:
// the payload is repaired from the journal (repair.go) and the outbox compacts again
// after that; if a repair already replaced the record, or the message left, at once.
func (o *Outbox) compactAfterRepair(id string, ord uint64, ref payRef) {
	o.repair.compact = true
	if it := o.t.items.get(id); it != nil && it.ord == ord && it.pay == ref {
		o.requestRepair(it)
		return
	}
	o.repair.compact = false
	o.startCompaction()
}
