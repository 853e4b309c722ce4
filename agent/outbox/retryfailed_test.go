package outbox

// RetryFailed brings back only commands that are still their person's latest intent, and
// the retention purge of failures keeps its deadlines across retries.

import (
	"testing"
	"time"
)

// personTask is a whitelist command for person on dev.
func personTask(id, dev, op, person string) Task {
	return Task{MessageID: id, TaskID: "t-" + id, DeviceID: dev, Op: op, PersonID: person, Payload: []byte(person)}
}

func (e *env) enqueueTask(task Task) {
	e.t.Helper()
	if err := e.o.Enqueue(task); err != nil {
		e.t.Fatalf("Enqueue %s: %v", task.MessageID, err)
	}
}

// report marks every waiting result reported, as the agent's reporter does.
func (e *env) reportAll() {
	e.t.Helper()
	var ids []string
	for _, r := range e.results() {
		ids = append(ids, r.MessageID)
	}
	if err := e.o.MarkReported(ids...); err != nil {
		e.t.Fatal(err)
	}
}

// expectRetried calls RetryFailed(dev) and checks how many it brought back.
func (e *env) expectRetried(dev string, want int) {
	e.t.Helper()
	if n, err := e.o.RetryFailed(dev); err != nil || n != want {
		e.t.Fatalf("RetryFailed(%q) = %d, %v; want %d", dev, n, err, want)
	}
}

// expectNoRetryAcrossRestarts checks that RetryFailed(dev) brings nothing back: live,
// after a restart that replays the log, and after one that starts from a snapshot (which
// does not hold the add that outdated the failure).
func (e *env) expectNoRetryAcrossRestarts(dev string) {
	e.t.Helper()
	e.expectRetried(dev, 0)
	e.restart()
	e.expectRetried(dev, 0)
	if err := e.o.compact(); err != nil {
		e.t.Fatal(err)
	}
	e.restart()
	if e.o.Recovery().Snapshot == "" {
		e.t.Fatal("no snapshot replayed")
	}
	e.expectRetried(dev, 0)
}

// The colleague's probe: AddPerson fails and is reported, DeletePerson succeeds and is
// reported (it leaves the table). Retrying the AddPerson would put the person back on the
// terminal's whitelist although the latest intent was to delete them.
func TestRetryFailedKeepsALaterFinishedCommand(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{HeartbeatTimeout: time.Hour}})
	e.o.Heartbeat("d")
	e.enqueueTask(personTask("add", "d", "AddPerson", "951"))
	e.expectSend("add", 1)
	e.o.Ack("d", "add", 7, "photo too small")
	e.reportAll()
	e.enqueueTask(personTask("del", "d", "DeletePerson", "951"))
	e.expectSend("del", 1)
	e.o.Ack("d", "del", 0, "")
	e.reportAll()

	e.expectNoRetryAcrossRestarts("d")
	e.expectRetried("", 0)
	e.o.Heartbeat("d")
	if st := e.status("d"); st.InFlight != "" || st.Queued != 0 || st.FailedHeld != 1 {
		t.Fatalf("the outdated AddPerson must stay failed and held, nothing sent: %+v", st)
	}
	if res := e.results(); len(res) != 0 {
		t.Fatalf("the outdated AddPerson was reported again: %+v", res)
	}
}

// The same with the later command in flight when RetryFailed comes.
func TestRetryFailedKeepsALaterCommandInFlight(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{HeartbeatTimeout: time.Hour}})
	e.o.Heartbeat("d")
	e.enqueueTask(personTask("add", "d", "AddPerson", "951"))
	e.expectSend("add", 1)
	e.o.Ack("d", "add", 7, "photo too small")
	e.reportAll()
	e.enqueueTask(personTask("del", "d", "DeletePerson", "951"))
	e.expectSend("del", 1)

	e.expectRetried("d", 0)
	if st := e.status("d"); st.InFlight != "del" || st.Queued != 0 {
		t.Fatalf("want del alone in flight: %+v", st)
	}
	e.o.Ack("d", "del", 0, "")
	if st := e.status("d"); st.InFlight != "" || st.Queued != 0 {
		t.Fatalf("the AddPerson came back after the DeletePerson: %+v", st)
	}
	e.expectNoRetryAcrossRestarts("d")
}

// When the later command failed too, it is the one retried, and only on its device: a
// command for the same person on another device is another terminal's latest intent.
func TestRetryFailedRetriesOnlyTheLatestIntent(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{HeartbeatTimeout: time.Hour}})
	e.o.Heartbeat("d")
	e.o.Heartbeat("other")
	e.enqueueTask(personTask("add", "d", "AddPerson", "951"))
	e.expectSend("add", 1)
	e.o.Ack("d", "add", 7, "busy")
	e.enqueueTask(personTask("del", "d", "DeletePerson", "951"))
	e.expectSend("del", 1)
	e.o.Ack("d", "del", 7, "busy")
	e.enqueueTask(personTask("elsewhere", "other", "AddPerson", "951"))
	e.expectSend("elsewhere", 1)
	e.o.Ack("other", "elsewhere", 7, "busy")
	e.reportAll()
	e.restart() // the marks survive a replay of the log
	e.o.Heartbeat("d")

	e.expectRetried("d", 1)
	e.expectSend("del", 1)
	e.o.Ack("d", "del", 0, "")
	if st := e.status("d"); st.InFlight != "" || st.Queued != 0 || st.FailedHeld != 1 {
		t.Fatalf("want only the outdated AddPerson held: %+v", st)
	}
	e.o.Heartbeat("other")
	e.expectRetried("", 1)
	e.expectSend("elsewhere", 1)
}

