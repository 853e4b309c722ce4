package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

func fastJournal() journal.Options { return journal.Options{Sync: journal.SyncNone} }

func TestDispatchOneAtATimeNextOnAck(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	e.enqueue("m1", "d1", "p1")
	e.enqueue("m2", "d1", "p2")
	e.enqueue("m3", "d1", "p3")
	if st := e.status("d1"); st.Online || st.InFlight != "" || st.Queued != 3 {
		t.Fatalf("before the first heartbeat: %+v", st)
	}
	if n := e.clock.armed(); n != 0 {
		t.Fatalf("%d timers armed for an offline device", n)
	}
	e.o.Heartbeat("d1")
	e.expectSend("m1", 1)
	if st := e.status("d1"); st.InFlight != "m1" || st.InFlightTries != 1 || st.Queued != 2 {
		t.Fatalf("after heartbeat: %+v", st)
	}
	e.clock.Advance(10 * time.Millisecond)
	e.o.Ack("d1", "m1", 0, "")
	e.expectSend("m2", 1)      // at once, not on a poll
	e.o.Ack("d1", "m1", 0, "") // a second ack for the same id is ignored
	if st := e.status("d1"); st.InFlight != "m2" || st.Succeeded != 1 {
		t.Fatalf("after duplicate ack: %+v", st)
	}
	e.o.Ack("d1", "m2", 0, "")
	e.expectSend("m3", 1)
	e.o.Ack("d1", "m3", 0, "")
	res := e.results()
	if len(res) != 3 || res[0].MessageID != "m1" || res[0].Status != Succeeded || res[0].Tries != 1 ||
		res[0].Duration() != 10*time.Millisecond || res[0].TaskID != "t-m1" {
		t.Fatalf("results: %+v", res)
	}
	if n := e.clock.armed(); n != 0 {
		t.Fatalf("idle outbox has %d timers armed", n)
	}
	if err := e.o.MarkReported("m1", "m2", "m3"); err != nil {
		t.Fatal(err)
	}
	if s := e.o.Stats(); s.Queued != 0 || s.Unreported != 0 {
		t.Fatalf("stats after reporting: %+v", s)
	}
}

func TestDevicesAreIndependent(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	e.enqueue("a1", "A", "p")
	e.enqueue("b1", "B", "p")
	e.enqueue("a2", "A", "q")
	e.o.Heartbeat("A")
	e.expectSend("a1", 1)
	e.o.Heartbeat("B")
	e.expectSend("b1", 1)
	if a, b := e.status("A"), e.status("B"); a.InFlight != "a1" || b.InFlight != "b1" {
		t.Fatalf("A %+v B %+v", a, b)
	}
}

func TestAckTimeoutBackoffThenFailedAndPurged(t *testing.T) {
	s := Settings{RetryInterval: time.Second, MaxTries: 3, MaxBackoff: 10 * time.Second, HeartbeatTimeout: time.Hour, FailedRetention: time.Hour}
	e := newEnv(t, Options{Journal: fastJournal(), Settings: s})
	e.enqueue("m1", "d", "p")
	e.o.Heartbeat("d")
	e.expectSend("m1", 1)
	e.clock.Advance(time.Second) // ack timeout
	st := e.status("d")
	if st.InFlight != "" || st.Queued != 1 {
		t.Fatalf("after timeout: %+v", st)
	}
	// Backoff after try 1 is between RetryInterval/2 and RetryInterval.
	e.clock.Advance(time.Second)
	e.expectSend("m1", 2)
	e.clock.Advance(time.Second)
	e.clock.Advance(2 * time.Second) // backoff after try 2: 1s..2s
	e.expectSend("m1", 3)
	e.clock.Advance(time.Second)
	res := e.results()
	if len(res) != 1 || res[0].Status != Failed || res[0].Tries != 3 || !strings.Contains(res[0].Err, "after 3 tries") {
		t.Fatalf("results: %+v", res)
	}
	if st := e.status("d"); st.FailedHeld != 1 || st.Failed != 1 || st.Retries != 2 || st.Sent != 3 {
		t.Fatalf("status: %+v", st)
	}
	if n := e.clock.armed(); n != 0 {
		t.Fatalf("unreported failure should arm nothing, %d armed", n)
	}
	e.o.MarkReported("m1")
	if n := e.clock.armed(); n != 1 {
		t.Fatalf("retention timer: %d armed", n)
	}
	e.clock.Advance(time.Hour)
	if st := e.status("d"); st.FailedHeld != 0 {
		t.Fatalf("failed command not purged after retention: %+v", st)
	}
	if n := e.clock.armed(); n != 0 {
		t.Fatalf("%d timers armed after purge", n)
	}
	e.restart()
	if st := e.status("d"); st.FailedHeld != 0 || st.Queued != 0 {
		t.Fatalf("after restart: %+v", st)
	}
}

