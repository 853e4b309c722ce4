package whitelist

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// TestReconcileInSyncSendsNothing: a terminal holding its desired list gets no command at
// all; its heartbeats are the whole check.
func TestReconcileInSyncSendsNothing(t *testing.T) {
	h := newHarness(t, ReconcileOptions{})
	m := h.addTerminal("d1", 2, people(30, "p"))
	for range 20 {
		h.tick()
	}
	if m.lists+m.adds+m.deletes != 0 || len(h.reports) != 0 {
		t.Fatalf("a terminal in sync got %d lists, %d adds, %d deletes, reports %v", m.lists, m.adds, m.deletes, h.reports)
	}
	if !h.rec.Status("d1").InSync {
		t.Fatalf("status %+v", h.rec.Status("d1"))
	}
}

// TestReconcileScenarios: each fault leads to drift of the expected reason and a
// reconciliation that leaves the terminal holding exactly its desired list, with every
// corrective command under a new messageId.
func TestReconcileScenarios(t *testing.T) {
	const n = 50
	list := people(n, "p")
	cases := []struct {
		name     string
		protocol int
		fault    func(h *harness, m *modelTerminal)
		reason   wire.SyncReason
		// statuses of the reports, in order; counts of the last one
		statuses                []wire.SyncStatus
		missing, extra, changed int
		adds, deletes           int // commands the terminal applied
	}{
		{name: "factory reset", protocol: 2, fault: func(h *harness, m *modelTerminal) { clear(m.persons) },
			reason: wire.SyncDigest, statuses: done1, missing: n, adds: n},
		{name: "replacement", protocol: 2, fault: func(h *harness, m *modelTerminal) { clear(m.persons); m.serial = "SN-new" },
			reason: wire.SyncSerial, statuses: done1, missing: n, adds: n},
		{name: "extra person", protocol: 2, fault: func(h *harness, m *modelTerminal) {
			m.persons["p00007x"] = face.Person{ID: "p00007x", Name: "added at the terminal"}
		}, reason: wire.SyncDigest, statuses: done1, extra: 1, deletes: 1},
		{name: "missing person", protocol: 2, fault: func(h *harness, m *modelTerminal) { delete(m.persons, "p00049") },
			reason: wire.SyncDigest, statuses: done1, missing: 1, adds: 1},
		{name: "changed rev", protocol: 2, fault: func(h *harness, m *modelTerminal) {
			p := m.persons["p00020"]
			p.Rev, p.Name = "0123456789abcdef", "edited at the terminal"
			m.persons["p00020"] = p
		}, reason: wire.SyncDigest, statuses: done1, changed: 1, adds: 1},
		{name: "a task's delete failed", protocol: 2, fault: func(h *harness, m *modelTerminal) {
			if err := h.store.Delete("d", "p00003"); err != nil {
				t.Fatal(err)
			}
		}, reason: wire.SyncDigest, statuses: done1, extra: 1, deletes: 1},
		{name: "v1 below count", protocol: 1, fault: func(h *harness, m *modelTerminal) {
			delete(m.persons, "p00001")
			delete(m.persons, "p00030")
		}, reason: wire.SyncCount, statuses: done1, missing: 2, adds: n},
		{name: "unordered page", protocol: 2, fault: func(h *harness, m *modelTerminal) {
			delete(m.persons, "p00011")
			m.badPages, m.badKind = 1, 0
		}, reason: wire.SyncDigest, statuses: failedThenDone, missing: 1, adds: 1},
		{name: "page not advancing", protocol: 2, fault: func(h *harness, m *modelTerminal) {
			delete(m.persons, "p00011")
			m.badPages, m.badKind = 1, 1
		}, reason: wire.SyncDigest, statuses: failedThenDone, missing: 1, adds: 1},
		{name: "page with a bad rev", protocol: 2, fault: func(h *harness, m *modelTerminal) {
			delete(m.persons, "p00011")
			m.badPages, m.badKind = 1, 2
		}, reason: wire.SyncDigest, statuses: failedThenDone, missing: 1, adds: 1},
		{name: "corrective delete refused once", protocol: 2, fault: func(h *harness, m *modelTerminal) {
			m.persons["zz"] = face.Person{ID: "zz"}
			refusals := 1
			m.refuse = func(c face.Command) int {
				if c.Op == face.DeletePerson && refusals > 0 {
					refusals--
					return 5
				}
				return 0
			}
		}, reason: wire.SyncDigest, statuses: failedThenDone, extra: 1, deletes: 1},
		{name: "no ack for a command", protocol: 2, fault: func(h *harness, m *modelTerminal) {
			delete(m.persons, "p00000")
			m.dropReplies = 2 // the ListPersons, then the AddPerson of the second try
		}, reason: wire.SyncDigest, statuses: []wire.SyncStatus{wire.SyncStarted, wire.SyncFailed, wire.SyncStarted,
			wire.SyncFailed, wire.SyncStarted, wire.SyncDone}, missing: 1, adds: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, ReconcileOptions{ListLimit: func(string) int { return 7 }})
			m := h.addTerminal("d", c.protocol, list)
			h.tick()
			c.fault(h, m)
			h.converge(40)
			var got []wire.SyncStatus
			for _, r := range h.reportsOf("d") {
				got = append(got, r.Status)
				if r.Reason != c.reason {
					t.Errorf("report %+v: reason %s, want %s", r, r.Reason, c.reason)
				}
			}
			if !slices.Equal(got, c.statuses) {
				t.Fatalf("reports %v, want statuses %v", h.reportsOf("d"), c.statuses)
			}
			last := h.reports[len(h.reports)-1]
			if last.Missing != c.missing || last.Extra != c.extra || last.Changed != c.changed {
				t.Errorf("last report %+v: want missing %d extra %d changed %d", last, c.missing, c.extra, c.changed)
			}
			if m.adds != c.adds || m.deletes != c.deletes {
				t.Errorf("the terminal applied %d adds and %d deletes, want %d and %d", m.adds, m.deletes, c.adds, c.deletes)
			}
			if m.duplicates != 0 {
				t.Errorf("%d commands reused a messageId", m.duplicates)
			}
			ended := uint64(len(got) / 2)
			if h.metrics.Seconds.Count() != ended || h.metrics.Reconciliations.With("done").Value() != 1 ||
				h.metrics.Drift.With(string(c.reason)).Value() != 1 {
				t.Errorf("metrics: %d durations (want %d), %d done, drift{%s} %d", h.metrics.Seconds.Count(), ended,
					h.metrics.Reconciliations.With("done").Value(), c.reason, h.metrics.Drift.With(string(c.reason)).Value())
			}
			for _, r := range h.reportsOf("d") {
				if r.Status == wire.SyncFailed && r.Error == "" {
					t.Errorf("a failed report without its error: %+v", r)
				}
			}
			// In sync from now on: nothing more is sent.
			lists, adds, deletes := m.lists, m.adds, m.deletes
			for range 30 {
				h.tick()
			}
			if m.lists != lists || m.adds != adds || m.deletes != deletes || len(h.reportsOf("d")) != len(got) {
				t.Fatalf("after converging: lists %d→%d adds %d→%d deletes %d→%d reports %d→%d", lists, m.lists, adds, m.adds,
					deletes, m.deletes, len(got), len(h.reportsOf("d")))
			}
			if h.clock.pending() != 0 {
				t.Fatalf("%d timers left running while in sync", h.clock.pending())
			}
		})
	}
}

