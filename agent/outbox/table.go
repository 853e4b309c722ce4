package outbox

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"unsafe"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// The table is the message table as a deterministic state machine over journal records:
// apply is the only code that changes it, both live and during replay, which is what makes
// "replaying the journal reproduces the table" hold. Decisions (what to send, when to
// retry, what is superseded) are made by the Outbox, which writes them as records and then
// applies them.

// item is one message. It is kept to 64 bytes (a size class; the budget is 256 bytes a
// queued task beyond its payload, indexes included): the op is an index into table.ops,
// the rarely set last error and expiry live in table.errs and table.expires, ids are at
// most maxFieldLen bytes so their lengths fit 16 bits, tries saturate at 16 bits
// (Settings.MaxTries is capped below that). The payload is not here but in the payload
// file (spill.go); pay says where.
type item struct {
	// blob points to id, task id and person id one after another (cut from a chunk:
	// blobs.go); the lengths split it. A pointer rather than a string: the lengths already
	// say where it ends, and the 8 bytes of a string's length hold pay within the 64.
	blob  *byte
	dev   *device
	ord   uint64
	added int64 // unix ns
	next  int64 // Scheduled: earliest next send; InFlight: ack deadline; terminal: finished at
	pay   payRef
	// schedN, on the item device.sched holds for its person (the latest Scheduled one), is
	// how many Scheduled items that person has on the device; 0 on every other item.
	schedN    uint32
	idLen     uint16
	taskLen   uint16
	personLen uint16
	op        uint16
	tries     uint16
	status    Status
	reported  bool
}

// maxFieldLen bounds a message id, task id and person id (item keeps 16-bit lengths). The
// agent's intake allows at most 128 bytes.
const maxFieldLen = 0xffff

// maxTries is where item.tries saturates.
const maxTries = 0xffff

func triesOf(n uint32) uint16 { return uint16(min(n, maxTries)) }

// field returns the n bytes of the blob from i on as a string; the blob is never modified.
func (it *item) field(i, n int) string {
	if n == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Add(unsafe.Pointer(it.blob), i)), n)
}

func (it *item) id() string     { return it.field(0, int(it.idLen)) }
func (it *item) task() string   { return it.field(int(it.idLen), int(it.taskLen)) }
func (it *item) person() string { return it.field(int(it.idLen)+int(it.taskLen), int(it.personLen)) }

// result is an entry of the results list: a terminal message and the journal record that
// made it terminal (0 when it came from replay, i.e. is durable).
type result struct {
	it  *item
	seq journal.Seq
}

type device struct {
	id    string
	queue []*item   // Scheduled items, ascending ord (FIFO)
	sched itemIndex // person -> its latest Scheduled item (coalescing)
	// retriable: person -> its Failed command that is still the person's latest intent on
	// the device (not outdated): what RetryFailed may bring back. At most one per person.
	retriable itemIndex
	// inflight is the command in flight: a task's, or the first task of an AddPersons
	// batch in flight, whose other tasks are in batched (batch.go), in the order sent.
	inflight *item
	batched  []*item
	paused   bool
	failed   int        // Failed messages held (reported or not)
	live     deviceLive // not journalled
}

// The coalescing index (device.sched) holds, per person, the Scheduled item with the
// highest ord, and on it (item.schedN) how many Scheduled items the person has. Usually
// there is one (a later never-sent command supersedes an earlier one), but a command that
// was sent and waits for its retry is not superseded, so a later one for the same person
// can wait behind it. The index must depend only on which items are Scheduled, never on the
// order they got there: a replayed table (from a snapshot or from the full log) has to
// build the same one.

// scheduledFor returns person's latest Scheduled item on d, or nil.
func (d *device) scheduledFor(person string) *item { return d.sched.get(person) }

// Outdated commands. RetryFailed must bring back only a command that is still its person's
// latest intent on its device: retrying an AddPerson after a later DeletePerson succeeded
// would put the person back on the whitelist. A command is outdated once a command with a
// higher ord (intake order) for the same person on the same device has been added, whatever
// became of that later command since (queued, in flight, finished, reported and gone). The
// later command may have left the table, so outdatedness is a mark, not a lookup: the table
// keeps the set of outdated messages (table.outdated, rare: a person with two commands on a
// device at once) and journals the mark in snapshots (record.Outdated); the log derives it
// from the adds. Of a person's commands that can still change (Scheduled, InFlight) or be
// retried (Failed), only the latest is not outdated, so an add has at most three to compare
// with: the person's latest Scheduled one (device.sched), the one in flight, and the Failed
// one not yet outdated (device.retriable). Like the coalescing index this compares ords, so
// it does not depend on the order adds were applied in while both commands are in the table:
// live and replayed tables agree (the property test checks it); see the package Caveats for
// the one case where the later command left the table before the earlier one was applied.

