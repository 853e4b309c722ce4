package whitelist

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// asyncQueue carries the reconciler's commands to model terminals on a goroutine of its
// own and passes the replies back from there, as the outbox does: the real clock, events
// on several goroutines at once (run it with -race).
type asyncQueue struct {
	r     *Reconciler
	mu    sync.Mutex
	terms map[string]*modelTerminal
	cmds  chan asyncCmd
	rmu   sync.Mutex
	last  map[string]wire.SyncStatus // per device, to check each report follows the one before
	bad   []string
	// changed is signalled after every event the test's goroutines pass on.
	changed chan struct{}
}

func (q *asyncQueue) poke() {
	select {
	case q.changed <- struct{}{}:
	default:
	}
}

type asyncCmd struct {
	dev string
	cmd face.Command
}

func (q *asyncQueue) List(dev string, cmd face.Command) error {
	q.cmds <- asyncCmd{dev, cmd}
	return nil
}
func (q *asyncQueue) Correct(dev string, cmd face.Command) error {
	q.cmds <- asyncCmd{dev, cmd}
	return nil
}

func (q *asyncQueue) SyncReport(r wire.SyncReport) {
	q.rmu.Lock()
	defer q.rmu.Unlock()
	prev := q.last[r.DeviceID]
	if (r.Status == wire.SyncStarted) != (prev != wire.SyncStarted) {
		q.bad = append(q.bad, fmt.Sprintf("%s: %s after %q", r.DeviceID, r.Status, prev))
	}
	q.last[r.DeviceID] = r.Status
}

func (q *asyncQueue) run(done <-chan struct{}) {
	for {
		select {
		case c := <-q.cmds:
			q.mu.Lock()
			ack, _ := q.terms[c.dev].handle(c.cmd, false)
			q.mu.Unlock()
			if c.cmd.Op == face.ListPersons {
				q.r.ListReply(c.dev, c.cmd.MessageID, ack, nil)
			} else {
				q.r.CorrectionDone(c.dev, c.cmd.MessageID, ack, nil)
			}
			q.poke()
		case <-done:
			return
		}
	}
}

// TestReconcileAsync: terminals factory-reset while heartbeats arrive on their own
// goroutines and replies on the queue's: every terminal converges, reports alternate
// started and done/failed per terminal.
func TestReconcileAsync(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{})
	q := &asyncQueue{terms: map[string]*modelTerminal{}, cmds: make(chan asyncCmd, 64), last: map[string]wire.SyncStatus{},
		changed: make(chan struct{}, 1)}
	r, err := NewReconciler(ReconcileOptions{Store: s, Lister: q, Corrector: q, Reporter: q, MaxReconciling: 2,
		ListLimit: func(string) int { return 7 }, BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q.r = r
	defer r.Close()
	devs := []string{"a", "b", "c", "d", "e"}
	for _, dev := range devs {
		if _, err := s.Replace(dev, people(60, dev)); err != nil {
			t.Fatal(err)
		}
		q.terms[dev] = newModelTerminal(2, "SN-"+dev) // empty: factory reset
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); q.run(done) }()
	for _, dev := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					q.mu.Lock()
					h := q.terms[dev].heartbeat(dev)
					q.mu.Unlock()
					r.Heartbeat(dev, h)
					q.poke()
				case <-done:
					return
				}
			}
		}()
	}
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for {
		all := true
		for _, dev := range devs {
			all = all && r.Status(dev).InSync
		}
		if all {
			break
		}
		select {
		case <-q.changed:
		case <-timeout.C:
			close(done)
			wg.Wait()
			t.Fatalf("not in sync within 20 s: %+v", r.Status("a"))
		}
	}
	close(done)
	wg.Wait()
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, dev := range devs {
		if got, want := len(q.terms[dev].persons), 60; got != want || q.terms[dev].digest() != s.Digest(dev) {
			t.Errorf("%s holds %d persons, want %d; digests %v %v", dev, got, want, q.terms[dev].digest(), s.Digest(dev))
		}
	}
	q.rmu.Lock()
	defer q.rmu.Unlock()
	if len(q.bad) > 0 {
		t.Fatalf("reports out of order: %v", q.bad)
	}
}
