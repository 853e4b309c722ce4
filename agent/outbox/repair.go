package outbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync/atomic"
)

// Repairing the payload file. payloads.cache is a cache of what the journal holds: a
// payload that cannot be read from it (a checksum mismatch, a truncated file, an I/O error)
// is read again from the journal, from the record that brought its message into the table
// (its add, or the snapshot's item record), while the outbox runs.
//
// A failed read (a send, or a snapshot) asks for a repair; one goroutine at a time does
// it, in rounds. A round first checks every live record of the file (in file order, a
// 64 KiB window at a time, without the outbox's lock, the file pinned so that no rewrite
// moves them), so that one
// damage found (a truncated file: thousands of records) costs one journal scan, not one per
// command as each comes due; then it reads the journal once (journal.ReadRecords: every
// file, a 64 KiB window, no lock of the outbox held) for the damaged messages' records,
// matched by message id and intake order, and, under the lock, keeps the payloads found on
// the heap, lets the damaged records' bytes go dead, and pumps the devices whose next
// command it was. The file's next rewrite (due at once when much was damaged: the dead
// bytes then outnumber the live ones) takes the payloads back into it; written back at
// once instead, a file whose reads keep failing would send a command back to the repair
// the moment it was repaired. Requests made during a round make another.
//
// A message whose journal record is damaged too (or missing: a bug) cannot be repaired:
// it is logged with its task id, counted (Stats.PayloadRepairFailures) and remembered, so
// that it never costs another scan; it stays in the table, its device retries the read
// with the usual backoff, and snapshots keep failing (the journal keeps every segment)
// until the outbox is reopened: Open then meets the damaged journal record and applies the
// journal's recovery rules (a *journal.CorruptError, or with SkipCorrupt the record is
// skipped and listed in Recovery). A journal that cannot be read (an I/O error) fails the
// round only: the next failed read asks again.

// payloadRepair is the repair's state, guarded by the outbox's lock.
type payloadRepair struct {
	want    map[*item]struct{} // read failures not yet taken by a round
	running bool               // a repair goroutine runs (it takes want until it is empty)
	// lost holds the messages whose journal record is damaged or missing, with the cause:
	// never asked for again.
	lost map[*item]error
	// compact: a snapshot failed on an unreadable payload; compact again once a repair
	// succeeded (the journal grew meanwhile).
	compact  bool
	repaired uint64        // payloads rebuilt from the journal
	failed   uint64        // payloads the journal could not give back
	scans    atomic.Uint64 // journal reads (tests: one per damage found, not one per command)
}

// requestRepair asks for it's payload to be read again from the journal. Called with o.mu
// held, after a read of it's payload from the file failed.
func (o *Outbox) requestRepair(it *item) {
	r := &o.repair
	if it.pay == 0 || o.closed || o.t.spill == nil {
		return
	}
	if _, ok := r.lost[it]; ok {
		return
	}
	if r.want == nil {
		r.want = map[*item]struct{}{}
	}
	r.want[it] = struct{}{}
	if r.running {
		return // the running goroutine takes it in its next round
	}
	r.running = true
	o.wg.Add(1) // under o.mu, not closed: Close's Wait comes after
	go func() {
		defer o.wg.Done()
		for o.repairRound() {
		}
	}()
}

// maxLostLogged bounds the error lines of one round about messages the journal cannot give
// back (one each, with its task id); a summary line counts the rest.
const maxLostLogged = 16

// damagedPayload is a message whose payload record failed its check.
type damagedPayload struct {
	it  *item
	id  string // it.id(): the item's own immutable bytes
	ord uint64
	ref payRef // the damaged record
}