// noteIntent records that it was added for its person: of it and the person's latest
// command on the device so far, the older is outdated. Call it before it is placed.
func (t *table) noteIntent(it *item) {
	p := it.person()
	if p == "" {
		return // no person, no coalescing key: every such command is its own intent
	}
	d := it.dev
	t.outdateOlder(it, d.sched.get(p))
	if f := d.inflight; f != nil && f.person() == p {
		t.outdateOlder(it, f)
	}
	for _, f := range d.batched {
		if f.person() == p {
			t.outdateOlder(it, f)
		}
	}
	t.outdateOlder(it, d.retriable.get(p))
}

// outdateOlder marks the older of a and b (same person, same device) outdated.
func (t *table) outdateOlder(a, b *item) {
	switch {
	case b == nil || b == a:
	case b.ord < a.ord:
		t.outdate(b)
	default:
		t.outdate(a)
	}
}

// outdate marks it outdated. A command that finished otherwise than Failed is never sent
// nor retried again, so it is not marked once finished (it keeps a mark it got before):
// the mark then depends only on the order of intake and of finishing, which a snapshot
// (holding only what is left) and the log agree on.
func (t *table) outdate(it *item) {
	if it.status.Terminal() && it.status != Failed {
		return
	}
	t.outdated[it] = struct{}{}
	if it.status == Failed {
		it.dev.dropRetriable(it)
	}
}

// noResult reports whether it reports no result (Task.NoResult).
func (t *table) noResult(it *item) bool {
	if len(t.silent) == 0 {
		return false
	}
	_, ok := t.silent[it]
	return ok
}

// isOutdated reports whether a later command for the same person on the same device was
// added after it.
func (t *table) isOutdated(it *item) bool {
	_, ok := t.outdated[it]
	return ok
}

// dropRetriable takes it out of the retriable index if it is there.
func (d *device) dropRetriable(it *item) {
	if p := it.person(); p != "" && d.retriable.get(p) == it {
		d.retriable.del(p)
	}
}

type table struct {
	items   itemIndex // by id
	blobs   blobArena // the items' ids (blobs.go)
	devices map[string]*device
	results []result // terminal and unreported, in finish order
	maxOrd  uint64
	active  int               // Scheduled + InFlight
	ops     []string          // interned ops; item.op indexes it
	opIdx   map[string]uint16 // op -> index
	errs    map[*item]string  // last error of the messages that have one
	expires map[*item]int64   // Task.ExpiresAt of the messages that have one (unix ns)
	// spill is the payload file (nil: none, every payload is in heapPay); heapPay holds
	// the payloads it could not take (item.pay 0), as copies never modified.
	spill   *spill
	heapPay map[*item][]byte
	// outdated holds the messages a later command for the same person on the same device
	// has made moot: RetryFailed leaves them failed.
	outdated map[*item]struct{}
	// silent holds the messages that report no result (Task.NoResult; few: a whitelist
	// sync's corrective commands): they leave the table when they finish.
	silent map[*item]struct{}

	// recent remembers the ids of the last recentCap messages that left the table, so a
	// redelivered task is still recognised as a duplicate after its result was reported.
	recent recentIDs
}

func (t *table) remember(id string) { t.recent.add(id) }

// seen reports whether id is in the table or among the recently finished.
func (t *table) seen(id string) bool { return t.items.get(id) != nil || t.recent.has(id) }

// recentList lists the remembered ids, oldest first.
func (t *table) recentList() []string { return t.recent.list() }

func newTable() *table {
	return &table{items: byID(), devices: map[string]*device{}, opIdx: map[string]uint16{}, errs: map[*item]string{},
		expires: map[*item]int64{}, outdated: map[*item]struct{}{}, silent: map[*item]struct{}{}, heapPay: map[*item][]byte{}}
}

// intern returns op's index in t.ops. Ops are a handful of verbs; past 65535 distinct ones
// (a bug upstream) they share the last slot rather than grow memory.
func (t *table) intern(op string) uint16 {
	if i, ok := t.opIdx[op]; ok {
		return i
	}
	if len(t.ops) > 0xfffe {
		return uint16(len(t.ops) - 1)
	}
	t.ops = append(t.ops, strings.Clone(op))
	t.opIdx[t.ops[len(t.ops)-1]] = uint16(len(t.ops) - 1)
	return uint16(len(t.ops) - 1)
}

