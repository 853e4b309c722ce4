package outbox

// Durability: restarts, the journal failing, control commands and results that wait for
// the disk, compaction, the bounds on unreported results.

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

func TestRestartResendsInFlightWithSameIDAndTries(t *testing.T) {
	e := newEnv(t, Options{})
	e.enqueue("m1", "d", "p")
	e.enqueue("m2", "d", "q")
	e.o.Heartbeat("d")
	e.expectSend("m1", 1)
	e.restart()
	if st := e.status("d"); st.Online || st.Queued != 2 || st.InFlight != "" {
		t.Fatalf("after restart: %+v", st)
	}
	e.o.Heartbeat("d")
	e.expectSend("m1", 2) // the same message id, its try counted
	e.o.Ack("d", "m1", 0, "")
	e.expectSend("m2", 1)
}

func TestResultsSurviveRestartUntilReported(t *testing.T) {
	e := newEnv(t, Options{})
	e.o.Heartbeat("d")
	for i := range 5 {
		id := fmt.Sprintf("m%d", i)
		e.enqueue(id, "d", id)
		e.expectSend(id, 1)
		e.o.Ack("d", id, 0, "")
	}
	e.o.MarkReported("m0", "m1")
	e.restart()
	select {
	case <-e.o.ResultsReady():
	default:
		t.Fatal("ResultsReady not signalled for results waiting after restart")
	}
	res := e.results()
	if len(res) != 3 || res[0].MessageID != "m2" || res[2].MessageID != "m4" {
		t.Fatalf("results after restart: %+v", res)
	}
	e.o.MarkReported("m2", "m3", "m4")
	e.restart()
	if res := e.results(); len(res) != 0 {
		t.Fatalf("reported results came back: %+v", res)
	}
}

func TestPauseResumeSurvivesRestart(t *testing.T) {
	e := newEnv(t, Options{})
	e.o.Pause("d")
	e.enqueue("m1", "d", "p")
	e.o.Heartbeat("d")
	if st := e.status("d"); !st.Paused || st.InFlight != "" {
		t.Fatalf("paused: %+v", st)
	}
	e.restart()
	e.o.Heartbeat("d")
	if st := e.status("d"); !st.Paused || st.InFlight != "" {
		t.Fatalf("paused after restart: %+v", st)
	}
	e.o.Resume("d")
	e.expectSend("m1", 1)
}

func TestRetryAndPurgeFailed(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	e.o.Heartbeat("d")
	e.enqueue("m1", "d", "p")
	e.expectSend("m1", 1)
	e.o.Ack("d", "m1", 1, "busy")
	e.enqueue("m2", "d", "q")
	e.expectSend("m2", 1)
	e.o.Ack("d", "m2", 1, "busy")
	e.o.MarkReported("m1", "m2")
	n, err := e.o.RetryFailed("d")
	if err != nil || n != 2 {
		t.Fatalf("RetryFailed: %d %v", n, err)
	}
	e.expectSend("m1", 1)
	e.o.Ack("d", "m1", 0, "")
	e.expectSend("m2", 1)
	e.o.Ack("d", "m2", 2, "still busy")
	if n, err := e.o.PurgeFailed(""); err != nil || n != 1 {
		t.Fatalf("PurgeFailed: %d %v", n, err)
	}
	if st := e.status("d"); st.FailedHeld != 0 {
		t.Fatalf("status: %+v", st)
	}
}

