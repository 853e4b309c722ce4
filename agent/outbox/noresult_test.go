package outbox

import (
	"errors"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
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

// A command without a result is delivered like a task's, one at a time (after the tasks
// with a result: TestNoResultYieldsToTasks), and leaves no result, succeeded or refused;
// its id stays a duplicate.
func TestNoResultCommandReportsNothing(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	e.enqueueSilent("c1", "d", "p1")
	e.enqueue("t1", "d", "p2")
	e.enqueueSilent("c2", "d", "p3")
	e.o.Heartbeat("d")
	e.expectSend("t1", 1)
	e.o.Ack("d", "t1", 0, "")
	e.expectSend("c1", 1)
	e.o.Ack("d", "c1", 0, "")
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

// NoResultDone gets each command without a result's outcome once, with the ack when one
// decided it: succeeded, refused (ErrRefused), out of tries (ErrNoAnswer), superseded
// (ErrSuperseded). Tasks with a result never reach it. DeviceStatus.NoResult counts the
// unfinished ones among Queued and InFlight.
func TestNoResultDoneOutcomes(t *testing.T) {
	a := newAnswers()
	opts := Options{Journal: fastJournal(), Settings: Settings{MaxTries: 2, RetryInterval: time.Second}}
	opts.NoResultDone = func(dev, id string, ack face.Ack, err error) {
		if dev != "d" {
			t.Errorf("NoResultDone for device %q", dev)
		}
		a.done(id)(ack, err)
	}
	e := newEnvSender(t, opts, true)
	e.enqueueSilent("c1", "d", "p1")
	e.enqueue("t1", "d", "p2")
	e.enqueueSilent("c2", "d", "p3")
	e.enqueueSilent("c3", "d", "p4")
	if st := e.status("d"); st.NoResult != 3 || st.Queued != 4 {
		t.Fatalf("status %+v: want 3 of 4 queued without a result", st)
	}
	e.o.Heartbeat("d")
	e.expectSend("t1", 1) // before the commands without a result
	e.o.Ack("d", "t1", 0, "")
	e.expectSend("c1", 1)
	if st := e.status("d"); st.NoResult != 3 || st.Queued != 2 || st.InFlight != "c1" {
		t.Fatalf("status %+v: want c1 in flight, 3 without a result", st)
	}
	e.o.AckMessage("d", face.Ack{MessageID: "c1", Code: 0, Message: "ok"})
	if x := a.wait(t, "c1"); x.err != nil || x.ack.MessageID != "c1" || x.ack.Message != "ok" {
		t.Fatalf("c1: %+v", x)
	}
	e.expectSend("c2", 1)
	e.o.Ack("d", "c2", 17, "no room") // Ack, not AckMessage: the ack is built from its parts
	if x := a.wait(t, "c2"); !errors.Is(x.err, ErrRefused) || x.ack.Code != 17 || x.ack.Message != "no room" {
		t.Fatalf("c2: %+v", x)
	}
	e.expectSend("c3", 1)
	// No ack: the second and last try, after the ack timeout and a backoff.
	if c := e.advanceUntilSent(time.Minute); c.MessageID != "c3" || c.Try != 2 {
		t.Fatalf("sent %s try %d, want c3 try 2", c.MessageID, c.Try)
	}
	e.clock.Advance(2 * time.Minute)
	if x := a.wait(t, "c3"); !errors.Is(x.err, ErrNoAnswer) || x.ack.Code != 0 || x.ack.MessageID != "" {
		t.Fatalf("c3: %+v", x)
	}
	if _, ok := a.get("t1"); ok {
		t.Fatal("a task with a result reached NoResultDone")
	}
	if st := e.status("d"); st.NoResult != 0 || st.Queued != 0 || st.InFlight != "" {
		t.Fatalf("status %+v: all finished", st)
	}
	// A later command for the person supersedes an unsent one without a result.
	e.o.Pause("d")
	e.enqueueSilent("c4", "d", "p5")
	e.enqueueSilent("c5", "d", "p5")
	if x := a.wait(t, "c4"); !errors.Is(x.err, ErrSuperseded) {
		t.Fatalf("c4: %+v", x)
	}
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		if x, _ := a.get(id); x.n != 1 {
			t.Fatalf("%s: NoResultDone called %d times", id, x.n)
		}
	}
}

// Tasks with a result go before commands without one that were never sent, whenever they
// were taken in: a whitelist sync keeps a few corrections queued so that the next goes
// out straight from an ack, and a back office task waits behind the command in flight
// only. A correction that was sent keeps its turn (its ack may still come); corrections
// keep their order among themselves, and tasks theirs.
func TestNoResultYieldsToTasks(t *testing.T) {
	e := newEnvSender(t, Options{Journal: fastJournal(), Settings: Settings{MaxTries: 3, RetryInterval: time.Second}}, true)
	e.enqueueSilent("c1", "d", "p1")
	e.enqueueSilent("c2", "d", "p2")
	e.enqueueSilent("c3", "d", "p3")
	e.o.Heartbeat("d")
	e.expectSend("c1", 1)
	e.enqueue("t1", "d", "q1") // taken in while c1 is in flight, c2 and c3 queued
	e.enqueue("t2", "d", "q2")
	e.o.Ack("d", "c1", 0, "")
	e.expectSend("t1", 1)
	e.o.Ack("d", "t1", 0, "")
	e.expectSend("t2", 1)
	e.o.Ack("d", "t2", 0, "")
	e.expectSend("c2", 1)
	// c2 goes unacked: it keeps its turn before a task taken in meanwhile.
	e.enqueue("t3", "d", "q3")
	if c := e.advanceUntilSent(time.Minute); c.MessageID != "c2" || c.Try != 2 {
		t.Fatalf("sent %s try %d, want c2 try 2", c.MessageID, c.Try)
	}
	e.o.Ack("d", "c2", 0, "")
	e.expectSend("t3", 1)
	e.o.Ack("d", "t3", 0, "")
	e.expectSend("c3", 1)
	e.o.Ack("d", "c3", 0, "")
	if got := resultIDs(e.results()); len(got) != 3 {
		t.Fatalf("results %v, want t1, t2, t3", got)
	}
}

// A task that went unacked waits for its retry behind corrections never sent (it keeps
// its turn, and they yield to it): the outbox's timer is armed for that retry, not for the
// corrections at the head of the queue, so it is sent again without any other event.
func TestNoResultTaskRetriedBehindCorrections(t *testing.T) {
	e := newEnvSender(t, Options{Journal: fastJournal(), Settings: Settings{MaxTries: 3, RetryInterval: time.Second,
		HeartbeatTimeout: time.Hour}}, true)
	e.enqueueSilent("c1", "d", "p1")
	e.enqueueSilent("c2", "d", "p2")
	e.o.Heartbeat("d")
	e.expectSend("c1", 1)
	e.enqueue("t1", "d", "q1")
	e.o.Ack("d", "c1", 0, "")
	e.expectSend("t1", 1)
	if c := e.advanceUntilSent(time.Minute); c.MessageID != "t1" || c.Try != 2 {
		t.Fatalf("sent %s try %d, want t1 try 2", c.MessageID, c.Try)
	}
	e.o.Ack("d", "t1", 0, "")
	e.expectSend("c2", 1)
}
