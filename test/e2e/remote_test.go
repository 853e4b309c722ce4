package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/remote"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// Remote management through the embedded store: a store client (as an operator's tool
// would) writes faceagent/{gw}/config and …/control; the agent applies them live and
// answers on the status keys. What it applied shows where a deployment sees it: the
// running max_tries in a failed result's tries (r2 never acks; the override lowers
// max_tries, since four unacked tries in a row are below the outbox's breaker and more
// would open it for 30 s), r2's heartbeat = false in r2 being sent commands at all (it
// sends no heartbeats), a pause in the device's state key, draining in the deadletter a
// new task gets.
func TestRemoteConfigAndControl(t *testing.T) {
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-r\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[journal]\nsync = \"none\"\n[dispatch]\nmax_tries = 4\nretry_interval = \"20ms\"\nbackoff_max = \"20ms\"\n"+
		"[store]\nwrite_interval = \"50ms\"\n[[devices]]\nid = \"r1\"\n[[devices]]\nid = \"r2\"\n", t.TempDir())
	addr, a, stop := startAgentFull(t, parse(t, src))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// r1 acks and sends heartbeats (its state key is written at each); r2 never acks and
	// sends no heartbeats.
	r1, err := sim.StartMQTT("mqtt://"+addr, []string{"r1"}, sim.Options{Seed: 1, HeartbeatInterval: 50 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := sim.StartMQTT("mqtt://"+addr, []string{"r2"}, sim.Options{Seed: 2, AckLoss: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if err := r1.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	bo := connectBackOffice(t, addr, "gw-r")
	sc, err := store.Connect(ctx, &store.Options{URL: "mqtt://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()

	// write sets key and waits for the status key to hold a status matching want.
	write := func(key, value, statusKey string, want func(remote.Status) bool) remote.Status {
		t.Helper()
		w, err := sc.KeyNotify(ctx, statusKey)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop(ctx)
		if _, err := sc.Set(ctx, key, []byte(value), nil); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case n := <-w.C():
				var st remote.Status
				if err := json.Unmarshal(n.Value, &st); err != nil {
					t.Fatalf("%s: %v: %q", statusKey, err, n.Value)
				}
				if want(st) {
					return st
				}
			case <-ctx.Done():
				t.Fatalf("no matching status on %s after writing %s = %q", statusKey, key, value)
			}
		}
	}
	ok := func(st remote.Status) bool { return st.OK }
	// state waits for r1's state key to hold a state matching want.
	state := func(what string, want func(wire.DeviceState) bool) wire.DeviceState {
		t.Helper()
		const key = "faceagent/gw-r/devices/r1"
		w, err := sc.KeyNotify(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop(ctx)
		for {
			select {
			case n := <-w.C():
				var st wire.DeviceState
				if _, err := st.UnmarshalMsg(n.Value); err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				if want(st) {
					return st
				}
			case <-ctx.Done():
				t.Fatalf("%s never showed %s", key, what)
			}
		}
	}
	// failedAfter submits a task for r2 and returns its result's tries: r2 never acks, so
	// the task fails once max_tries are spent.
	failedAfter := func(taskID string) int {
		t.Helper()
		bo.publish("faceagent/gw-r/tasks", fmt.Appendf(nil, `{"taskId":%q,"deviceId":"r2","op":"AddPerson","person":{"id":"1"}}`, taskID))
		bo.waitFor("the result of "+taskID, 30*time.Second, func() bool { _, ok := bo.results[taskID]; return ok })
		bo.mu.Lock()
		defer bo.mu.Unlock()
		r := bo.results[taskID]
		if r.Status != wire.Failed {
			t.Fatalf("%s: %+v, want it failed (r2 never acks)", taskID, r)
		}
		return r.Tries
	}

	write("faceagent/gw-r/config", "[dispatch]\nmax_tries = 2\n[[devices]]\nid = \"r2\"\nheartbeat = false\n", "faceagent/gw-r/config/status", ok)
	if a.Config().Dispatch.MaxTries != 2 || a.Config().Device("r2").HasHeartbeat() {
		t.Fatalf("override not applied: max_tries %d, r2 heartbeat %v", a.Config().Dispatch.MaxTries, a.Config().Device("r2").HasHeartbeat())
	}
	if tries := failedAfter("t-1"); tries != 2 {
		t.Fatalf("override not applied: the outbox tried %d times, want 2", tries)
	}
	st := write("faceagent/gw-r/config", "[dispatch]\nmax_tries = 0\n", "faceagent/gw-r/config/status", func(st remote.Status) bool { return !st.OK })
	if !strings.Contains(st.Error, "override:2: dispatch.max_tries: 0 is out of range") || a.Config().Dispatch.MaxTries != 2 {
		t.Fatalf("bad override: status %+v, running max_tries %d", st, a.Config().Dispatch.MaxTries)
	}
	if tries := failedAfter("t-2"); tries != 2 {
		t.Fatalf("bad override: the outbox tried %d times, want the running 2", tries)
	}

	ctl := "faceagent/gw-r/control"
	ctlStatus := "faceagent/gw-r/control/status"
	byID := func(id string) func(remote.Status) bool { return func(st remote.Status) bool { return st.ID == id } }
	if st := write(ctl, `{"id":"c1","command":"pause","device":"r1"}`, ctlStatus, byID("c1")); !st.OK {
		t.Fatalf("pause: %+v", st)
	}
	state("r1 paused", func(s wire.DeviceState) bool { return s.Paused })
	// The same id again is not executed again; the next id is.
	if _, err := sc.Set(ctx, ctl, []byte(`{"id":"c1","command":"resume","device":"r1"}`), nil); err != nil {
		t.Fatal(err)
	}
	if st := write(ctl, `{"id":"c2","command":"drain"}`, ctlStatus, byID("c2")); !st.OK {
		t.Fatalf("drain: %+v", st)
	}
	// A state written after c2 was executed (and so after the repeated c1 was seen).
	since := time.Now().UnixMilli()
	if s := state("a state written after the drain", func(s wire.DeviceState) bool { return s.UpdatedAt > since }); !s.Paused {
		t.Fatal("a repeated command id was executed again")
	}
	bo.publish("faceagent/gw-r/tasks", []byte(`{"taskId":"t-3","deviceId":"r1","op":"AddPerson","person":{"id":"3"}}`))
	bo.waitFor("the deadletter of a task taken while draining", 10*time.Second, func() bool { return len(bo.dead) == 1 })
	bo.mu.Lock()
	d := bo.dead[0]
	bo.mu.Unlock()
	if d.Reason != "gateway draining: not taking new tasks" || !strings.Contains(string(d.Payload), `"t-3"`) {
		t.Fatalf("not draining: deadletter %q %s", d.Reason, d.Payload)
	}
	if st := write(ctl, `{"id":"c3","command":"explode"}`, ctlStatus, byID("c3")); st.OK || !strings.Contains(st.Error, "unknown command") {
		t.Fatalf("unknown command: %+v", st)
	}
	if st := write(ctl, `{"id":"c4","command":"resume","device":"r1"}`, ctlStatus, byID("c4")); !st.OK {
		t.Fatalf("resume: %+v", st)
	}
	state("r1 resumed", func(s wire.DeviceState) bool { return !s.Paused })
	stop()
}

// A pause through the control key shows in the device's state key at once, not at the
// key's next refresh: the terminal here is silent (no heartbeat, no ack would write the
// key), and the refresh of an unchanged state is one heartbeat_timeout (30 s) away.
func TestControlPauseShowsInStateKey(t *testing.T) {
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-p\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[journal]\nsync = \"none\"\n[dispatch]\nheartbeat_timeout = \"30s\"\n"+
		"[store]\nwrite_interval = \"50ms\"\n[[devices]]\nid = \"p1\"\n", t.TempDir())
	addr, _, stop := startAgentFull(t, parse(t, src))
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc, err := store.Connect(ctx, &store.Options{URL: "mqtt://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	const key = "faceagent/gw-p/devices/p1"
	// waitState waits at most 3 s (a tenth of the refresh) for the key to match want.
	waitState := func(what string, want func(wire.DeviceState) bool) {
		t.Helper()
		w, err := sc.KeyNotify(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop(ctx)
		if r, err := sc.Get(ctx, key); err == nil && r.Value != nil {
			var st wire.DeviceState
			if _, err := st.UnmarshalMsg(r.Value); err == nil && want(st) {
				return
			}
		}
		deadline := time.After(3 * time.Second)
		for {
			select {
			case n := <-w.C():
				var st wire.DeviceState
				if _, err := st.UnmarshalMsg(n.Value); err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				if want(st) {
					return
				}
			case <-deadline:
				t.Fatalf("%s did not show %s within 3s", key, what)
			}
		}
	}
	control := func(id, cmd string) {
		t.Helper()
		w, err := sc.KeyNotify(ctx, "faceagent/gw-p/control/status")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop(ctx)
		if _, err := sc.Set(ctx, "faceagent/gw-p/control", fmt.Appendf(nil, `{"id":%q,"command":%q,"device":"p1"}`, id, cmd), nil); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case n := <-w.C():
				var st remote.Status
				if err := json.Unmarshal(n.Value, &st); err != nil {
					t.Fatal(err)
				}
				if st.ID == id {
					if !st.OK {
						t.Fatalf("%s: %+v", cmd, st)
					}
					return
				}
			case <-ctx.Done():
				t.Fatalf("no status for %s", id)
			}
		}
	}
	waitState("the state written at start", func(wire.DeviceState) bool { return true })
	control("p-1", "pause")
	waitState("paused", func(s wire.DeviceState) bool { return s.Paused })
	control("p-2", "resume")
	waitState("resumed", func(s wire.DeviceState) bool { return !s.Paused })
}