// A full disk: intake is refused, the table kept for the next Open, and the journal's
// OnFailure of Options (the health checks' event) is told once, when Err already says it.
func TestDiskFullRefusesIntakeKeepsTable(t *testing.T) {
	ffs := &faultFS{budget: -1}
	told := make(chan error, 4)
	var e *env
	e = newEnv(t, Options{Journal: journal.Options{FS: ffs, OnFailure: func(error) { told <- e.o.Err() }}})
	e.enqueue("m1", "d", "p")
	ffs.mu.Lock()
	ffs.budget = 0
	ffs.mu.Unlock()
	err := e.o.Enqueue(Task{MessageID: "m2", DeviceID: "d"})
	if !errors.Is(err, ErrJournal) || !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("enqueue on a full disk: %v", err)
	}
	if err := e.o.Enqueue(Task{MessageID: "m3", DeviceID: "d"}); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("enqueue after disk full: %v", err)
	}
	if !errors.Is(e.o.Err(), journal.ErrNoSpace) {
		t.Fatalf("Err: %v", e.o.Err())
	}
	select {
	case err := <-told:
		if !errors.Is(err, ErrJournal) || len(told) != 0 {
			t.Fatalf("OnFailure saw Err %v, %d more calls", err, len(told))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnFailure was not called")
	}
	ffs.mu.Lock()
	ffs.budget = -1
	ffs.mu.Unlock()
	e.restart()
	if st := e.status("d"); st.Queued != 1 {
		t.Fatalf("after reopening: %+v", st)
	}
	e.enqueue("m2", "d", "q")
}

// A duplicate of a task that is still being stored gets that store's outcome.
func TestDuplicateOfPendingWaitsForItsOutcome(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	errs := e.o.EnqueueBatch([]Task{{MessageID: "m1", DeviceID: "d"}, {MessageID: "m1", DeviceID: "d"}})
	if errs[0] != nil || !errors.Is(errs[1], ErrDuplicate) {
		t.Fatalf("errs: %v", errs)
	}
	ffs := &faultFS{budget: -1}
	e2 := newEnv(t, Options{Journal: journal.Options{FS: ffs}})
	ffs.mu.Lock()
	ffs.budget = 0
	ffs.mu.Unlock()
	errs = e2.o.EnqueueBatch([]Task{{MessageID: "m1", DeviceID: "d"}, {MessageID: "m1", DeviceID: "d"}})
	if !errors.Is(errs[0], journal.ErrNoSpace) || !errors.Is(errs[1], journal.ErrNoSpace) {
		t.Fatalf("a duplicate of a task that failed to store must fail too: %v", errs)
	}
}

func TestCompactionBoundsTheJournal(t *testing.T) {
	compacted := make(chan struct{}, 1)
	opts := Options{Journal: journal.Options{Sync: journal.SyncNone, SegmentSize: 8 << 10}, CompactAfter: 200}
	opts.afterCompact = func(error) {
		select {
		case compacted <- struct{}{}:
		default:
		}
	}
	e := newEnv(t, opts)
	e.o.Heartbeat("d")
	for i := range 600 {
		id := fmt.Sprintf("m%d", i)
		e.enqueue(id, "d", id)
		e.expectSend(id, 1)
		e.o.Ack("d", id, 0, "")
		res := e.results()
		e.o.MarkReported(res[0].MessageID)
	}
	// Compaction runs in the background, and a slow machine (qemu under load) can keep one
	// running through most of the loop. Once none runs, the next record starts one, since
	// the journal holds far more than CompactAfter dead records; Close waits for it.
	for {
		e.o.mu.Lock()
		running := e.o.compacting
		e.o.mu.Unlock()
		if !running {
			break
		}
		select {
		case <-compacted: // that one, or an earlier one's late signal: look again
		case <-time.After(30 * time.Second):
			t.Fatal("a compaction still runs after 30 s")
		}
	}
	e.enqueue("last", "d", "p")
	e.expectSend("last", 1)
	e.restart()
	st := e.o.j.Stats()
	r := e.o.j.Recovery()
	// Without compaction the log would hold some 2,400 records (four per task).
	if r.Snapshot == "" || r.SnapshotRecords+r.Records > 1800 {
		t.Fatalf("journal not compacted: %+v, %d segments", r, st.Segments)
	}
	if err := e.o.Enqueue(Task{MessageID: "m5", DeviceID: "d"}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("dedupe memory lost in compaction: %v", err)
	}
	e.o.Heartbeat("d")
	e.expectSend("last", 2)
}

// gateFS holds every fsync while closed, so a test can see whether a call waits for one.
type gateFS struct {
	journal.OSFS
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	entered chan struct{}
}

type gateFile struct {
	*os.File
	fs *gateFS
}