func TestRefusalFailsAtOnce(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	e.enqueue("m1", "d", "p")
	e.enqueue("m2", "d", "q")
	e.o.Heartbeat("d")
	e.expectSend("m1", 1)
	e.o.Ack("d", "m1", 7, "person photo missing")
	e.expectSend("m2", 1)
	res := e.results()
	if len(res) != 1 || res[0].Status != Failed || res[0].Tries != 1 || !strings.Contains(res[0].Err, "code 7: person photo missing") {
		t.Fatalf("results: %+v", res)
	}
}

func TestOfflineDeviceSpendsNoTries(t *testing.T) {
	s := Settings{RetryInterval: 2 * time.Second, HeartbeatTimeout: time.Second, MaxTries: 2}
	e := newEnv(t, Options{Journal: fastJournal(), Settings: s})
	e.enqueue("m1", "d", "p")
	e.o.Heartbeat("d")
	e.expectSend("m1", 1)
	for range 5 {
		// Silent longer than the heartbeat timeout: at the ack deadline the device is offline,
		// the command waits at the head of the queue with its try refunded.
		e.clock.Advance(2 * time.Second)
		if st := e.status("d"); st.Online || st.InFlight != "" || st.Queued != 1 {
			t.Fatalf("offline device: %+v", st)
		}
		if n := e.clock.armed(); n != 0 {
			t.Fatalf("offline device keeps %d timers", n)
		}
		e.o.Heartbeat("d")
		e.expectSend("m1", 1)
	}
	e.o.Ack("d", "m1", 0, "")
	if r := e.results(); len(r) != 1 || r[0].Status != Succeeded || r[0].Tries != 1 {
		t.Fatalf("results: %+v", r)
	}
}

func TestLinkDownRequeuesAndNoHeartbeatDevices(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Devices: map[string]DeviceConfig{"serial": {NoHeartbeat: true}}})
	e.enqueue("m1", "serial", "p")
	e.expectSend("m1", 1) // no heartbeat needed
	e.o.LinkDown("serial")
	if st := e.status("serial"); st.Online || st.InFlight != "" || st.Queued != 1 {
		t.Fatalf("after link down: %+v", st)
	}
	e.o.LinkUp("serial")
	e.expectSend("m1", 1)
	// Live device config: a heartbeat device with gating switched off.
	e.enqueue("h1", "hb", "p")
	if st := e.status("hb"); st.InFlight != "" {
		t.Fatalf("gated device sent to: %+v", st)
	}
	e.o.SetDevice("hb", DeviceConfig{NoHeartbeat: true})
	e.expectSend("h1", 1)
}

func TestDedupeAndBounds(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), MaxQueuedPerDevice: 2, MaxQueued: 3})
	e.enqueue("m1", "d", "a")
	if err := e.o.Enqueue(Task{MessageID: "m1", DeviceID: "d"}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("duplicate: %v", err)
	}
	e.enqueue("m2", "d", "b")
	if err := e.o.Enqueue(Task{MessageID: "m3", DeviceID: "d"}); !errors.Is(err, ErrDeviceFull) || !strings.Contains(err.Error(), "max_queued_per_device 2") {
		t.Fatalf("device bound: %v", err)
	}
	e.enqueue("m3", "e", "a")
	if err := e.o.Enqueue(Task{MessageID: "m4", DeviceID: "f"}); !errors.Is(err, ErrFull) {
		t.Fatalf("total bound: %v", err)
	}
	if err := e.o.Enqueue(Task{MessageID: "", DeviceID: "f"}); !errors.Is(err, ErrInvalidTask) {
		t.Fatalf("invalid: %v", err)
	}
	errs := e.o.EnqueueBatch([]Task{{MessageID: "m1", DeviceID: "d"}, {MessageID: "x", DeviceID: "x"}})
	if !errors.Is(errs[0], ErrDuplicate) || !errors.Is(errs[1], ErrFull) {
		t.Fatalf("batch: %v", errs)
	}
}

func TestBreakerIsolatesAFailingDevice(t *testing.T) {
	s := Settings{RetryInterval: time.Second, MaxTries: 100, BreakerThreshold: 2, BreakerCooldown: time.Minute, HeartbeatTimeout: time.Hour, MaxBackoff: time.Second}
	e := newEnv(t, Options{Journal: fastJournal(), Settings: s})
	e.o.Heartbeat("bad")
	e.o.Heartbeat("good")
	e.enqueue("x", "bad", "p")
	e.expectSend("x", 1)
	e.clock.Advance(time.Second)
	e.clock.Advance(time.Second)
	e.expectSend("x", 2)
	e.clock.Advance(time.Second) // second unacked try: breaker opens
	st := e.status("bad")
	if st.BreakerOpenUntil.IsZero() || st.InFlight != "" {
		t.Fatalf("breaker: %+v", st)
	}
	for i := range 20 { // the good device is not slowed
		id := fmt.Sprintf("g%d", i)
		e.enqueue(id, "good", id)
		e.expectSend(id, 1)
		e.o.Ack("good", id, 0, "")
	}
	e.o.Heartbeat("bad")
	e.clock.Advance(30 * time.Second)
	if st := e.status("bad"); st.InFlight != "" {
		t.Fatalf("sent during the breaker period: %+v", st)
	}
	e.o.Heartbeat("bad")
	e.clock.Advance(31 * time.Second)
	e.expectSend("x", 3)
	e.o.Ack("bad", "x", 0, "")
	if st := e.status("bad"); !st.BreakerOpenUntil.IsZero() || st.Succeeded != 1 {
		t.Fatalf("after success: %+v", st)
	}
}