func (t *table) opOf(it *item) string { return t.ops[it.op] }

func (t *table) lastErr(it *item) string { return t.errs[it] }

// expiresAt is the message's Task.ExpiresAt in unix ns, 0 for none.
func (t *table) expiresAt(it *item) int64 { return t.expires[it] }

// setErr sets it's last error. Like ids, errors are cut from the blob chunks (blobs.go):
// a superseded command's ("superseded by" and the later id) is made during an intake burst.
func (t *table) setErr(it *item, e string) {
	if old, ok := t.errs[it]; ok {
		t.blobs.left(len(old))
	}
	if e == "" {
		delete(t.errs, it)
	} else {
		t.errs[it] = t.blobs.clone(e)
	}
	t.maybeCompactBlobs()
}

// forget drops a message from the table.
func (t *table) forget(it *item) {
	if it.status == Failed {
		it.dev.failed--
		it.dev.dropRetriable(it)
	}
	t.items.del(it.id())
	t.dropPayload(it)
	if e, ok := t.errs[it]; ok {
		t.blobs.left(len(e))
		delete(t.errs, it)
	}
	delete(t.expires, it)
	delete(t.outdated, it)
	delete(t.silent, it)
	t.remember(it.id())
	// Its blob is dead (it keeps it, valid, for whoever still holds it). Accounted before
	// a compaction, which recounts what is live from the items left in the table.
	t.blobs.left(it.blobLen())
	t.maybeCompactBlobs()
}

// device returns the device, creating it. id may alias a replay buffer: it is copied.
func (t *table) device(id string) *device {
	d := t.devices[id]
	if d == nil {
		id = strings.Clone(id)
		d = &device{id: id, sched: byPerson(), retriable: byPerson()}
		d.live.heapIdx = -1
		t.devices[id] = d
	}
	return d
}

func (d *device) enqueue(it *item) {
	i := sort.Search(len(d.queue), func(i int) bool { return d.queue[i].ord >= it.ord })
	d.queue = slices.Insert(d.queue, i, it)
	if it.person() == "" {
		return
	}
	switch latest := d.sched.get(it.person()); {
	case latest == nil:
		it.schedN = 1
		d.sched.put(it)
	case latest.ord < it.ord:
		it.schedN, latest.schedN = latest.schedN+1, 0
		d.sched.put(it)
	default:
		latest.schedN++
	}
}

func (d *device) dequeue(it *item) {
	i := sort.Search(len(d.queue), func(i int) bool { return d.queue[i].ord >= it.ord })
	if i < len(d.queue) && d.queue[i] == it {
		if i == 0 {
			d.queue[0] = nil
			if len(d.queue) == 1 {
				d.queue = d.queue[:0] // the array from its start, for the device's next command
			} else {
				d.queue = d.queue[1:]
			}
		} else {
			d.queue = slices.Delete(d.queue, i, i+1)
		}
		if p := it.person(); p != "" {
			switch latest := d.sched.get(p); {
			case latest == nil:
			case latest.schedN <= 1:
				latest.schedN = 0
				d.sched.del(p)
			case latest == it:
				// Another command for the person still waits: it becomes the latest. Only
				// when two are queued for one person is the queue searched.
				next := d.latestQueued(p)
				next.schedN, it.schedN = it.schedN-1, 0
				d.sched.put(next)
			default:
				latest.schedN--
			}
		}
	}
	if len(d.queue) == 0 && cap(d.queue) > keepQueueCap {
		d.queue = nil // let a drained queue's large array go
	}
}

// keepQueueCap is the largest array a drained queue keeps: a device that gets a command at
// a time (the usual flow) does not allocate one for each.
const keepQueueCap = 16

// latestQueued returns the queued item for person with the highest ord, or nil.
func (d *device) latestQueued(person string) *item {
	for i := len(d.queue) - 1; i >= 0; i-- {
		if d.queue[i].person() == person {
			return d.queue[i]
		}
	}
	return nil
}

// detach takes it out of its device's queue or in-flight slot.
func (t *table) detach(it *item) {
	switch it.status {
	case Scheduled:
		it.dev.dequeue(it)
		t.active--
	case InFlight:
		it.dev.dropInflight(it)
		t.active--
	}
}