func (g *gateFS) OpenFile(name string, flag int, perm os.FileMode) (journal.File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &gateFile{f, g}, nil
}

func (g *gateFS) close() { g.mu.Lock(); g.gate = make(chan struct{}); g.mu.Unlock() }

func (g *gateFS) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (f *gateFile) Sync() error {
	f.fs.mu.Lock()
	gate := f.fs.gate
	f.fs.mu.Unlock()
	if gate != nil {
		select {
		case f.fs.entered <- struct{}{}:
		default:
		}
		<-gate
	}
	return f.File.Sync()
}

// gatedEnvWithM1InFlight is an outbox whose fsyncs a gateFS can hold (open until closed),
// with command m1 sent to device d.
func gatedEnvWithM1InFlight(t *testing.T) (*env, *gateFS) {
	t.Helper()
	g := &gateFS{entered: make(chan struct{}, 1)}
	e := newEnv(t, Options{Journal: journal.Options{Sync: journal.SyncAlways, FS: g}})
	t.Cleanup(g.open)
	e.enqueue("m1", "d", "p")
	e.o.Heartbeat("d")
	e.expectSend("m1", 1)
	return e, g
}

// Control commands are answered only once their record is on disk: "the pause survives a
// restart" must hold from the moment Pause returns.
func TestControlCommandsWaitForTheDisk(t *testing.T) {
	e, g := gatedEnvWithM1InFlight(t)
	e.o.Ack("d", "m1", 7, "no such person") // refused: Failed, for RetryFailed below

	calls := map[string]func() error{
		"Pause":  func() error { return e.o.Pause("d") },
		"Resume": func() error { return e.o.Resume("d") },
		"RetryFailed": func() error {
			n, err := e.o.RetryFailed("d")
			if err == nil && n != 1 {
				err = fmt.Errorf("retried %d", n)
			}
			return err
		},
	}
	for _, name := range []string{"Pause", "Resume", "RetryFailed"} {
		g.close()
		done := make(chan error, 1)
		go func() { done <- calls[name]() }()
		select {
		case <-g.entered:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no fsync", name)
		}
		select {
		case err := <-done:
			t.Fatalf("%s returned (%v) while its record's fsync was held", name, err)
		case <-time.After(100 * time.Millisecond): // a negative: nothing to wait on
		}
		g.open()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s never returned", name)
		}
	}
}

// The finish record is journalled lazily, but a result is offered only once it is on disk:
// otherwise a crash could forget an outcome that was already reported, and the resend could
// report a different one.
func TestResultsWaitForTheFinishRecord(t *testing.T) {
	e, g := gatedEnvWithM1InFlight(t)
	g.close()
	e.o.Ack("d", "m1", 0, "")
	done := make(chan []Result, 1)
	go func() {
		r, err := e.o.Results(10)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	select {
	case <-g.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no fsync")
	}
	select {
	case r := <-done:
		t.Fatalf("Results returned %+v while the finish record's fsync was held", r)
	case <-time.After(100 * time.Millisecond): // a negative: nothing to wait on
	}
	g.open()
	select {
	case r := <-done:
		if len(r) != 1 || r[0].MessageID != "m1" || r[0].Status != Succeeded {
			t.Fatalf("results: %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Results never returned")
	}
}

// Finished commands stay in the table until reported. While the reporter cannot publish,
// intake must hit a bound too, or the table grows without one.
func TestUnreportedResultsAreBounded(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), MaxQueued: 2,
		Devices: map[string]DeviceConfig{"d": {NoHeartbeat: true}}})
	for _, id := range []string{"m1", "m2"} {
		e.enqueue(id, "d", id)
		e.expectSend(id, 1)
		e.o.Ack("d", id, 0, "")
	}
	err := e.o.Enqueue(Task{MessageID: "m3", DeviceID: "d"})
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "not yet reported") {
		t.Fatalf("intake with %d unreported results: %v", e.o.Stats().Unreported, err)
	}
	if err := e.o.MarkReported("m1"); err != nil {
		t.Fatal(err)
	}
	e.enqueue("m3", "d", "m3")
}

