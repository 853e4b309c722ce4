package outbox

import (
	"errors"
	"testing"
)

func (e *env) enqueueSilent(id, dev, person string) {
	e.t.Helper()
	if err := e.o.Enqueue(Task{MessageID: id, DeviceID: dev, Op: "AddPerson", PersonID: person,
		Payload: []byte(`{"id":"` + person + `"}`), NoResult: true}); err != nil {
		e.t.Fatalf("Enqueue %s: %v", id, err)
	}
}

func resultIDs(res []Result) []string {
	var ids []string
	for _, r := range res {
		ids = append(ids, r.MessageID+":"+r.Status.String())
	}
	return ids
}

// A command without a result is delivered like a task's, one at a time in intake order,
// and leaves no result, succeeded or refused; its id stays a duplicate.
func TestNoResultCommandReportsNothing(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	e.enqueueSilent("c1", "d", "p1")
	e.enqueue("t1", "d", "p2")
	e.enqueueSilent("c2", "d", "p3")
	e.o.Heartbeat("d")
	e.expectSend("c1", 1)
	e.o.Ack("d", "c1", 0, "")
	e.expectSend("t1", 1)
	e.o.Ack("d", "t1", 0, "")
	e.expectSend("c2", 1)
	e.o.Ack("d", "c2", 17, "refused")
	if got := resultIDs(e.results()); len(got) != 1 || got[0] != "t1:succeeded" {
		t.Fatalf("results %v, want t1's only", got)
	}
	if st := e.status("d"); st.Succeeded != 2 || st.Failed != 1 || st.FailedHeld != 0 || st.Queued != 0 || st.InFlight != "" {
		t.Fatalf("status %+v", st)
	}
	if s := e.o.Stats(); s.Queued != 0 || s.Unreported != 1 {
		t.Fatalf("stats %+v", s)
	}
	if err := e.o.Enqueue(Task{MessageID: "c1", DeviceID: "d", NoResult: true}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("c1 again: %v", err)
	}
}

// NoResult is journalled with the task: after a restart, from the log or from a
// snapshot, the command still reports nothing.
func TestNoResultSurvivesRestarts(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	e.enqueueSilent("c1", "d", "p1")
	e.enqueueSilent("c2", "d", "p2")
	e.restart() // replays the log
	e.o.Heartbeat("d")
	e.expectSend("c1", 1)
	if err := e.o.compact(); err != nil {
		t.Fatal(err)
	}
	e.restart() // replays the snapshot: c1 was in flight, sent again
	if r := e.o.Recovery(); r.Snapshot == "" {
		t.Fatalf("no snapshot replayed: %+v", r)
	}
	e.o.Heartbeat("d")
	e.expectSend("c1", 2)
	e.o.Ack("d", "c1", 0, "")
	e.expectSend("c2", 1)
	e.o.Ack("d", "c2", 0, "")
	if got := e.results(); len(got) != 0 {
		t.Fatalf("results %v, want none", resultIDs(got))
	}
	e.restart()
	if s := e.o.Stats(); s.Queued != 0 || s.Unreported != 0 {
		t.Fatalf("after a restart: %+v", s)
	}
}

// A command without a result never supersedes an unsent one with a result (the back
// office would get "superseded" by an id it never sent); a later command supersedes it,
// silently.
func TestNoResultCoalescing(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	e.enqueue("t1", "d", "p")
	e.enqueueSilent("c1", "d", "p") // t1 stays
	e.enqueueSilent("c2", "d", "p") // supersedes c1: no result
	e.enqueue("t2", "d", "p")       // supersedes c2: no result
	e.o.Heartbeat("d")
	e.expectSend("t1", 1)
	e.o.Ack("d", "t1", 0, "")
	e.expectSend("t2", 1)
	e.o.Ack("d", "t2", 0, "")
	got := resultIDs(e.results())
	if len(got) != 2 || got[0] != "t1:succeeded" || got[1] != "t2:succeeded" {
		t.Fatalf("results %v", got)
	}
	if st := e.status("d"); st.Superseded != 2 || st.Queued != 0 {
		t.Fatalf("status %+v", st)
	}
}