// addInflight puts it in d's in-flight slot, or beside the task there: a batch's tasks
// are sent together, one send record each. The slot holds the lowest ord and batched the
// others in ascending ord, whatever order the records came in (a snapshot's is not the
// log's), so that a replayed table is the live one.
func (d *device) addInflight(it *item) {
	if d.inflight == nil {
		d.inflight = it
		return
	}
	if it.ord < d.inflight.ord {
		it, d.inflight = d.inflight, it
	}
	i := sort.Search(len(d.batched), func(i int) bool { return d.batched[i].ord >= it.ord })
	d.batched = slices.Insert(d.batched, i, it)
}

// dropInflight takes it out of d's in-flight slot; the next task of its batch, if any,
// takes the slot, so that inflight is nil only when nothing is in flight.
func (d *device) dropInflight(it *item) {
	if d.inflight == it {
		d.inflight = nil
		if len(d.batched) > 0 {
			d.inflight = d.batched[0]
			d.batched[0] = nil
			d.batched = d.batched[1:]
		}
	} else if i := slices.Index(d.batched, it); i >= 0 {
		d.batched = slices.Delete(d.batched, i, i+1)
	}
	if len(d.batched) == 0 {
		d.batched = nil
	}
}

// inflightTasks is how many tasks d has in flight: 0, 1, or a batch's.
func (d *device) inflightTasks() int {
	if d.inflight == nil {
		return 0
	}
	return 1 + len(d.batched)
}

func (t *table) schedule(it *item) {
	it.status = Scheduled
	it.dev.enqueue(it)
	t.active++
}

func (t *table) finish(it *item, st Status) {
	it.status = st
	if st == Failed {
		it.dev.failed++
		if it.person() != "" && !t.isOutdated(it) {
			it.dev.retriable.put(it)
		}
	}
	if !it.reported {
		t.results = append(t.results, result{it: it})
	}
}

