package outbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// sentSoFar returns the commands Send was called with so far, without waiting.
func (s *recSender) sentSoFar() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Command(nil), s.all...)
}

// With a NonBlockingSender the next command is sent before Ack returns, on the caller's
// goroutine: no goroutine, no hand-off.
func TestNonBlockingSenderSendsBeforeAckReturns(t *testing.T) {
	e := newEnvSender(t, Options{Journal: fastJournal()}, true)
	e.enqueue("m1", "d", "p1")
	e.enqueue("m2", "d", "p2")
	e.o.Heartbeat("d")
	if got := e.snd.sentSoFar(); len(got) != 1 || got[0].MessageID != "m1" {
		t.Fatalf("after Heartbeat returned: sent %+v", got)
	}
	e.o.Ack("d", "m1", 0, "")
	if got := e.snd.sentSoFar(); len(got) != 2 || got[1].MessageID != "m2" || got[1].Try != 1 {
		t.Fatalf("after Ack returned: sent %+v", got)
	}
	if st := e.status("d"); st.InFlight != "m2" || st.Queued != 0 {
		t.Fatalf("status: %+v", st)
	}
}

// A blocking Sender (the default) still gets a goroutine per send: Ack does not wait for it.
func TestBlockingSenderDoesNotHoldUpAck(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	release := make(chan struct{})
	entered := make(chan string, 4)
	e.o.sender = SenderFunc(func(_ context.Context, _ string, c Command) error {
		entered <- c.MessageID
		<-release
		return nil
	})
	e.enqueue("m1", "d", "p1")
	e.o.Heartbeat("d") // returns although the Send it started blocks
	select {
	case id := <-entered:
		if id != "m1" {
			t.Fatalf("sent %s", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no Send")
	}
	close(release)
}

// Inline sends that fail are handled on the same goroutine, one after another: with
// max_tries 1 and every send failing, the whole queue fails within the call that started
// it, without recursion.
func TestNonBlockingSendFailuresRunAsALoop(t *testing.T) {
	const n = 2000
	e := newEnvSender(t, Options{Journal: fastJournal(), Settings: Settings{MaxTries: 1, BreakerThreshold: n + 1}}, true)
	e.snd.fail = errors.New("link closed")
	failures := 0
	e.o.afterSendFailed = func() { failures++ } // same goroutine: no lock needed
	tasks := make([]Task, n)
	for i := range tasks {
		id := fmt.Sprintf("m%d", i)
		tasks[i] = Task{MessageID: id, DeviceID: "d", PersonID: id}
	}
	for i, err := range e.o.EnqueueBatch(tasks) {
		if err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
	}
	e.o.Heartbeat("d")
	if failures != n {
		t.Fatalf("%d send failures handled when Heartbeat returned, want %d", failures, n)
	}
	if st := e.status("d"); st.Failed != n || st.Queued != 0 || st.InFlight != "" {
		t.Fatalf("status: %+v", st)
	}
}

// Close waits for inline sends in progress, as for goroutine sends.
func TestCloseWaitsForNonBlockingSends(t *testing.T) {
	e := newEnvSender(t, Options{Journal: fastJournal()}, true)
	e.enqueue("m1", "d", "p1")
	release := make(chan struct{})
	entered := make(chan struct{})
	// Still a NonBlockingSender for the outbox (decided at Open), but this one holds.
	e.o.sender = SenderFunc(func(context.Context, string, Command) error {
		close(entered)
		<-release
		return nil
	})
	go e.o.Heartbeat("d")
	<-entered
	closed := make(chan struct{})
	go func() { e.o.Close(); close(closed) }()
	select { // a negative check: give a wrong Close a moment to return early
	case <-closed:
		t.Fatal("Close returned while a Send was in progress")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
}