var (
	done1          = []wire.SyncStatus{wire.SyncStarted, wire.SyncDone}
	failedThenDone = []wire.SyncStatus{wire.SyncStarted, wire.SyncFailed, wire.SyncStarted, wire.SyncDone}
)

// TestReconcileDriftNeedsIdleQueue: a differing digest is drift only from the second
// heartbeat after the queue held tasks (the first may predate the last command), and
// never while tasks are pending.
func TestReconcileDriftNeedsIdleQueue(t *testing.T) {
	h := newHarness(t, ReconcileOptions{})
	m := h.addTerminal("d", 2, people(5, "p"))
	h.rec.TasksPending("d", true)
	clear(m.persons)
	for range 5 {
		h.rec.Heartbeat("d", m.heartbeat("d"))
		h.clock.Advance(h.beat)
	}
	if len(h.queue["d"]) != 0 || len(h.reports) != 0 {
		t.Fatalf("reconciling while tasks are pending: queue %v, reports %v", h.queue["d"], h.reports)
	}
	h.rec.TasksPending("d", false)
	h.rec.Heartbeat("d", m.heartbeat("d"))
	if len(h.queue["d"]) != 0 {
		t.Fatalf("the first heartbeat after the queue emptied started a reconciliation")
	}
	h.rec.Heartbeat("d", m.heartbeat("d"))
	if len(h.queue["d"]) != 1 || h.queue["d"][0].cmd.Op != face.ListPersons {
		t.Fatalf("the second heartbeat did not start a reconciliation: queue %v", h.queue["d"])
	}
	if h.metrics.Drift.With("digest").Value() != 1 {
		t.Fatalf("drift{digest} = %d, want 1", h.metrics.Drift.With("digest").Value())
	}
	h.converge(5)
}

