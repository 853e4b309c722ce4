package outbox

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// The table is the message table as a deterministic state machine over journal records:
// apply is the only code that changes it, both live and during replay, which is what makes
// "replaying the journal reproduces the table" hold. Decisions (what to send, when to
// retry, what is superseded) are made by the Outbox, which writes them as records and then
// applies them.

type item struct {
	id       string
	task     string
	op       string
	person   string
	dev      *device
	payload  []byte
	ord      uint64
	added    int64 // unix ns
	expires  int64
	next     int64 // Scheduled: earliest next send; InFlight: ack deadline; terminal: finished at
	lastErr  string
	finSeq   journal.Seq // the journal record that made it terminal (live only)
	tries    uint32
	status   Status
	reported bool
}

type device struct {
	id       string
	queue    []*item          // Scheduled items, ascending ord (FIFO)
	sched    map[string]*item // person -> its Scheduled item (coalescing)
	inflight *item
	paused   bool
	live     deviceLive // not journalled
}

type table struct {
	items   map[string]*item
	devices map[string]*device
	results []*item // terminal, unreported (and reported ones not yet trimmed), in finish order
	maxOrd  uint64
	active  int // Scheduled + InFlight

	// recent remembers the ids of the last recentCap messages that left the table, so a
	// redelivered task is still recognised as a duplicate after its result was reported.
	recent    []string
	recentPos int
	recentSet map[string]struct{}
}

// recentCap is part of the table's definition (replay must forget the same ids), so it is
// a constant, not an option.
const recentCap = 8192

func (t *table) remember(id string) {
	if t.recentSet == nil {
		t.recentSet = map[string]struct{}{}
	}
	if _, ok := t.recentSet[id]; ok {
		return
	}
	if len(t.recent) < recentCap {
		t.recent = append(t.recent, id)
	} else {
		delete(t.recentSet, t.recent[t.recentPos])
		t.recent[t.recentPos] = id
		t.recentPos = (t.recentPos + 1) % recentCap
	}
	t.recentSet[id] = struct{}{}
}

// seen reports whether id is in the table or among the recently finished.
func (t *table) seen(id string) bool {
	if _, ok := t.items[id]; ok {
		return true
	}
	_, ok := t.recentSet[id]
	return ok
}

// recentIDs lists the remembered ids, oldest first.
func (t *table) recentIDs() []string {
	out := make([]string, 0, len(t.recent))
	out = append(out, t.recent[t.recentPos:]...)
	return append(out, t.recent[:t.recentPos]...)
}

func newTable() *table {
	return &table{items: map[string]*item{}, devices: map[string]*device{}}
}

func (t *table) device(id string) *device {
	d := t.devices[id]
	if d == nil {
		d = &device{id: id, sched: map[string]*item{}}
		d.live.heapIdx = -1
		t.devices[id] = d
	}
	return d
}

func (d *device) enqueue(it *item) {
	i := sort.Search(len(d.queue), func(i int) bool { return d.queue[i].ord >= it.ord })
	d.queue = slices.Insert(d.queue, i, it)
	if it.person == "" {
		return
	}
	if cur := d.sched[it.person]; cur == nil || cur.ord < it.ord {
		d.sched[it.person] = it
	}
}

func (d *device) dequeue(it *item) {
	i := sort.Search(len(d.queue), func(i int) bool { return d.queue[i].ord >= it.ord })
	if i < len(d.queue) && d.queue[i] == it {
		if i == 0 {
			d.queue[0] = nil
			d.queue = d.queue[1:]
		} else {
			d.queue = slices.Delete(d.queue, i, i+1)
		}
	}
	if it.person != "" && d.sched[it.person] == it {
		delete(d.sched, it.person)
	}
	if len(d.queue) == 0 {
		d.queue = nil // let a drained queue's array go
	}
}

// detach takes it out of its device's queue or in-flight slot.
func (t *table) detach(it *item) {
	switch it.status {
	case Scheduled:
		it.dev.dequeue(it)
		t.active--
	case InFlight:
		if it.dev.inflight == it {
			it.dev.inflight = nil
		}
		t.active--
	}
}

func (t *table) schedule(it *item) {
	it.status = Scheduled
	it.dev.enqueue(it)
	t.active++
}

func (t *table) finish(it *item, st Status) {
	it.status = st
	if !it.reported {
		t.results = append(t.results, it)
	}
}