// Control calls tell OnChanged of each device whose state they changed, once the change
// is in the table (Status shows it), and only then: a pause of a paused device, a retry
// with nothing to retry, tell nobody.
func TestControlCallsTellOnChanged(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	var told []string
	e.o.OnChanged(func(dev string) {
		st, _ := e.o.DeviceStatus(dev)
		told = append(told, fmt.Sprintf("%s paused=%v queued=%d held=%d", dev, st.Paused, st.Queued, st.FailedHeld))
	})
	expect := func(want ...string) {
		t.Helper()
		if !slices.Equal(told, want) {
			t.Fatalf("OnChanged heard %q, want %q", told, want)
		}
		told = nil
	}
	e.o.Pause("d")
	expect("d paused=true queued=0 held=0")
	e.o.Pause("d")
	expect()
	e.o.Heartbeat("d")
	e.o.Heartbeat("e")
	e.enqueue("m1", "d", "p")
	e.enqueue("m2", "e", "p")
	e.expectSend("m2", 1)
	e.o.Ack("e", "m2", 1, "busy")
	expect() // enqueues and acks: their callers tell
	e.o.Resume("d")
	expect("d paused=false queued=0 held=0") // m1 went in flight at once
	e.expectSend("m1", 1)
	e.o.Ack("d", "m1", 1, "busy")
	if n, err := e.o.RetryFailed(""); err != nil || n != 2 {
		t.Fatalf("RetryFailed: %d %v", n, err)
	}
	expect("d paused=false queued=0 held=0", "e paused=false queued=0 held=0")
	if n, err := e.o.RetryFailed("d"); err != nil || n != 0 {
		t.Fatalf("RetryFailed again: %d %v", n, err)
	}
	expect()
	e.expectSends(map[string]int{"m1": 1, "m2": 1})
	e.o.Ack("e", "m2", 0, "")
	e.o.Ack("d", "m1", 1, "busy")
	if n, err := e.o.PurgeFailed("d"); err != nil || n != 1 {
		t.Fatalf("PurgeFailed: %d %v", n, err)
	}
	expect("d paused=false queued=0 held=0")
	e.o.OnChanged(nil)
	e.o.Pause("d")
	expect()
}

// The purge of failures past FailedRetention tells OnChanged of each device it dropped
// failures from, once: the state writer and the operator's page show a count of held
// failures that would otherwise stay stale until some unrelated change.
func TestRetentionPurgeTellsOnChanged(t *testing.T) {
	const retention = time.Minute
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{RetryInterval: 10 * time.Second,
		HeartbeatTimeout: time.Hour, FailedRetention: retention}})
	var told []string
	e.o.OnChanged(func(dev string) {
		st, _ := e.o.DeviceStatus(dev)
		told = append(told, fmt.Sprintf("%s held=%d", dev, st.FailedHeld))
	})
	for _, dev := range []string{"d", "e", "f"} {
		e.o.Heartbeat(dev)
	}
	for _, c := range []struct{ id, dev string }{{"m1", "d"}, {"m2", "d"}, {"m3", "e"}, {"m4", "f"}} {
		e.enqueue(c.id, c.dev, c.id)
		e.expectSend(c.id, 1)
		e.o.Ack(c.dev, c.id, 7, "busy")
	}
	if err := e.o.MarkReported("m1", "m2", "m3"); err != nil { // m4 is not: it is not purged
		t.Fatal(err)
	}
	if told != nil {
		t.Fatalf("OnChanged heard %q before any purge", told)
	}
	e.clock.Advance(retention - time.Millisecond)
	if told != nil {
		t.Fatalf("OnChanged heard %q before the retention passed", told)
	}
	e.clock.Advance(time.Millisecond)
	if want := []string{"d held=0", "e held=0"}; !slices.Equal(told, want) {
		t.Fatalf("retention purge: OnChanged heard %q, want %q", told, want)
	}
	if st := e.status("f"); st.FailedHeld != 1 {
		t.Fatalf("unreported failure purged: %+v", st)
	}
}