// TestReconcileDesiredChangeRestartsTheIdleCount: the intake changes a terminal's desired
// list before the outbox queues the task's command; a heartbeat arriving in between shows
// the terminal idle with its old list. It must not count towards drift: that heartbeat
// says nothing of the new list, and a reconciliation started on it (a v1 terminal's
// resend of every desired person) would double the work the tasks do anyway.
func TestReconcileDesiredChangeRestartsTheIdleCount(t *testing.T) {
	for _, protocol := range []int{1, 2} {
		h := newHarness(t, ReconcileOptions{})
		m := h.addTerminal("d", protocol, people(5, "p"))
		h.tick()
		h.tick() // in sync, idle for two heartbeats
		added := Record{ID: "p9", Name: "new"}
		if err := h.store.Set("d", added); err != nil {
			t.Fatal(err)
		}
		h.rec.DesiredChanged("d")
		h.rec.Heartbeat("d", m.heartbeat("d")) // before the task's command is queued
		if len(h.queue["d"]) != 0 || len(h.reports) != 0 {
			t.Fatalf("v%d: a heartbeat between the desired change and its task started a reconciliation: queue %v, reports %v",
				protocol, h.queue["d"], h.reports)
		}
		h.task("d", face.Command{MessageID: "AddPerson-p9", Op: face.AddPerson, Person: added.Person()})
		h.pump()
		h.tick()
		h.tick()
		if len(h.reports) != 0 {
			t.Fatalf("v%d: reports %v after the task was delivered", protocol, h.reports)
		}
	}
}

// TestReconcileRefusingTerminalBacksOff: a terminal refusing everything gets a
// reconciliation that fails, then others after waits doubling from BackoffBase up to
// BackoffMax, each reported started and failed: a bounded number over time, never a hot
// loop.
func TestReconcileRefusingTerminalBacksOff(t *testing.T) {
	h := newHarness(t, ReconcileOptions{BackoffBase: time.Second, BackoffMax: time.Minute})
	m := h.addTerminal("d", 2, people(5, "p"))
	m.refuse = func(face.Command) int { return 7 }
	clear(m.persons)
	start := h.clock.Now()
	for range 60 { // 10 minutes of heartbeats
		h.tick()
	}
	var starts []time.Time
	for i, r := range h.reportsOf("d") {
		at, err := time.Parse(time.RFC3339, r.At)
		if err != nil {
			t.Fatal(err)
		}
		want := wire.SyncStarted
		if i%2 == 1 {
			want = wire.SyncFailed
			if !strings.Contains(r.Error, "refused ListPersons (code 7") {
				t.Errorf("failed report's error %q", r.Error)
			}
		} else {
			starts = append(starts, at)
		}
		if r.Status != want {
			t.Fatalf("report %d %+v: want %s", i, r, want)
		}
	}
	// Drift is noticed at the second heartbeat (20 s), then waits of 1, 2, 4, …, 32 s and
	// then 60 s each until the 600 s mark.
	want := []time.Duration{20 * time.Second}
	for d := time.Second; ; d = min(2*d, time.Minute) {
		next := want[len(want)-1] + d
		if next > 600*time.Second {
			break
		}
		want = append(want, next)
	}
	if len(starts) != len(want) || m.lists != 0 || m.refused != len(want) {
		t.Fatalf("%d attempts (%d refusals), want %d at %v", len(starts), m.refused, len(want), want)
	}
	for i, s := range starts {
		if got := s.Sub(start); got != want[i] {
			t.Fatalf("attempt %d at %v, want %v", i, got, want[i])
		}
	}
	if st := h.rec.Status("d"); st.Failures != len(want) || st.InSync {
		t.Fatalf("status %+v", st)
	}
	if got := h.metrics.Reconciliations.With("failed").Value(); got != uint64(len(want)) {
		t.Fatalf("reconciliations{failed} = %d", got)
	}
	// The terminal stops refusing: the next attempt repairs it, and the failures reset.
	m.refuse = nil
	h.converge(10)
	if st := h.rec.Status("d"); st.Failures != 0 {
		t.Fatalf("failures after converging: %+v", st)
	}
}

