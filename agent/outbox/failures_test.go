package outbox

// Failures lists the failed commands held, newest first and bounded; DeviceStatus says
// when an online device goes offline.

import (
	"testing"
	"time"
)

func TestFailuresNewestFirstAndBounded(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{HeartbeatTimeout: time.Hour}})
	if list, held := e.o.Failures(10); list != nil || held != 0 {
		t.Fatalf("no failures yet: %v %d", list, held)
	}
	e.o.Heartbeat("d")
	for i, p := range []string{"1", "2", "3"} {
		id := "add-" + p
		e.enqueueTask(personTask(id, "d", "AddPerson", p))
		e.expectSend(id, 1)
		e.o.Ack("d", id, 7+i, "photo too small")
	}
	list, held := e.o.Failures(2)
	if held != 3 || len(list) != 2 {
		t.Fatalf("Failures(2) = %d listed, %d held; want 2, 3", len(list), held)
	}
	if list[0].MessageID != "add-3" || list[1].MessageID != "add-2" {
		t.Fatalf("want the newest first: %+v", list)
	}
	if list[0].Err != "refused by the device: code 9: photo too small" || list[0].DeviceID != "d" || list[0].TaskID != "t-add-3" {
		t.Fatalf("failure = %+v", list[0])
	}
	e.expectRetried("d", 3)
	if list, held := e.o.Failures(10); len(list) != 0 || held != 0 {
		t.Fatalf("after RetryFailed: %v %d", list, held)
	}
}

func TestDeviceStatusOnlineUntil(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{HeartbeatTimeout: time.Minute}})
	e.o.LinkUp("d")
	if st := e.status("d"); !st.OnlineUntil.IsZero() {
		t.Fatalf("offline: OnlineUntil must be zero: %+v", st)
	}
	e.o.Heartbeat("d")
	st := e.status("d")
	if !st.Online || !st.OnlineUntil.Equal(st.LastSeen.Add(time.Minute)) {
		t.Fatalf("online: OnlineUntil = %v, want last seen %v + 1m", st.OnlineUntil, st.LastSeen)
	}
	e.o.LinkDown("d")
	if st := e.status("d"); st.Online || !st.OnlineUntil.IsZero() {
		t.Fatalf("link down: %+v", st)
	}
}
