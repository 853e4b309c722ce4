package outbox

// Coalescing: a later task for the same person supersedes a command never sent.

import (
	"fmt"
	"testing"
	"time"
	"unsafe"
)

func TestCoalescingNeverTouchesInFlight(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	e.o.Heartbeat("d")
	e.enqueue("m1", "d", "951")
	e.expectSend("m1", 1)
	e.enqueue("m2", "d", "951")
	e.enqueue("m3", "d", "952")
	e.enqueue("m4", "d", "951")
	if st := e.status("d"); st.InFlight != "m1" || st.Queued != 2 || st.Superseded != 1 {
		t.Fatalf("status: %+v", st)
	}
	e.o.Ack("d", "m1", 0, "")
	e.expectSend("m3", 1)
	e.o.Ack("d", "m3", 0, "")
	e.expectSend("m4", 1)
	res := e.results()
	got := ""
	for _, r := range res {
		got += fmt.Sprintf("%s:%s ", r.MessageID, r.Status)
	}
	if got != "m2:superseded m1:succeeded m3:succeeded " {
		t.Fatalf("results: %s", got)
	}
}

// A command that was sent and waits for its retry is not superseded: the terminal may still
// be working on it, and sending the later command at once would put two in flight there.
func TestCoalescingLeavesASentCommandAlone(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{RetryInterval: time.Second, HeartbeatTimeout: time.Hour}})
	e.o.Heartbeat("d")
	e.enqueue("m1", "d", "951")
	e.expectSend("m1", 1)
	e.clock.Advance(time.Second) // no ack in time: m1 waits for its retry
	e.enqueue("m2", "d", "951")
	if st := e.status("d"); st.InFlight != "" || st.Queued != 2 || st.Superseded != 0 {
		t.Fatalf("a sent command was superseded, or the next one sent at once: %+v", st)
	}
	e.o.Ack("d", "m1", 0, "") // the late ack
	e.expectSend("m2", 1)
	e.enqueue("m3", "d", "951") // m2 is in flight: untouched
	e.enqueue("m4", "d", "951") // m3 was never sent: superseded
	e.o.Ack("d", "m2", 0, "")
	e.expectSend("m4", 1)
	got := ""
	for _, r := range e.results() {
		got += fmt.Sprintf("%s:%s ", r.MessageID, r.Status)
	}
	if got != "m1:succeeded m3:superseded m2:succeeded " {
		t.Fatalf("results: %s", got)
	}
}

// Two commands for one person can wait on a device at once (a sent one waiting for its
// retry, and a later one). When the later one leaves the queue first (here a late ack), the
// earlier one is still the person's scheduled command: a failed command older than it is
// moot and RetryFailed must leave it alone, as it would after a restart.
func TestCoalescingIndexKeepsARetriedCommand(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{RetryInterval: time.Second, HeartbeatTimeout: time.Hour}})
	e.o.Heartbeat("d")
	e.enqueue("m0", "d", "951")
	e.expectSend("m0", 1)
	e.o.Ack("d", "m0", 7, "busy") // m0 failed
	e.enqueue("m1", "d", "951")
	e.expectSend("m1", 1)
	e.clock.Advance(time.Second) // no ack in time: m1 waits for its retry
	e.enqueue("m2", "d", "951")  // m1 was sent: not superseded, m2 queues behind it
	e.o.Ack("d", "m2", 0, "")    // an ack for m2 before it was sent
	if st := e.status("d"); st.Queued != 1 || st.InFlight != "" {
		t.Fatalf("want m1 alone waiting for its retry: %+v", st)
	}
	for round := range 2 {
		n, err := e.o.RetryFailed("d")
		if err != nil || n != 0 {
			t.Fatalf("round %d: RetryFailed brought back %d (err %v); m0 is older than the scheduled m1", round, n, err)
		}
		e.restart()
	}
}

// A superseded command's result names the command that superseded it, live and after a
// restart, however many were superseded since.
func TestSupersededResultNamesTheLaterCommand(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	e.enqueue("m1", "d", "951") // the device is offline: nothing is sent
	e.enqueue("m2", "d", "951")
	e.enqueue("m3", "d", "952")
	e.enqueue("long-id-m4", "d", "952")
	want := "m1:superseded by m2 m3:superseded by long-id-m4 "
	for _, when := range []string{"live", "after a restart"} {
		got := ""
		for _, r := range e.results() {
			got += fmt.Sprintf("%s:%s ", r.MessageID, r.Err)
			e.o.mu.Lock()
			shared := unsafe.StringData(r.Err) == unsafe.StringData(e.o.t.errs[e.o.t.items.get(r.MessageID)])
			e.o.mu.Unlock()
			if shared {
				t.Fatalf("%s: the result's error is the table's (callers keep it: it would keep a chunk)", when)
			}
		}
		if got != want {
			t.Fatalf("%s: results %q, want %q", when, got, want)
		}
		e.restart()
	}
}