// TestReconcileRefusedRecordIsExcluded: a terminal refusing one person's record makes the
// record leave the desired list, and the reconciliation goes on and ends done; the
// refusal never becomes a repair loop.
func TestReconcileRefusedRecordIsExcluded(t *testing.T) {
	h := newHarness(t, ReconcileOptions{ListLimit: func(string) int { return 4 }})
	m := h.addTerminal("d", 2, people(12, "p"))
	h.tick()
	m.refuse = func(c face.Command) int {
		if c.Op == face.AddPerson && c.Person.ID == "p00005" {
			return 9
		}
		return 0
	}
	clear(m.persons)
	h.converge(10)
	if !h.store.Excluded("d", "p00005") || len(m.persons) != 11 {
		t.Fatalf("excluded %v, the terminal holds %d", h.store.Excluded("d", "p00005"), len(m.persons))
	}
	if got := h.statuses("d"); !slices.Equal(got, []string{"digest/started", "digest/done"}) {
		t.Fatalf("reports %v", got)
	}
	refused := m.refused
	for range 50 {
		h.tick()
	}
	if m.refused != refused || m.lists != 1 {
		t.Fatalf("after excluding: %d refusals (was %d), %d lists", m.refused, refused, m.lists)
	}
	// A later task setting the person again brings it back (a Set includes it).
	if err := h.store.Set("d", Record{ID: "p00005", Name: "fixed"}); err != nil {
		t.Fatal(err)
	}
	h.rec.DesiredChanged("d")
	m.refuse = nil
	h.converge(5)
}

// TestReconcileTooManyRefusals: a terminal refusing every record fails the
// reconciliation after MaxRefusals, excluding no more than MaxRefusals+1 records per
// attempt.
func TestReconcileTooManyRefusals(t *testing.T) {
	h := newHarness(t, ReconcileOptions{MaxRefusals: 2})
	m := h.addTerminal("d", 2, people(20, "p"))
	h.tick()
	m.refuse = func(c face.Command) int {
		if c.Op == face.AddPerson {
			return 9
		}
		return 0
	}
	clear(m.persons)
	h.beatNow("d")
	h.beatNow("d")
	if got := h.statuses("d"); !slices.Equal(got, []string{"digest/started", "digest/failed"}) {
		t.Fatalf("reports %v", got)
	}
	// The corrections queued when it failed are sent all the same (and refused): they
	// exclude nothing.
	if m.refused < 3 || m.refused > 3+h.window || h.store.Count("d") != 17 {
		t.Fatalf("%d refusals, desired count %d", m.refused, h.store.Count("d"))
	}
}