func TestSetSettingsLive(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{RetryInterval: time.Second, MaxTries: 5, HeartbeatTimeout: time.Hour}})
	e.o.Heartbeat("d")
	e.enqueue("m1", "d", "p")
	e.expectSend("m1", 1)
	e.o.SetSettings(Settings{RetryInterval: time.Second, MaxTries: 1, HeartbeatTimeout: time.Hour})
	if s := e.o.Settings(); s.MaxTries != 1 || s.MaxBackoff != time.Minute {
		t.Fatalf("settings: %+v", s)
	}
	e.clock.Advance(time.Second)
	if r := e.results(); len(r) != 1 || r[0].Status != Failed {
		t.Fatalf("max_tries 1 not applied: %+v", r)
	}
}

func TestLateAckAfterTimeoutSucceeds(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{RetryInterval: time.Second, HeartbeatTimeout: time.Hour}})
	e.o.Heartbeat("d")
	e.enqueue("m1", "d", "p")
	e.expectSend("m1", 1)
	e.clock.Advance(time.Second)
	e.o.Ack("d", "m1", 0, "")
	if r := e.results(); len(r) != 1 || r[0].Status != Succeeded {
		t.Fatalf("late ack: %+v", r)
	}
	if n := e.clock.armed(); n != 0 {
		t.Fatalf("%d timers after late ack", n)
	}
}

func TestSendErrorCountsATry(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{RetryInterval: time.Second, MaxTries: 2, HeartbeatTimeout: time.Hour}})
	e.snd.fail = errors.New("broker unreachable")
	handled := make(chan struct{}, 1)
	e.o.afterSendFailed = func() { handled <- struct{}{} }
	e.o.Heartbeat("d")
	e.enqueue("m1", "d", "p")
	e.expectSend("m1", 1)
	select {
	case <-handled:
	case <-time.After(5 * time.Second):
		t.Fatal("send error not handled")
	}
	if st := e.status("d"); st.InFlight != "" || st.Queued != 1 {
		t.Fatalf("after send error: %+v", st)
	}
	e.clock.Advance(time.Second)
	e.expectSend("m1", 2)
}

func TestExpiredBeforeSend(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	err := e.o.Enqueue(Task{MessageID: "m1", DeviceID: "d", PersonID: "p", ExpiresAt: e.clock.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	e.enqueue("m2", "d", "q")
	e.clock.Advance(2 * time.Minute)
	e.o.Heartbeat("d")
	e.expectSend("m2", 1)
	if r := e.results(); len(r) != 1 || r[0].Status != Expired {
		t.Fatalf("results: %+v", r)
	}
}

// A Send that blocks (a serial write to a wedged terminal) is bounded by the ack timeout:
// it returns, the try is counted, and the command is retried; no Send runs forever.
func TestSendIsBoundedByTheAckTimeout(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{RetryInterval: 50 * time.Millisecond, MaxTries: 3, HeartbeatTimeout: time.Hour}})
	type call struct {
		deadline    time.Time
		hasDeadline bool
		err         error
	}
	calls := make(chan call, 1)
	e.o.sender = SenderFunc(func(ctx context.Context, _ string, _ Command) error {
		dl, ok := ctx.Deadline()
		<-ctx.Done() // a wedged transport: returns only when told to
		calls <- call{dl, ok, ctx.Err()}
		return ctx.Err()
	})
	handled := make(chan struct{}, 1)
	e.o.afterSendFailed = func() { handled <- struct{}{} }
	start := time.Now()
	e.o.Heartbeat("d")
	e.enqueue("m1", "d", "p")
	var c call
	select {
	case c = <-calls:
	case <-time.After(5 * time.Second):
		t.Fatal("a blocked Send was never cancelled: it has no deadline")
	}
	if !c.hasDeadline || c.deadline.Sub(start) > time.Second || !errors.Is(c.err, context.DeadlineExceeded) {
		t.Fatalf("Send's context: deadline %v (set %v), err %v", c.deadline.Sub(start), c.hasDeadline, c.err)
	}
	select {
	case <-handled:
	case <-time.After(5 * time.Second):
		t.Fatal("the timed-out Send was not handled")
	}
	if st := e.status("d"); st.InFlight != "" || st.Queued != 1 || st.Sent != 1 {
		t.Fatalf("after the timed-out Send: %+v", st)
	}
}