// A later command can leave the table before an earlier one fails: here the earlier one
// waits for its retry when the later one is acked (early: the terminal answered before its
// turn) and reported. The earlier one's failure must still count as outdated.
func TestRetryFailedKeepsALaterCommandThatLeftFirst(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{RetryInterval: time.Second, MaxTries: 2,
		HeartbeatTimeout: time.Hour}})
	e.o.Heartbeat("d")
	e.enqueueTask(personTask("add", "d", "AddPerson", "951"))
	e.expectSend("add", 1)
	e.clock.Advance(time.Second) // no ack: add waits for its second try
	e.enqueueTask(personTask("del", "d", "DeletePerson", "951"))
	e.o.Ack("d", "del", 0, "")
	e.reportAll()
	e.clock.Advance(time.Second) // the backoff is at most the retry interval
	e.expectSend("add", 2)
	e.clock.Advance(time.Second) // no ack again: add fails
	if st := e.status("d"); st.FailedHeld != 1 || st.InFlight != "" {
		t.Fatalf("add should have failed: %+v", st)
	}
	e.reportAll()
	e.expectNoRetryAcrossRestarts("d")
}

// A failure is purged FailedRetention after it failed, also when another one was retried
// and failed again in between: the retried one's old place in the retention order must not
// hold back the purge of older failures behind it. y keeps x's old entry from being dropped
// as stale at the head of the order.
func TestRetentionPurgeOnTimeAfterARetry(t *testing.T) {
	const retention = 3 * time.Second
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{RetryInterval: 10 * time.Second,
		HeartbeatTimeout: time.Hour, FailedRetention: retention}})
	start := e.clock.Now()
	e.o.Heartbeat("dx")
	e.o.Heartbeat("dy")
	e.o.Heartbeat("dz")
	e.enqueueTask(personTask("y", "dy", "AddPerson", "py"))
	e.expectSend("y", 1)
	e.enqueueTask(personTask("x", "dx", "AddPerson", "px"))
	e.expectSend("x", 1)
	e.enqueueTask(personTask("z", "dz", "AddPerson", "pz"))
	e.expectSend("z", 1)
	e.o.Ack("dy", "y", 7, "busy")
	e.o.Ack("dx", "x", 7, "busy")
	e.o.Ack("dz", "z", 7, "busy")
	e.reportAll() // y, x, then z: all failed at 0 s
	e.expectRetried("dx", 1)
	e.expectSend("x", 1)
	e.clock.Advance(1500 * time.Millisecond)
	e.o.Ack("dx", "x", 7, "still busy") // x fails again at 1.5 s
	e.reportAll()

	held := func(dev string) int { return e.status(dev).FailedHeld }
	e.clock.Advance(retention - 1500*time.Millisecond - time.Millisecond)
	if held("dy") != 1 || held("dz") != 1 || held("dx") != 1 {
		t.Fatalf("purged before its time at %v: dx %d, dy %d, dz %d", e.clock.Now().Sub(start), held("dx"), held("dy"), held("dz"))
	}
	e.clock.Advance(time.Millisecond) // 3 s: y's and z's retention is over
	if held("dy") != 0 || held("dz") != 0 || held("dx") != 1 {
		t.Fatalf("at %v (y and z failed at 0 s, x at 1.5 s, retention 3 s): dx holds %d, dy %d, dz %d; want y and z purged, x held",
			e.clock.Now().Sub(start), held("dx"), held("dy"), held("dz"))
	}
	e.clock.Advance(1500*time.Millisecond - time.Millisecond)
	if held("dx") != 1 {
		t.Fatalf("x purged before 4.5 s, at %v", e.clock.Now().Sub(start))
	}
	e.clock.Advance(time.Millisecond) // 4.5 s
	if held("dx") != 0 {
		t.Fatalf("x still held at %v", e.clock.Now().Sub(start))
	}
	e.o.mu.Lock()
	n := len(e.o.retained)
	e.o.mu.Unlock()
	if n != 0 || e.clock.armed() != 0 {
		t.Fatalf("after both purges: %d retention entries, %d timers armed", n, e.clock.armed())
	}
	// x's id is remembered as finished: its redelivery is a duplicate, not a new command.
	if err := e.o.Enqueue(personTask("x", "dx", "AddPerson", "px")); err == nil {
		t.Fatal("x was purged without being remembered")
	}
}