// TestReconcileCapacityFails: code 23 fails the reconciliation without excluding anyone.
func TestReconcileCapacityFails(t *testing.T) {
	h := newHarness(t, ReconcileOptions{})
	m := h.addTerminal("d", 2, people(10, "p"))
	h.tick()
	clear(m.persons)
	m.capacity = 4
	h.beatNow("d")
	h.beatNow("d")
	reps := h.reportsOf("d")
	if len(reps) != 2 || reps[1].Status != wire.SyncFailed || !strings.HasPrefix(reps[1].Error, "capacity") {
		t.Fatalf("reports %+v", reps)
	}
	if h.store.Count("d") != 10 || len(m.persons) != 4 {
		t.Fatalf("desired %d, held %d", h.store.Count("d"), len(m.persons))
	}
	m.capacity = 0
	h.converge(10)
}

// TestReconcileYieldsToTasks: tasks arriving during a reconciliation wait behind at most
// the command in flight; the reconciliation sends nothing while they are pending, then
// resumes; a correction the tasks made unnecessary is not sent.
func TestReconcileYieldsToTasks(t *testing.T) {
	h := newHarness(t, ReconcileOptions{ListLimit: func(string) int { return 5 }})
	m := h.addTerminal("d", 2, people(20, "p"))
	h.tick()
	clear(m.persons)
	h.clock.Advance(h.beat)
	h.rec.Heartbeat("d", m.heartbeat("d"))
	// Deliver the first ListPersons (an empty page: all 20 missing) and the first add.
	if c := h.deliverOne("d"); c.Op != face.ListPersons {
		t.Fatalf("first command %+v", c)
	}
	if c := h.deliverOne("d"); c.Op != face.AddPerson || c.Person.ID != "p00000" {
		t.Fatalf("second command %+v", c)
	}
	// More corrections wait queued (p00001 on); now tasks come: p00003 (queued: the task
	// supersedes it) and p00010 (not yet queued) are deleted, Y added.
	if q := h.queue["d"]; len(q) == 0 || len(q) >= h.window || q[0].cmd.Person.ID != "p00001" {
		t.Fatalf("queue %v", q)
	}
	for _, id := range []string{"p00003", "p00010"} {
		if err := h.store.Delete("d", id); err != nil {
			t.Fatal(err)
		}
	}
	y := Record{ID: "y", Name: "new"}
	if err := h.store.Set("d", y); err != nil {
		t.Fatal(err)
	}
	h.rec.DesiredChanged("d")
	h.task("d", face.Command{MessageID: "task-1", Op: face.DeletePerson, Person: face.Person{ID: "p00003"}})
	h.task("d", face.Command{MessageID: "task-2", Op: face.DeletePerson, Person: face.Person{ID: "p00010"}})
	h.task("d", face.Command{MessageID: "task-3", Op: face.AddPerson, Person: personOf(y, 2)})
	// The tasks go first: they waited behind the command in flight only.
	for _, want := range []string{"task-1", "task-2", "task-3"} {
		if c := h.deliverOne("d"); c.MessageID != want {
			t.Fatalf("delivered %s %s, want %s before the queued corrections", c.Op, c.MessageID, want)
		}
		if !h.rec.Status("d").Reconciling {
			t.Fatal("the reconciliation ended instead of pausing")
		}
	}
	h.pump() // the rest of the reconciliation
	h.converge(5)
	for _, id := range []string{"p00003", "p00010"} {
		if _, held := m.persons[id]; held {
			t.Fatalf("%s held", id)
		}
	}
	if m.adds != 18+1 {
		t.Fatalf("%d adds (want 18 corrections and the task's)", m.adds)
	}
	if got := h.statuses("d"); !slices.Equal(got, []string{"digest/started", "digest/done"}) {
		t.Fatalf("reports %v", got)
	}
}

// TestReconcileWindow: a repair keeps up to Window corrections queued, never more, and
// tops them up once half are answered; Window 1 sends one at a time. The harness's queue
// fails the test if more are queued, or a ListPersons with corrections.
func TestReconcileWindow(t *testing.T) {
	for _, window := range []int{1, 2, 8} {
		t.Run(fmt.Sprint(window), func(t *testing.T) {
			h := newHarness(t, ReconcileOptions{Window: window, ListLimit: func(string) int { return 30 }})
			m := h.addTerminal("d", 2, people(100, "p"))
			h.tick()
			for i, id := range m.ids() {
				if i%3 != 0 {
					delete(m.persons, id) // 66 missing, spread over the pages
				}
			}
			h.tick()
			h.converge(5)
			if got := h.mostQueued["d"]; got != window {
				t.Fatalf("at most %d corrections queued at once, want the window, %d", got, window)
			}
			if m.adds != 66 || m.lists != 2 {
				t.Fatalf("%d adds, %d lists", m.adds, m.lists)
			}
		})
	}
}

