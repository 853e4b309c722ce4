package outbox

import (
	"strings"
	"testing"
	"time"
)

// Per-device overrides of retry_interval, max_tries and heartbeat_timeout (DeviceConfig).

// expectSends waits for len(want) sends, in any order (each runs on its own goroutine),
// and checks them against want: message id -> try.
func (e *env) expectSends(want map[string]int) {
	e.t.Helper()
	got := map[string]int{}
	for range want {
		c := e.snd.next(e.t)
		got[c.MessageID] = c.Try
	}
	for id, try := range want {
		if got[id] != try {
			e.t.Fatalf("sent %v, want %v", got, want)
		}
	}
}

func TestDeviceMaxTriesOverride(t *testing.T) {
	s := Settings{RetryInterval: time.Second, MaxTries: 4, MaxBackoff: 10 * time.Second, HeartbeatTimeout: time.Hour}
	e := newEnv(t, Options{Journal: fastJournal(), Settings: s, Devices: map[string]DeviceConfig{"two": {MaxTries: 2}}})
	e.enqueue("a1", "two", "p")
	e.enqueue("b1", "dflt", "p")
	e.o.Heartbeat("two")
	e.o.Heartbeat("dflt")
	e.expectSends(map[string]int{"a1": 1, "b1": 1})
	e.clock.Advance(time.Second) // both ack timeouts; backoff after try 1 is 0.5s..1s
	e.clock.Advance(time.Second)
	e.expectSends(map[string]int{"a1": 2, "b1": 2})
	e.clock.Advance(time.Second) // both second tries time out
	res := e.results()
	if len(res) != 1 || res[0].MessageID != "a1" || res[0].Status != Failed || res[0].Tries != 2 ||
		!strings.Contains(res[0].Err, "after 2 tries") {
		t.Fatalf("device with max_tries 2: results %+v", res)
	}
	if st := e.status("dflt"); st.Failed != 0 || st.Queued != 1 {
		t.Fatalf("device with the default max_tries 4 after 2 tries: %+v", st)
	}
	e.clock.Advance(2 * time.Second) // backoff after try 2: 1s..2s
	e.expectSend("b1", 3)
	e.clock.Advance(time.Second)
	e.clock.Advance(4 * time.Second)
	e.expectSend("b1", 4)
	e.clock.Advance(time.Second)
	if res := e.results(); len(res) != 2 || res[1].MessageID != "b1" || res[1].Tries != 4 || res[1].Status != Failed {
		t.Fatalf("device with the default max_tries: results %+v", res)
	}
}

func TestDeviceHeartbeatTimeoutOverride(t *testing.T) {
	s := Settings{RetryInterval: time.Hour, HeartbeatTimeout: time.Hour}
	e := newEnv(t, Options{Journal: fastJournal(), Settings: s, Devices: map[string]DeviceConfig{"short": {HeartbeatTimeout: time.Second}}})
	e.o.Heartbeat("short")
	e.o.Heartbeat("long")
	e.clock.Advance(999 * time.Millisecond)
	if st := e.status("short"); !st.Online {
		t.Fatalf("within its heartbeat timeout: %+v", st)
	}
	e.clock.Advance(time.Millisecond)
	if st, lg := e.status("short"), e.status("long"); st.Online || !lg.Online {
		t.Fatalf("after 1s of silence: short %+v, long %+v", st, lg)
	}
	// Offline by its own timeout: it gets nothing until it is heard from again.
	e.enqueue("s1", "short", "p")
	e.enqueue("l1", "long", "p")
	e.expectSend("l1", 1)
	if st := e.status("short"); st.InFlight != "" || st.Queued != 1 {
		t.Fatalf("offline device was sent to: %+v", st)
	}
	e.o.Heartbeat("short")
	e.expectSend("s1", 1)
}

func TestDeviceRetryIntervalOverride(t *testing.T) {
	s := Settings{RetryInterval: 10 * time.Second, MaxBackoff: time.Minute, HeartbeatTimeout: time.Hour}
	e := newEnv(t, Options{Journal: fastJournal(), Settings: s, Devices: map[string]DeviceConfig{"fast": {RetryInterval: time.Second}}})
	e.o.Heartbeat("fast")
	e.o.Heartbeat("slow")
	e.enqueue("f1", "fast", "p")
	e.enqueue("s1", "slow", "p")
	e.expectSends(map[string]int{"f1": 1, "s1": 1})
	e.clock.Advance(time.Second)
	if f, sl := e.status("fast"), e.status("slow"); f.InFlight != "" || f.Queued != 1 || sl.InFlight != "s1" {
		t.Fatalf("after 1s: fast %+v, slow %+v", f, sl)
	}
	e.clock.Advance(time.Second) // fast's backoff: 0.5s..1s, from its own retry interval
	e.expectSend("f1", 2)
	e.clock.Advance(8 * time.Second)
	if sl := e.status("slow"); sl.InFlight != "" || sl.Queued != 1 {
		t.Fatalf("slow after its 10s ack timeout: %+v", sl)
	}
}

func TestSetDeviceOverridesLive(t *testing.T) {
	s := Settings{RetryInterval: 10 * time.Second, MaxTries: 5, MaxBackoff: time.Minute, HeartbeatTimeout: time.Hour}
	e := newEnv(t, Options{Journal: fastJournal(), Settings: s})
	e.o.Heartbeat("d")
	e.enqueue("m1", "d", "p")
	e.expectSend("m1", 1)
	e.o.SetDevice("d", DeviceConfig{RetryInterval: time.Second})
	e.clock.Advance(time.Second)
	if st := e.status("d"); st.InFlight != "m1" {
		t.Fatalf("the running ack deadline (10s) must be kept: %+v", st)
	}
	e.clock.Advance(9 * time.Second) // try 1 times out
	e.clock.Advance(time.Second)     // backoff from the new 1s interval: 0.5s..1s
	e.expectSend("m1", 2)
	// max_tries lowered while try 2 is in flight: it is the last one.
	e.o.SetDevice("d", DeviceConfig{RetryInterval: time.Second, MaxTries: 2})
	e.clock.Advance(time.Second) // the new 1s ack timeout
	if res := e.results(); len(res) != 1 || res[0].Status != Failed || res[0].Tries != 2 {
		t.Fatalf("after SetDevice max_tries 2: %+v", res)
	}
	// Zero overrides fall back to Settings, including a later SetSettings.
	e.o.SetDevice("d", DeviceConfig{})
	e.o.SetSettings(Settings{RetryInterval: 3 * time.Second, MaxTries: 5, HeartbeatTimeout: time.Hour})
	e.enqueue("m2", "d", "q")
	e.expectSend("m2", 1)
	e.clock.Advance(2 * time.Second)
	if st := e.status("d"); st.InFlight != "m2" {
		t.Fatalf("ack timeout should be Settings' 3s: %+v", st)
	}
	e.clock.Advance(time.Second)
	if st := e.status("d"); st.InFlight != "" {
		t.Fatalf("after Settings' 3s: %+v", st)
	}
	// The heartbeat timeout applies at once: a device silent for 3s goes offline when its
	// timeout is set to 1s.
	e.o.Heartbeat("d")
	e.clock.Advance(3 * time.Second)
	if st := e.status("d"); !st.Online {
		t.Fatalf("online under the 1h timeout: %+v", st)
	}
	e.o.SetDevice("d", DeviceConfig{HeartbeatTimeout: time.Second})
	if st := e.status("d"); st.Online {
		t.Fatalf("still online after SetDevice heartbeat_timeout 1s: %+v", st)
	}
}
