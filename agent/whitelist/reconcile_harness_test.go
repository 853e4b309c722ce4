package whitelist

import (
	"errors"
	"fmt"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// The reconciler's tests drive it with a model terminal that follows protocol v2 to the
// letter (ListPersons paging, the digest kept by XOR, a repeated messageId acked again
// without being applied) and with a model of the one-at-a-time queue: commands wait in
// one queue per terminal, tasks before the reconciler's commands (as the outbox sends
// them), a task superseding a queued correction for its person, and pump delivers them,
// so a test decides exactly when replies arrive, and time moves only when it advances the
// fake clock.

// fakeClock is the shared fake clock (internal/testutil) as the reconciler's Clock.
type fakeClock struct{ *testutil.FakeClock }

func newFakeClock() *fakeClock { return &fakeClock{testutil.NewFakeClock()} }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer { return c.FakeClock.AfterFunc(d, f) }

// pending returns the timers not yet fired or stopped.
func (c *fakeClock) pending() int { return c.Armed() }

const noRevWire = "0000000000000000"

// modelTerminal is a terminal as protocol v2 (or v1) says it behaves.
type modelTerminal struct {
	protocol int
	serial   string
	persons  map[string]face.Person // Rev as sent (v2), "" for v1 or a person added at the terminal
	answered map[string]face.Ack    // messageId → its first ack

	// Faults, each consumed as it fires.
	refuse      func(cmd face.Command) int // a code for cmd (0: none)
	badPages    int                        // ListPersons answers that break paging
	badKind     int                        // which way: 0 unordered, 1 next not advancing, 2 a bad rev
	dropReplies int                        // commands that get no ack (the queue gives up)
	capacity    int                        // 0: none

	// Counters.
	lists, adds, deletes, duplicates, refused int
}

func newModelTerminal(protocol int, serial string) *modelTerminal {
	return &modelTerminal{protocol: protocol, serial: serial, persons: map[string]face.Person{}, answered: map[string]face.Ack{}}
}

func listedRev(p face.Person) string {
	if p.Rev == "" {
		return noRevWire
	}
	return p.Rev
}

func (m *modelTerminal) digest() face.Digest {
	var d face.Digest
	for id, p := range m.persons {
		rev, err := face.ParseRev(listedRev(p))
		if err != nil {
			panic(err)
		}
		d.Toggle(id, rev)
	}
	return d
}

func (m *modelTerminal) heartbeat(dev string) face.Heartbeat {
	h := face.Heartbeat{DeviceID: dev, Time: "2026-01-01T00:00:00Z", Firmware: "model", Persons: len(m.persons)}
	if m.protocol >= 2 {
		h.Protocol, h.Serial, h.Digest = 2, m.serial, m.digest().String()
	}
	return h
}

func (m *modelTerminal) ids() []string {
	return slices.Sorted(maps.Keys(m.persons))
}

// handle answers cmd; false: no ack comes (a fault). The faults hit the reconciler's own
// commands, not tasks (task failures have their own handling elsewhere).
func (m *modelTerminal) handle(cmd face.Command, task bool) (face.Ack, bool) {
	if err := cmd.Validate(); err != nil {
		panic(fmt.Sprintf("the agent sent an invalid command %+v: %v", cmd, err))
	}
	if m.dropReplies > 0 && !task {
		m.dropReplies--
		return face.Ack{}, false
	}
	if a, ok := m.answered[cmd.MessageID]; ok {
		m.duplicates++
		return a, true
	}
	a := face.Ack{MessageID: cmd.MessageID}
	if m.refuse != nil && !task {
		if a.Code = m.refuse(cmd); a.Code != 0 {
			m.refused++
			a.Message = "refused by the model"
			m.answered[cmd.MessageID] = a
			return a, true
		}
	}
	switch cmd.Op {
	case face.AddPerson:
		if _, held := m.persons[cmd.Person.ID]; !held && m.capacity > 0 && len(m.persons) >= m.capacity {
			a.Code = codeCapacity
			break
		}
		p := cmd.Person
		if m.protocol < 2 {
			p.Rev = ""
		}
		m.persons[p.ID] = p
		m.adds++
	case face.DeletePerson:
		delete(m.persons, cmd.Person.ID)
		m.deletes++
	case face.ListPersons:
		if m.protocol < 2 {
			a.Code = 1
			break
		}
		m.lists++
		m.page(cmd, &a)
	default:
		a.Code = 1
	}
	m.answered[cmd.MessageID] = a
	return a, true
}

func (m *modelTerminal) page(cmd face.Command, a *face.Ack) {
	ids := m.ids()
	i, found := slices.BinarySearch(ids, cmd.After)
	if found {
		i++
	}
	j := min(i+cmd.PageSize(), len(ids))
	a.Persons = []face.PersonRev{}
	for _, id := range ids[i:j] {
		a.Persons = append(a.Persons, face.PersonRev{ID: id, Rev: listedRev(m.persons[id])})
	}
	if j < len(ids) {
		a.Next = ids[j-1]
	}
	if m.badPages > 0 {
		m.badPages--
		switch m.badKind {
		case 0: // out of order
			a.Persons = append(a.Persons, face.PersonRev{ID: "", Rev: noRevWire})
			slices.Reverse(a.Persons)
		case 1: // next does not advance
			a.Persons, a.Next = nil, cmd.After+"\x00"
			if cmd.After == "" {
				a.Next = "0"
			}
		case 2:
			if len(a.Persons) == 0 {
				a.Persons = append(a.Persons, face.PersonRev{ID: "zz"})
			}
			a.Persons[0].Rev = "XYZ"
		}
	}
}

// queued is a command in the model queue.
type queued struct {
	cmd  face.Command
	task bool
	at   time.Time // when it was queued
}

var errNoAck = errors.New("no ack after the queue's tries")

// harness runs a Reconciler against model terminals.
type harness struct {
	t       testing.TB
	clock   *fakeClock
	store   *Store
	rec     *Reconciler
	reg     *metrics.Registry
	metrics *Metrics
	terms   map[string]*modelTerminal
	queue   map[string][]queued
	reports []wire.SyncReport
	// refuseQueue: the queue refuses to take commands (Lister/Corrector errors).
	refuseQueue bool
	// lose: the reconciler's commands vanish without a reply.
	lose   bool
	beat   time.Duration
	window int // the reconciler's Window: the most of its commands queued at once
	// mostQueued is the most of the reconciler's commands queued at once, per terminal.
	mostQueued map[string]int
}

func newHarness(t testing.TB, opt ReconcileOptions) *harness {
	t.Helper()
	h := &harness{t: t, clock: newFakeClock(), terms: map[string]*modelTerminal{}, queue: map[string][]queued{},
		reg: metrics.NewRegistry(), beat: 10 * time.Second, mostQueued: map[string]int{}}
	h.store = openTest(t, t.TempDir(), Options{})
	h.metrics = NewMetrics(h.reg)
	opt.Store, opt.Lister, opt.Corrector, opt.Reporter, opt.Clock, opt.Metrics = h.store, h, h, h, h.clock, h.metrics
	if opt.BackoffBase == 0 {
		opt.BackoffBase = time.Second
	}
	if opt.BackoffMax == 0 {
		opt.BackoffMax = time.Minute
	}
	r, err := NewReconciler(opt)
	if err != nil {
		t.Fatal(err)
	}
	h.rec, h.window = r, r.opt.Window
	t.Cleanup(r.Close)
	return h
}

func (h *harness) List(dev string, cmd face.Command) error {
	if cmd.Op != face.ListPersons {
		h.t.Errorf("List got %s", cmd.Op)
	}
	return h.push(dev, cmd, false)
}

func (h *harness) Correct(dev string, cmd face.Command) error {
	if cmd.Op != face.AddPerson && cmd.Op != face.DeletePerson {
		h.t.Errorf("Correct got %s", cmd.Op)
	}
	return h.push(dev, cmd, false)
}

// push queues cmd as the outbox would: a task before the reconciler's commands (none of
// which the model has sent: deliverOne delivers at once), superseding its person's
// correction; a reconciler's command at the end, checking the bounds: at most Window of
// them, and a ListPersons alone (not counting those queued StepTimeout ago or more: the
// reconciler stops waiting for their outcome then).
func (h *harness) push(dev string, cmd face.Command, task bool) error {
	if h.refuseQueue && !task {
		return errors.New("the queue is full")
	}
	q := h.queue[dev]
	if task {
		var superseded []string
		q = slices.DeleteFunc(q, func(c queued) bool {
			if !c.task && c.cmd.Op != face.ListPersons && c.cmd.Person.ID == cmd.Person.ID {
				superseded = append(superseded, c.cmd.MessageID)
				return true
			}
			return false
		})
		i := 0
		for i < len(q) && q[i].task {
			i++
		}
		h.queue[dev] = slices.Insert(q, i, queued{cmd, task, h.clock.Now()})
		for _, id := range superseded { // the agent tells a superseded correction as done
			h.rec.CorrectionDone(dev, id, face.Ack{MessageID: id}, nil)
		}
		return nil
	}
	own := 1
	for _, c := range q {
		if c.task || h.clock.Now().Sub(c.at) >= h.rec.opt.StepTimeout {
			continue // a task; or a command the reconciler may presume lost (term.late)
		}
		own++
		if c.cmd.Op == face.ListPersons || cmd.Op == face.ListPersons {
			h.t.Errorf("%s: %s %s queued while %s %s waits", dev, cmd.Op, cmd.MessageID, c.cmd.Op, c.cmd.MessageID)
		}
	}
	if own > h.window {
		h.t.Errorf("%s: %d reconciliation commands queued, the window is %d", dev, own, h.window)
	}
	h.mostQueued[dev] = max(h.mostQueued[dev], own)
	h.queue[dev] = append(q, queued{cmd, task, h.clock.Now()})
	return nil
}

func (h *harness) SyncReport(r wire.SyncReport) {
	if err := r.Validate(); err != nil {
		h.t.Errorf("invalid sync report %+v: %v", r, err)
	}
	h.reports = append(h.reports, r)
}

// task queues a task's command for dev, as the intake would after changing the desired
// list.
func (h *harness) task(dev string, cmd face.Command) {
	if !slices.ContainsFunc(h.queue[dev], func(q queued) bool { return q.task }) {
		h.rec.TasksPending(dev, true)
	}
	h.push(dev, cmd, true)
}

// pump delivers every queued command, in queue order, until the queues are empty.
func (h *harness) pump() {
	for n := 0; ; n++ {
		if n > 1_000_000 {
			h.t.Fatal("pump: the queues never empty")
		}
		devs := slices.Sorted(maps.Keys(h.queue))
		moved := false
		for _, dev := range devs {
			q := h.queue[dev]
			if len(q) == 0 {
				continue
			}
			moved = true
			h.deliverOne(dev)
		}
		if !moved {
			return
		}
	}
}

// deliverOne delivers the head of dev's queue and passes the outcome on.
func (h *harness) deliverOne(dev string) face.Command {
	q := h.queue[dev]
	head := q[0]
	h.queue[dev] = q[1:]
	if h.lose && !head.task {
		return head.cmd // lost without a word: only the reconciler's own timeout ends the wait
	}
	ack, ok := h.terms[dev].handle(head.cmd, head.task)
	var err error
	if !ok {
		err = errNoAck
	}
	switch {
	case head.task:
		if !slices.ContainsFunc(h.queue[dev], func(q queued) bool { return q.task }) {
			h.rec.TasksPending(dev, false)
		}
	case head.cmd.Op == face.ListPersons:
		h.rec.ListReply(dev, head.cmd.MessageID, ack, err)
	default:
		h.rec.CorrectionDone(dev, head.cmd.MessageID, ack, err)
	}
	return head.cmd
}

// tick advances the clock by one heartbeat interval a second at a time, delivering what
// the timers queued each second (a terminal answers within a second), then sends every
// terminal's heartbeat and delivers what they queued.
func (h *harness) tick() {
	for range int(h.beat / time.Second) {
		h.clock.Advance(time.Second)
		h.pump()
	}
	for _, dev := range slices.Sorted(maps.Keys(h.terms)) {
		h.rec.Heartbeat(dev, h.terms[dev].heartbeat(dev))
	}
	h.pump()
}

// beatNow sends dev's heartbeat without moving time, and delivers what it queued.
func (h *harness) beatNow(dev string) {
	h.rec.Heartbeat(dev, h.terms[dev].heartbeat(dev))
	h.pump()
}

// desired returns dev's desired list.
func (h *harness) desired(dev string) []Entry {
	return h.store.Page(dev, "", 1<<30, nil)
}

// held returns what the model terminal holds, as entries (v1: revs as the desired list
// has them for persons it holds with the desired name, so that equality means the same
// records).
func (h *harness) held(dev string) []Entry {
	m := h.terms[dev]
	var out []Entry
	for _, id := range m.ids() {
		p := m.persons[id]
		rev, _ := face.ParseRev(listedRev(p))
		if m.protocol < 2 {
			r := Record{ID: p.ID, Name: p.Name, ValidFrom: p.ValidFrom, ValidTo: p.ValidTo}
			if want, ok := h.store.Get(dev, id); ok {
				r.Face = want.Face // a v1 terminal holds no face: the rest must match
			}
			rev = r.Rev()
		}
		out = append(out, Entry{ID: id, Rev: rev})
	}
	return out
}

// converged reports whether dev holds exactly its desired list and the reconciler says it
// is in sync.
func (h *harness) converged(dev string) bool {
	return slices.Equal(h.desired(dev), h.held(dev)) && h.rec.Status(dev).InSync
}

// converge ticks until every terminal converged; it fails the test after max ticks.
func (h *harness) converge(max int) int {
	h.t.Helper()
	for i := 0; i <= max; i++ {
		all := true
		for dev := range h.terms {
			all = all && h.converged(dev)
		}
		if all {
			return i
		}
		h.tick()
	}
	for dev := range h.terms {
		if !h.converged(dev) {
			h.t.Fatalf("%s did not converge in %d ticks: status %+v\n desired %d %v\n held    %d %v\n reports %+v",
				dev, max, h.rec.Status(dev), len(h.desired(dev)), short(h.desired(dev)), len(h.held(dev)), short(h.held(dev)), h.reportsOf(dev))
		}
	}
	return max
}

func short(es []Entry) []Entry { return es[:min(len(es), 8)] }

func (h *harness) reportsOf(dev string) []wire.SyncReport {
	var out []wire.SyncReport
	for _, r := range h.reports {
		if r.DeviceID == dev {
			out = append(out, r)
		}
	}
	return out
}

// statuses is the reports' "reason/status" sequence for dev.
func (h *harness) statuses(dev string) []string {
	var out []string
	for _, r := range h.reportsOf(dev) {
		out = append(out, string(r.Reason)+"/"+string(r.Status))
	}
	return out
}

// addTerminal gives dev a model terminal holding exactly list (records as the agent would
// have sent them) and makes list its whole desired list.
func (h *harness) addTerminal(dev string, protocol int, list []Record) *modelTerminal {
	h.t.Helper()
	m := newModelTerminal(protocol, "SN-"+dev)
	for _, r := range list {
		m.persons[r.ID] = personOf(r, protocol)
	}
	h.terms[dev] = m
	if _, err := h.store.Replace(dev, list); err != nil {
		h.t.Fatal(err)
	}
	return m
}

func personOf(r Record, protocol int) face.Person {
	p := face.Person{ID: r.ID, Name: r.Name, ValidFrom: r.ValidFrom, ValidTo: r.ValidTo}
	if protocol >= 2 {
		p.Rev, p.Face = r.Rev().String(), r.Face
	}
	return p
}

func people(n int, prefix string) []Record {
	out := make([]Record, n)
	for i := range out {
		out[i] = Record{ID: fmt.Sprintf("%s%05d", prefix, i), Name: fmt.Sprintf("Person %d", i), ValidTo: "2030-01-01T00:00:00Z"}
	}
	return out
}