// TestReconcileWindowStepTimeout: StepTimeout bounds the wait for the next reply, not the
// window's: replies that keep coming within it never fail the reconciliation, however long
// it runs, nor does a time the terminal's tasks go first; none for StepTimeout does.
func TestReconcileWindowStepTimeout(t *testing.T) {
	h := newHarness(t, ReconcileOptions{StepTimeout: time.Minute, ListLimit: func(string) int { return 100 }})
	m := h.addTerminal("d", 2, people(30, "p"))
	h.tick()
	clear(m.persons)
	h.rec.Heartbeat("d", m.heartbeat("d")) // drift
	h.deliverOne("d")                      // the ListPersons: 30 missing
	for range 10 {                         // a reply every 40 s: 400 s in all
		h.clock.Advance(40 * time.Second)
		h.deliverOne("d")
	}
	h.task("d", face.Command{MessageID: "task-1", Op: face.AddPerson, Person: face.Person{ID: "zz", Name: "z"}})
	h.clock.Advance(5 * time.Minute) // the task goes first, for a long time
	if h.deliverOne("d").MessageID != "task-1" {
		t.Fatal("the task did not go first")
	}
	h.clock.Advance(50 * time.Second)
	h.deliverOne("d")
	if got := h.statuses("d"); !slices.Equal(got, []string{"digest/started"}) {
		t.Fatalf("reports %v, want the reconciliation going on", got)
	}
	h.clock.Advance(time.Minute) // now no reply for StepTimeout
	reps := h.reportsOf("d")
	if len(reps) != 2 || reps[1].Status != wire.SyncFailed || !strings.Contains(reps[1].Error, "no reply to AddPerson") {
		t.Fatalf("reports %+v", reps)
	}
	h.converge(10)
}

// TestReconcileLateCommandsAwaited: the corrections a failed reconciliation left queued
// are sent and answered before the next one begins (a Resync right away too): at most
// Window of a terminal's commands are queued at a time, and a ListPersons never follows
// them in the queue (the harness checks both).
func TestReconcileLateCommandsAwaited(t *testing.T) {
	h := newHarness(t, ReconcileOptions{ListLimit: func(string) int { return 100 }})
	m := h.addTerminal("d", 2, people(30, "p"))
	h.tick()
	clear(m.persons)
	refused := false
	m.refuse = func(c face.Command) int {
		if refused || c.Op != face.DeletePerson && c.Op != face.AddPerson {
			return 0
		}
		refused = true
		return codeCapacity
	}
	h.rec.Heartbeat("d", m.heartbeat("d")) // drift
	h.deliverOne("d")                      // the ListPersons
	h.deliverOne("d")                      // the first correction: code 23 fails the reconciliation
	if got := h.statuses("d"); !slices.Equal(got, []string{"digest/started", "digest/failed"}) {
		t.Fatalf("reports %v", got)
	}
	left := len(h.queue["d"])
	if left == 0 {
		t.Fatal("no corrections left queued: the test tests nothing")
	}
	h.rec.Resync("d")
	if n := len(h.queue["d"]); n != left || h.rec.Status("d").Reconciling {
		t.Fatalf("a reconciliation began while %d corrections of the last were queued (queue %d)", left, n)
	}
	h.pump() // the late corrections; then the next reconciliation
	if got := h.statuses("d"); !slices.Equal(got, []string{"digest/started", "digest/failed", "digest/started", "digest/done"}) {
		t.Fatalf("reports %v", got)
	}
	h.converge(5)
}