// apply changes the table by one record. Records about unknown messages are ignored: they
// can only come from a crash between a purge and its snapshot, and mean nothing then. The
// record's strings may alias a replay buffer: apply copies what it keeps.
func (t *table) apply(r *record) error {
	switch r.Kind {
	case kindAdd, kindItem:
		if t.items.get(r.ID) != nil {
			return nil
		}
		if len(r.ID) > maxFieldLen || len(r.Task) > maxFieldLen || len(r.Person) > maxFieldLen {
			return fmt.Errorf("outbox: message %.64q: an id, task id or person id is longer than %d bytes", r.ID, maxFieldLen)
		}
		it := newItem(&t.blobs, r.ID, r.Task, r.Person)
		it.op, it.dev = t.intern(r.Op), t.device(r.Device)
		it.ord, it.added = r.Ord, r.Added
		if r.Expires != 0 {
			t.expires[it] = r.Expires
		}
		t.items.put(it)
		t.setPayload(it, r.Payload)
		t.maxOrd = max(t.maxOrd, r.Ord)
		if r.Outdated {
			t.outdated[it] = struct{}{}
		}
		if r.NoResult {
			t.silent[it] = struct{}{}
		}
		if r.Kind == kindItem {
			it.status = Status(r.Status) // for noteIntent; placed below
		}
		t.noteIntent(it) // a snapshot's marks already say so, except in one written before them
		if r.Kind == kindAdd {
			t.schedule(it)
			return nil
		}
		it.tries, it.next, it.reported = triesOf(r.Tries), r.Next, r.Reported
		t.setErr(it, r.Err)
		switch st := Status(r.Status); st {
		case Scheduled:
			t.schedule(it)
		case InFlight:
			it.status = InFlight
			it.dev.addInflight(it)
			t.active++
		default:
			t.finish(it, st)
		}
	case kindSend:
		it := t.items.get(r.ID)
		if it == nil || it.status != Scheduled {
			return nil
		}
		t.detach(it)
		it.status, it.tries, it.next = InFlight, triesOf(r.Tries), r.Next
		it.dev.addInflight(it)
		t.active++
	case kindRetry, kindRequeue:
		it := t.items.get(r.ID)
		if it == nil || it.status != InFlight {
			return nil
		}
		t.detach(it)
		it.next = r.Next
		if r.Kind == kindRetry {
			t.setErr(it, r.Err)
		} else {
			it.tries = triesOf(r.Tries)
		}
		t.schedule(it)
	case kindFinish:
		it := t.items.get(r.ID)
		if it == nil || it.status.Terminal() {
			return nil
		}
		t.detach(it)
		it.next = r.Done
		if t.noResult(it) {
			// No result to report or to hold for RetryFailed: it leaves at once, its id
			// kept for dedupe. forget runs before the status is set: a failed one never
			// counted among the device's failures.
			t.forget(it)
			it.status, it.reported = Status(r.Status), true
			return nil
		}
		t.setErr(it, r.Err)
		t.finish(it, Status(r.Status))
	case kindReported:
		for _, id := range r.IDs {
			it := t.items.get(id)
			if it == nil || !it.status.Terminal() || it.reported {
				continue
			}
			it.reported = true
			if it.status != Failed {
				t.forget(it)
			}
		}
		t.trimResults()
	case kindPurge:
		for _, id := range r.IDs {
			if it := t.items.get(id); it != nil && it.status.Terminal() {
				it.reported = true
				t.forget(it)
			}
		}
		t.trimResults()
	case kindReset:
		for _, id := range r.IDs {
			it := t.items.get(id)
			if it == nil || it.status != Failed {
				continue
			}
			it.tries, it.next, it.reported = 0, 0, false
			it.dev.failed--
			it.dev.dropRetriable(it)
			t.setErr(it, "")
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
	for _, r := range t.results {
		if !r.it.reported && r.it.status.Terminal() {
			keep = append(keep, r)
		}
	}
	clear(t.results[len(keep):])
	t.results = keep
}

// snapshotRecords lists records that rebuild the table: devices first, then every message.
// Unreported results come in their finish order so a restart reports them in order. A
// message whose payload is in the payload file comes with its Payload nil and ref saying
// where to read it (0 for the others).
func (t *table) snapshotRecords(emit func(r *record, ref payRef) error) error {
	if len(t.recent.ring) > 0 {
		if err := emit(&record{Kind: kindRecent, IDs: t.recentList()}, 0); err != nil {
			return err
		}
	}
	for _, d := range t.devices {
		if d.paused {
			if err := emit(&record{Kind: kindDevice, Device: d.id, Paused: true}, 0); err != nil {
				return err
			}
		}
	}
	inResults := make(map[*item]bool, len(t.results))
	for _, r := range t.results {
		inResults[r.it] = true
	}
	for _, it := range t.items.all() {
		if !inResults[it] {
			if err := emit(t.itemRecord(it), it.pay); err != nil {
				return err
			}
		}
	}
	for _, r := range t.results {
		if err := emit(t.itemRecord(r.it), r.it.pay); err != nil {
			return err
		}
	}
	return nil
}

// itemRecord is the snapshot record of it; its Payload is nil when the payload is in the
// payload file (it.pay says where).
func (t *table) itemRecord(it *item) *record {
	return &record{
		Kind: kindItem, ID: it.id(), Task: it.task(), Device: it.dev.id, Op: t.opOf(it), Person: it.person(),
		Payload: t.heapPay[it], Ord: it.ord, Added: it.added, Expires: t.expiresAt(it), Next: it.next,
		Tries: uint32(it.tries), Status: uint8(it.status), Err: t.lastErr(it), Reported: it.reported,
		Outdated: t.isOutdated(it), NoResult: t.noResult(it),
	}
}

// dump renders the table canonically, for tests comparing a live table with a replayed one.
func (t *table) dump() string {
	var b strings.Builder
	ids := make([]string, 0, t.items.len())
	for id := range t.items.all() {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		it := t.items.get(id)
		fmt.Fprintf(&b, "item %s dev=%s ord=%d %s tries=%d next=%d rep=%v old=%v err=%q",
			id, it.dev.id, it.ord, it.status, it.tries, it.next, it.reported, t.isOutdated(it), t.lastErr(it))
		if t.noResult(it) {
			b.WriteString(" noresult")
		}
		b.WriteByte('\n')
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
			fmt.Fprintf(&b, "%s,", it.id())
		}
		if d.inflight != nil {
			fmt.Fprintf(&b, " inflight=%s", d.inflight.id())
		}
		for _, it := range d.batched {
			fmt.Fprintf(&b, ",%s", it.id())
		}
		persons := make([]string, 0, d.sched.n)
		for p, it := range d.sched.all() {
			persons = append(persons, fmt.Sprintf("%s=%s/%d", p, it.id(), it.schedN))
		}
		slices.Sort(persons)
		fmt.Fprintf(&b, " sched=%v\n", persons)
	}
	b.WriteString("results ")
	for _, r := range t.results {
		fmt.Fprintf(&b, "%s,", r.it.id())
	}
	fmt.Fprintf(&b, "\nactive %d\nrecent %v\n", t.active, t.recentList())
	return b.String()
}