// apply changes the table by one record. Records about unknown messages are ignored: they
// can only come from a crash between a purge and its snapshot, and mean nothing then.
func (t *table) apply(r *record) error {
	switch r.Kind {
	case kindAdd, kindItem:
		if _, ok := t.items[r.ID]; ok {
			return nil
		}
		it := &item{
			id: r.ID, task: r.Task, op: r.Op, person: r.Person, payload: r.Payload,
			dev: t.device(r.Device), ord: r.Ord, added: r.Added, expires: r.Expires,
		}
		t.items[r.ID] = it
		t.maxOrd = max(t.maxOrd, r.Ord)
		if r.Kind == kindAdd {
			t.schedule(it)
			return nil
		}
		it.tries, it.next, it.lastErr, it.reported = r.Tries, r.Next, r.Err, r.Reported
		switch st := Status(r.Status); st {
		case Scheduled:
			t.schedule(it)
		case InFlight:
			it.status = InFlight
			it.dev.inflight = it
			t.active++
		default:
			t.finish(it, st)
		}
	case kindSend:
		it := t.items[r.ID]
		if it == nil || it.status != Scheduled {
			return nil
		}
		t.detach(it)
		it.status, it.tries, it.next = InFlight, r.Tries, r.Next
		it.dev.inflight = it
		t.active++
	case kindRetry, kindRequeue:
		it := t.items[r.ID]
		if it == nil || it.status != InFlight {
			return nil
		}
		t.detach(it)
		it.next = r.Next
		if r.Kind == kindRetry {
			it.lastErr = r.Err
		} else {
			it.tries = r.Tries
		}
		t.schedule(it)
	case kindFinish:
		it := t.items[r.ID]
		if it == nil || it.status.Terminal() {
			return nil
		}
		t.detach(it)
		it.next, it.lastErr = r.Done, r.Err
		t.finish(it, Status(r.Status))
	case kindReported:
		for _, id := range r.IDs {
			it := t.items[id]
			if it == nil || !it.status.Terminal() || it.reported {
				continue
			}
			it.reported = true
			if it.status != Failed {
				delete(t.items, id)
				t.remember(id)
			}
		}
		t.trimResults()
	case kindPurge:
		for _, id := range r.IDs {
			if it := t.items[id]; it != nil && it.status.Terminal() {
				it.reported = true
				delete(t.items, id)
				t.remember(id)
			}
		}
		t.trimResults()
	case kindReset:
		for _, id := range r.IDs {
			it := t.items[id]
			if it == nil || it.status != Failed {
				continue
			}
			it.tries, it.next, it.lastErr, it.reported = 0, 0, "", false
			t.schedule(it)
		}
		t.trimResults()
	case kindPause, kindResume:
		t.device(r.Device).paused = r.Kind == kindPause
	case kindDevice:
		t.device(r.Device).paused = r.Paused
	case kindRecent:
		for _, id := range r.IDs {
			t.remember(id)
		}
	default:
		return fmt.Errorf("%w: kind %d, version %d", ErrUnknownRecord, r.Kind, r.Version)
	}
	return nil
}

// trimResults drops results that are no longer unreported terminal messages.
func (t *table) trimResults() {
	keep := t.results[:0]
	for _, it := range t.results {
		if !it.reported && it.status.Terminal() {
			keep = append(keep, it)
		}
	}
	clear(t.results[len(keep):])
	t.results = keep
}

// snapshotRecords lists records that rebuild the table: devices first, then every message.
// Unreported results come in their finish order so a restart reports them in order.
func (t *table) snapshotRecords(emit func(*record) error) error {
	if len(t.recent) > 0 {
		if err := emit(&record{Kind: kindRecent, IDs: t.recentIDs()}); err != nil {
			return err
		}
	}
	for _, d := range t.devices {
		if d.paused {
			if err := emit(&record{Kind: kindDevice, Device: d.id, Paused: true}); err != nil {
				return err
			}
		}
	}
	inResults := make(map[*item]bool, len(t.results))
	for _, it := range t.results {
		inResults[it] = true
	}
	for _, it := range t.items {
		if !inResults[it] {
			if err := emit(itemRecord(it)); err != nil {
				return err
			}
		}
	}
	for _, it := range t.results {
		if err := emit(itemRecord(it)); err != nil {
			return err
		}
	}
	return nil
}

func itemRecord(it *item) *record {
	return &record{
		Kind: kindItem, ID: it.id, Task: it.task, Device: it.dev.id, Op: it.op, Person: it.person,
		Payload: it.payload, Ord: it.ord, Added: it.added, Expires: it.expires, Next: it.next,
		Tries: it.tries, Status: uint8(it.status), Err: it.lastErr, Reported: it.reported,
	}
}

// dump renders the table canonically, for tests comparing a live table with a replayed one.
func (t *table) dump() string {
	var b strings.Builder
	ids := make([]string, 0, len(t.items))
	for id := range t.items {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		it := t.items[id]
		fmt.Fprintf(&b, "item %s dev=%s ord=%d %s tries=%d next=%d rep=%v err=%q\n",
			id, it.dev.id, it.ord, it.status, it.tries, it.next, it.reported, it.lastErr)
	}
	devs := make([]string, 0, len(t.devices))
	for id := range t.devices {
		devs = append(devs, id)
	}
	slices.Sort(devs)
	for _, id := range devs {
		d := t.devices[id]
		if len(d.queue) == 0 && d.inflight == nil && !d.paused {
			continue
		}
		fmt.Fprintf(&b, "device %s paused=%v queue=", id, d.paused)
		for _, it := range d.queue {
			fmt.Fprintf(&b, "%s,", it.id)
		}
		if d.inflight != nil {
			fmt.Fprintf(&b, " inflight=%s", d.inflight.id)
		}
		persons := make([]string, 0, len(d.sched))
		for p, it := range d.sched {
			persons = append(persons, p+"="+it.id)
		}
		slices.Sort(persons)
		fmt.Fprintf(&b, " sched=%v\n", persons)
	}
	b.WriteString("results ")
	for _, it := range t.results {
		fmt.Fprintf(&b, "%s,", it.id)
	}
	fmt.Fprintf(&b, "\nactive %d\nrecent %v\n", t.active, t.recentIDs())
	return b.String()
}