// repairRound takes the repair requests, finds every damaged record of the payload file,
// reads their payloads from the journal and puts them back. It reports whether requests
// came in meanwhile.
func (o *Outbox) repairRound() bool {
	o.mu.Lock()
	s := o.t.spill
	if o.closed || s == nil || len(o.repair.want) == 0 {
		o.repair.running = false
		o.mu.Unlock()
		return false
	}
	want := o.repair.want
	o.repair.want = nil
	for it := range o.repair.lost {
		if o.t.items.get(it.id()) != it {
			delete(o.repair.lost, it) // left the table
		}
	}
	t := o.t
	t.flushSpill() // every record checked below is in the file
	s.pins++
	rd := spillReader{f: s.f, end: s.size}
	live := make([]damagedPayload, 0, t.items.len())
	for _, it := range t.items.all() {
		if _, lost := o.repair.lost[it]; it.pay != 0 && !lost {
			live = append(live, damagedPayload{it, it.id(), it.ord, it.pay})
		}
	}
	o.mu.Unlock()

	// Every live record, in file order. One asked for that reads well now (an I/O error
	// passed, or a round before this one repaired it) only needs its device pumped.
	sort.Slice(live, func(i, j int) bool { return live[i].ref < live[j].ref }) // sort, not slices: see spill.go
	var damaged, readable []damagedPayload
	pastEnd := false // a record ran past the file's end: so do the ones after it
	for _, l := range live {
		if pastEnd {
			damaged = append(damaged, l)
			continue
		}
		rec, err := rd.record(l.ref) // a window at a time
		if err == nil {
			err = checkRecord(l.ref, rec)
		}
		if err != nil {
			pastEnd = errors.Is(err, io.ErrUnexpectedEOF)
			damaged = append(damaged, l)
			continue
		}
		if _, asked := want[l.it]; asked {
			readable = append(readable, l)
		}
	}
	found, lost, scanErr := o.payloadsFromJournal(damaged)

	o.mu.Lock()
	s.pins--
	if o.closed {
		o.repair.running = false
		o.mu.Unlock()
		return false
	}
	var repaired, unread, lostNow int
	var first *damagedPayload
	heads := map[*device]bool{}
	for _, r := range readable {
		if d := r.it.dev; t.items.get(r.id) == r.it && len(d.queue) > 0 && d.queue[0] == r.it {
			heads[d] = true
		}
	}
	for i := range damaged {
		dm := &damaged[i]
		it := dm.it
		if t.items.get(dm.id) != it || it.pay != dm.ref {
			continue // left the table, or its payload moved to the heap
		}
		if p, ok := found[it]; ok {
			t.replacePayload(it, p)
			repaired++
			if first == nil {
				first = dm
			}
			if d := it.dev; len(d.queue) > 0 && d.queue[0] == it {
				heads[d] = true
			}
			continue
		}
		if scanErr != nil {
			unread++
			continue
		}
		cause := lost
		if cause == nil {
			cause = errors.New("no journal record brought the message in (a bug)")
		}
		if o.repair.lost == nil {
			o.repair.lost = map[*item]error{}
		}
		o.repair.lost[it] = cause
		if lostNow++; lostNow <= maxLostLogged {
			o.log.Error("outbox: a command's payload is damaged in the payload file and its journal record is damaged too; the command stays queued and is not sent, and snapshots fail until the outbox is reopened (Open then applies the journal's recovery rules)",
				"device", it.dev.id, "message", dm.id, "task", it.task(), "err", cause)
		}
	}
	o.repair.repaired += uint64(repaired)
	o.repair.failed += uint64(unread + lostNow)
	if repaired > 0 {
		o.log.Warn("outbox: damaged payloads in the payload file were read again from the journal",
			"payloads", repaired, "first_device", first.it.dev.id, "first_message", first.id, "first_task", first.it.task())
	}
	if lostNow > maxLostLogged {
		o.log.Error("outbox: more commands whose payload and journal record are both damaged", "more", lostNow-maxLostLogged)
	}
	if unread > 0 {
		o.log.Error("outbox: cannot read the journal to rebuild damaged payloads; their commands wait, and their next failed read tries again",
			"payloads", unread, "err", scanErr)
	}
	t.maybeRewriteSpill() // the damaged records are dead bytes now
	for d := range heads {
		d.live.payFails, d.live.payRetryAt = 0, 0
		o.pump(d)
	}
	if o.repair.compact && repaired > 0 && !o.compacting {
		o.repair.compact = false
		o.startCompaction()
	}
	o.rearm()
	o.startSendsLocked()
	more := len(o.repair.want) > 0
	o.repair.running = more
	hook := o.afterRepair
	o.unlock()
	if hook != nil {
		hook()
	}
	return more
}

// payloadsFromJournal reads the journal for the payloads of damaged, by message id and
// intake order. lost says why some may be missing (the journal's damage, or a record that
// does not match); scanErr is an error that stopped the read.
func (o *Outbox) payloadsFromJournal(damaged []damagedPayload) (found map[*item][]byte, lost, scanErr error) {
	found = make(map[*item][]byte, len(damaged))
	if len(damaged) == 0 {
		return found, nil, nil
	}
	o.repair.scans.Add(1)
	byID := make(map[string]*damagedPayload, len(damaged))
	for i := range damaged {
		byID[damaged[i].id] = &damaged[i]
	}
	var r record
	var decodeErr, mismatch error
	losses, err := o.j.ReadRecords(func(p []byte) error {
		if err := o.ctx.Err(); err != nil {
			return err // Close
		}
		if err := decodeRecord(p, &r); err != nil {
			decodeErr = err // Open would refuse it: not a record of ours
			return nil
		}
		if r.Kind != kindAdd && r.Kind != kindItem {
			return nil
		}
		dm := byID[r.ID]
		if dm == nil || r.Ord != dm.ord {
			return nil // another message, or an earlier one with the same id
		}
		if len(r.Payload) != dm.ref.len() {
			mismatch = fmt.Errorf("the journal's record of message %.64q holds %d payload bytes, the payload file's %d", r.ID, len(r.Payload), dm.ref.len())
			delete(found, dm.it)
			return nil
		}
		found[dm.it] = bytes.Clone(r.Payload)
		return nil
	})
	if len(found) == len(damaged) {
		return found, nil, nil
	}
	if err != nil {
		return found, nil, err
	}
	switch {
	case len(losses) > 0:
		l := losses[0]
		lost = fmt.Errorf("journal damaged in %s at offset %d (%d bytes, %d damaged ranges in all): %w", l.File, l.Offset, l.Bytes, len(losses), l.Err)
	case mismatch != nil:
		lost = mismatch
	case decodeErr != nil:
		lost = fmt.Errorf("a journal record does not decode: %w", decodeErr)
	}
	return found, lost, nil
}

// replacePayload makes p (the caller's to give) it's payload in place of its damaged
// record, whose bytes are dead from now on. p stays on the heap until the file's next
// rewrite takes it back (spill.go): written to the file at once, a file whose reads keep
// failing would send the command back to the repair as soon as it was repaired.
func (t *table) replacePayload(it *item, p []byte) {
	if s := t.spill; it.pay != 0 && s != nil {
		if it.pay.off() >= s.size {
			t.flushSpill() // the record is in the buffer: let the buffer forget it first
		}
		if it.pay != 0 { // flushSpill puts the buffer's payloads on the heap if it fails
			s.live -= it.pay.size()
			s.dead += it.pay.size()
			it.pay = 0
		}
	}
	t.heapPay[it] = p
}