// TestReconcileRateLimit: at most MaxReconciling terminals reconcile at once; the others
// wait their turn and all converge.
func TestReconcileRateLimit(t *testing.T) {
	h := newHarness(t, ReconcileOptions{MaxReconciling: 2, ListLimit: func(string) int { return 3 }})
	devs := []string{"a", "b", "c", "d", "e", "f"}
	for _, dev := range devs {
		h.addTerminal(dev, 2, people(10, "p"))
	}
	h.tick()
	for _, dev := range devs {
		clear(h.terms[dev].persons)
	}
	running, most := 0, 0
	h.tick()
	h.tick()
	h.converge(10)
	for _, r := range h.reports {
		switch r.Status {
		case wire.SyncStarted:
			running++
			most = max(most, running)
		default:
			running--
		}
	}
	if most != 2 || len(h.reports) != 2*len(devs) {
		t.Fatalf("%d reconciling at once (want 2), %d reports", most, len(h.reports))
	}
}

// TestReconcileDeletesEveryExtraOnAManagedTerminal: on a terminal whose desired list the
// agent manages (tasks built it, never set whole), every extra person goes: one carrying a
// rev (a record the agent sent, whose DeletePerson the terminal refused) and one without
// (added at the terminal by hand). The terminal is then in sync and gets nothing more.
func TestReconcileDeletesEveryExtraOnAManagedTerminal(t *testing.T) {
	h := newHarness(t, ReconcileOptions{})
	m := newModelTerminal(2, "SN")
	h.terms["d"] = m
	for _, r := range people(5, "p") {
		if err := h.store.Set("d", r); err != nil {
			t.Fatal(err)
		}
		m.persons[r.ID] = personOf(r, 2)
	}
	if err := h.store.Delete("d", "p00003"); err != nil { // the task's delete the terminal refused
		t.Fatal(err)
	}
	m.persons["old"] = face.Person{ID: "old", Name: "added by hand"}
	for range 5 {
		h.tick()
	}
	_, agents := m.persons["p00003"]
	_, hand := m.persons["old"]
	if agents || hand || m.deletes != 2 || len(m.persons) != 4 {
		t.Fatalf("held %v, %d deletes: both extras should go", m.ids(), m.deletes)
	}
	if got := h.reportsOf("d"); len(got) == 0 || got[len(got)-1].Status != wire.SyncDone || got[len(got)-1].Extra != 2 {
		t.Fatalf("reports %+v", got)
	}
	h.converge(5)
	if !h.rec.Status("d").InSync {
		t.Fatalf("status %+v", h.rec.Status("d"))
	}
	lists := m.lists
	for range 20 {
		h.tick()
	}
	if m.lists != lists {
		t.Fatalf("%d more lists of a terminal in sync", m.lists-lists)
	}
}

// TestReconcileLeavesUnmanagedTerminal: a terminal whose desired list the agent never knew
// (no task named it) is not reconciled, whatever it holds: nothing to compare it with.
func TestReconcileLeavesUnmanagedTerminal(t *testing.T) {
	h := newHarness(t, ReconcileOptions{})
	m := newModelTerminal(2, "SN")
	h.terms["d"] = m
	m.persons["old"] = face.Person{ID: "old", Name: "there before the agent"}
	for range 20 {
		h.tick()
	}
	h.rec.Resync("d")
	h.tick()
	if m.lists != 0 || m.deletes != 0 || len(m.persons) != 1 || len(h.reportsOf("d")) != 0 {
		t.Fatalf("%d lists, %d deletes, held %v, reports %+v", m.lists, m.deletes, m.ids(), h.reportsOf("d"))
	}
}

// TestReconcileResyncAndNoDesired: a resync of a terminal in sync lists it once and
// reports done with nothing to do; a terminal without a desired list is never judged.
func TestReconcileResyncAndNoDesired(t *testing.T) {
	h := newHarness(t, ReconcileOptions{ListLimit: func(string) int { return 1000 }})
	m := h.addTerminal("d", 2, people(40, "p"))
	other := newModelTerminal(2, "SN-o")
	other.persons["x"] = face.Person{ID: "x"}
	h.terms["o"] = other
	h.tick()
	h.tick()
	h.rec.Resync("d")
	h.pump()
	if got := h.statuses("d"); !slices.Equal(got, []string{"digest/started", "digest/done"}) || m.lists != 1 {
		t.Fatalf("reports %v, %d lists", got, m.lists)
	}
	for range 10 {
		h.tick()
	}
	if other.lists+other.deletes != 0 || len(h.reportsOf("o")) != 0 || h.rec.Status("o").InSync {
		t.Fatalf("a terminal without a desired list: %d lists, %d deletes, status %+v", other.lists, other.deletes, h.rec.Status("o"))
	}
}

// TestReconcileStepTimeout: a command whose reply never comes fails the reconciliation
// after StepTimeout; the late reply is ignored.
func TestReconcileStepTimeout(t *testing.T) {
	h := newHarness(t, ReconcileOptions{StepTimeout: time.Minute})
	m := h.addTerminal("d", 2, people(3, "p"))
	h.tick()
	clear(m.persons)
	h.lose = true
	h.tick()
	h.tick()
	if got := h.statuses("d"); !slices.Equal(got, []string{"digest/started"}) {
		t.Fatalf("reports %v", got)
	}
	h.clock.Advance(time.Minute)
	reps := h.reportsOf("d")
	if len(reps) < 2 || reps[1].Status != wire.SyncFailed || !strings.Contains(reps[1].Error, "no reply to ListPersons") {
		t.Fatalf("reports %+v", reps)
	}
	h.rec.ListReply("d", "Sync-late", face.Ack{}, nil) // ignored
	h.lose = false
	h.converge(10)
}

// TestReconcileQueueRefuses: a command the queue does not take fails the reconciliation.
func TestReconcileQueueRefuses(t *testing.T) {
	h := newHarness(t, ReconcileOptions{})
	m := h.addTerminal("d", 2, people(3, "p"))
	h.tick()
	delete(m.persons, "p00001")
	h.refuseQueue = true
	h.beatNow("d")
	h.beatNow("d")
	reps := h.reportsOf("d")
	if len(reps) != 2 || !strings.Contains(reps[1].Error, "not queued: the queue is full") {
		t.Fatalf("reports %+v", reps)
	}
	h.refuseQueue = false
	h.converge(10)
}

// TestReconcileForget: forgetting a terminal mid-reconciliation reports it failed, frees
// its place and ignores its late replies.
func TestReconcileForget(t *testing.T) {
	h := newHarness(t, ReconcileOptions{MaxReconciling: 1})
	m := h.addTerminal("d", 2, people(3, "p"))
	h.tick()
	clear(m.persons)
	h.clock.Advance(h.beat)
	h.rec.Heartbeat("d", m.heartbeat("d"))
	h.rec.Forget("d")
	h.pump()
	if got := h.statuses("d"); !slices.Equal(got, []string{"digest/started", "digest/failed"}) {
		t.Fatalf("reports %v", got)
	}
	delete(h.terms, "d")
	m2 := h.addTerminal("e", 2, people(3, "p"))
	h.tick()
	clear(m2.persons)
	h.converge(5)
}

// TestReconcileCorrectionCarriesFace: a correction carries the person's face and the rev
// with the face's hash, as the intake's AddPerson does, so the repaired terminal is in
// step; a v1 terminal gets neither.
func TestReconcileCorrectionCarriesFace(t *testing.T) {
	for _, protocol := range []int{1, 2} {
		h := newHarness(t, ReconcileOptions{})
		list := people(4, "p")
		for i := range list {
			list[i].Face = face.FaceRef{SHA256: face.FaceSHA256([]byte{byte(i % 2)}), Size: 1, Kind: face.FaceTemplate}
		}
		m := h.addTerminal("d", protocol, list)
		h.tick()
		clear(m.persons)
		h.beatNow("d")
		h.converge(10)
		for _, r := range list {
			p := m.persons[r.ID]
			want := personOf(r, protocol)
			if p != want {
				t.Fatalf("protocol %d: terminal holds %+v, want %+v", protocol, p, want)
			}
			if protocol == 2 && p.Rev != face.PersonRecordRev(&p).String() {
				t.Fatalf("rev %s is not the record's with its face", p.Rev)
			}
		}
	}
}
