package devstate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// A device's state says how many persons its desired whitelist holds and whether the
// terminal holds it: in sync only with a protocol 2 heartbeat carrying the desired digest
// and nothing queued or in flight; it carries the last reconciliation's time and status;
// the gauges follow.
func TestStateSaysWhetherTheTerminalIsInSync(t *testing.T) {
	wl, err := whitelist.Open(t.TempDir(), whitelist.Options{Journal: journal.Options{Sync: journal.SyncNone}})
	if err != nil {
		t.Fatal(err)
	}
	defer wl.Close()
	for _, r := range []whitelist.Record{{ID: "951", Name: "Li Lei"}, {ID: "952", Name: "Han Meimei"}} {
		if err := wl.Set("d1", r); err != nil {
			t.Fatal(err)
		}
	}
	ob, err := outbox.Open(t.TempDir(), outbox.SenderFunc(func(context.Context, string, outbox.Command) error { return nil }),
		&outbox.Options{Journal: journal.Options{Sync: journal.SyncNone}, Devices: map[string]outbox.DeviceConfig{"d1": {}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	states := make(chan wire.DeviceState, 64)
	set := SetterFunc(func(_ context.Context, _ string, v []byte, _ time.Duration) error {
		var st wire.DeviceState
		if _, err := st.UnmarshalMsg(v); err != nil {
			t.Error(err)
		}
		states <- st
		return nil
	})
	reg := metrics.NewRegistry()
	m := NewMetrics(reg)
	w := New(Options{Devices: []string{"d1"}, Store: set, Status: ob, Desired: wl, Prefix: "faceagent/gw/devices/",
		WriteInterval: time.Millisecond, HeartbeatTimeout: time.Hour, Timeout: time.Second, Metrics: m})
	ctx, cancel := context.WithCancel(context.Background())
	w.Start(ctx)
	defer func() { cancel(); w.Wait() }()
	await := func(what string, ok func(wire.DeviceState) bool) wire.DeviceState {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case st := <-states:
				if ok(st) {
					return st
				}
			case <-deadline:
				t.Fatalf("no state write with %s within 10 s", what)
			}
		}
	}
	st := await("the desired count", func(st wire.DeviceState) bool { return st.DesiredPersons == 2 })
	if st.InSync {
		t.Errorf("in sync before any heartbeat: %+v", st)
	}
	// faceagent_terminal_in_sync{device="d1"}: absent until a protocol 2 heartbeat says
	// whether the terminal is in sync, 1 or 0 from then on, absent again after a v1 one.
	perDevice := func() string {
		var b strings.Builder
		if _, err := reg.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(b.String(), "\n") {
			if v, ok := strings.CutPrefix(line, `faceagent_terminal_in_sync{device="d1"} `); ok {
				return v
			}
		}
		return "absent"
	}
	if v := perDevice(); v != "absent" {
		t.Errorf("faceagent_terminal_in_sync{d1} %s before any heartbeat, want absent", v)
	}
	desired := wl.Digest("d1").String()
	hb := face.Heartbeat{DeviceID: "d1", Persons: 2, Protocol: 2, Serial: "S1", Digest: desired}
	w.Heartbeat("d1", hb)
	await("in sync", func(st wire.DeviceState) bool { return st.InSync })
	if v := m.InSync.Value(); v != 1 {
		t.Errorf("faceagent_terminals_in_sync %v, want 1", v)
	}
	if v := m.DesiredPersons.With("d1").Value(); v != 2 {
		t.Errorf("faceagent_desired_persons{d1} %v, want 2", v)
	}
	if v := perDevice(); v != "1" {
		t.Errorf("faceagent_terminal_in_sync{d1} %s in sync, want 1", v)
	}

	other := hb
	other.Digest = face.Digest(1).String()
	w.Heartbeat("d1", other)
	await("out of sync for another digest", func(st wire.DeviceState) bool { return !st.InSync })
	if v := m.InSync.Value(); v != 0 {
		t.Errorf("faceagent_terminals_in_sync %v, want 0", v)
	}
	if v := perDevice(); v != "0" {
		t.Errorf("faceagent_terminal_in_sync{d1} %s out of sync, want 0", v)
	}
	w.Heartbeat("d1", hb)
	await("in sync again", func(st wire.DeviceState) bool { return st.InSync })
	v1 := hb
	v1.Protocol = 0
	w.Heartbeat("d1", v1)
	await("out of sync for a v1 heartbeat", func(st wire.DeviceState) bool { return !st.InSync })
	if v := perDevice(); v != "absent" {
		t.Errorf("faceagent_terminal_in_sync{d1} %s after a v1 heartbeat, want absent", v)
	}

	// A command queued for the terminal (offline: it stays queued) will change its list.
	w.Heartbeat("d1", hb)
	await("in sync again", func(st wire.DeviceState) bool { return st.InSync })
	if err := ob.Enqueue(outbox.Task{MessageID: "m1", TaskID: "t1", DeviceID: "d1", Op: "DeletePerson", PersonID: "951", Payload: []byte{1}}); err != nil {
		t.Fatal(err)
	}
	w.Touch("d1")
	await("out of sync with a command queued", func(st wire.DeviceState) bool { return !st.InSync && st.QueueDepth == 1 })

	at := time.UnixMilli(1_800_000_000_000)
	w.Synced("d1", wire.SyncDone, at)
	await("the last sync", func(st wire.DeviceState) bool {
		return st.LastSync == at.UnixMilli() && st.SyncStatus == string(wire.SyncDone)
	})
}

// A terminal whose desired list the agent never knew says so ("unmanaged"): it is not
// reconciled, and not in sync with an empty list either, until a task names it.
func TestStateSaysUnmanaged(t *testing.T) {
	wl, err := whitelist.Open(t.TempDir(), whitelist.Options{Journal: journal.Options{Sync: journal.SyncNone}})
	if err != nil {
		t.Fatal(err)
	}
	defer wl.Close()
	ob, err := outbox.Open(t.TempDir(), outbox.SenderFunc(func(context.Context, string, outbox.Command) error { return nil }),
		&outbox.Options{Journal: journal.Options{Sync: journal.SyncNone}, Devices: map[string]outbox.DeviceConfig{"d1": {}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	states := make(chan wire.DeviceState, 64)
	set := SetterFunc(func(_ context.Context, _ string, v []byte, _ time.Duration) error {
		var st wire.DeviceState
		if _, err := st.UnmarshalMsg(v); err != nil {
			t.Error(err)
		}
		states <- st
		return nil
	})
	w := New(Options{Devices: []string{"d1"}, Store: set, Status: ob, Desired: wl, Prefix: "faceagent/gw/devices/",
		WriteInterval: time.Millisecond, HeartbeatTimeout: time.Hour, Timeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	w.Start(ctx)
	defer func() { cancel(); w.Wait() }()
	next := func() wire.DeviceState {
		t.Helper()
		select {
		case st := <-states:
			return st
		case <-time.After(10 * time.Second):
			t.Fatal("no state write within 10 s")
		}
		return wire.DeviceState{}
	}
	w.Heartbeat("d1", face.Heartbeat{DeviceID: "d1", Persons: 0, Protocol: 2, Serial: "S1", Digest: face.Digest(0).String()})
	st := next()
	for st.LastHeartbeat == 0 {
		st = next()
	}
	if st.SyncStatus != SyncUnmanaged || st.InSync {
		t.Fatalf("state %+v, want unmanaged and not in sync", st)
	}
	if err := wl.Set("d1", whitelist.Record{ID: "951", Name: "Li Lei"}); err != nil {
		t.Fatal(err)
	}
	w.Touch("d1")
	for st := next(); st.SyncStatus == SyncUnmanaged; st = next() {
	}
}

// Coming in sync is written at once, not after WriteInterval: a heartbeat with the desired
// digest while the last state said not in sync (and nothing queued) writes the state
// without waiting; a heartbeat that changes nothing about it waits as any change does.
func TestComingInSyncIsWrittenAtOnce(t *testing.T) {
	wl, err := whitelist.Open(t.TempDir(), whitelist.Options{Journal: journal.Options{Sync: journal.SyncNone}})
	if err != nil {
		t.Fatal(err)
	}
	defer wl.Close()
	if err := wl.Set("d1", whitelist.Record{ID: "951", Name: "Li Lei"}); err != nil {
		t.Fatal(err)
	}
	states := make(chan wire.DeviceState, 64)
	set := SetterFunc(func(_ context.Context, _ string, v []byte, _ time.Duration) error {
		var st wire.DeviceState
		if _, err := st.UnmarshalMsg(v); err != nil {
			t.Error(err)
		}
		states <- st
		return nil
	})
	w := New(Options{Devices: []string{"d1"}, Store: set, Status: openOutbox(t), Desired: wl, Prefix: "faceagent/gw/devices/",
		WriteInterval: time.Hour, HeartbeatTimeout: 10 * time.Hour, Timeout: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	w.Start(ctx)
	defer func() { cancel(); w.Wait() }()
	next := func(what string) wire.DeviceState {
		t.Helper()
		select {
		case st := <-states:
			return st
		case <-time.After(10 * time.Second):
			t.Fatalf("no state write (%s) within 10 s", what)
			return wire.DeviceState{}
		}
	}
	if st := next("at start"); st.InSync {
		t.Fatalf("in sync at start: %+v", st)
	}
	// A scan of the writer after a change that is not due: nothing written.
	quiet := func(what string) {
		t.Helper()
		_, _, scans := w.counts()
		deadline := time.After(10 * time.Second)
		for _, _, s := w.counts(); s == scans; _, _, s = w.counts() {
			select {
			case <-deadline:
				t.Fatalf("the writer never woke (%s)", what)
			case <-time.After(time.Millisecond):
			}
		}
		select {
		case st := <-states:
			t.Fatalf("written before WriteInterval (%s): %+v", what, st)
		default:
		}
	}
	hb := face.Heartbeat{DeviceID: "d1", Persons: 1, Protocol: 2, Serial: "S1", Digest: face.Digest(7).String()}
	w.Heartbeat("d1", hb) // not the desired digest: waits for WriteInterval
	quiet("a heartbeat with another digest")
	hb.Digest = wl.Digest("d1").String()
	w.Heartbeat("d1", hb)
	if st := next("coming in sync"); !st.InSync {
		t.Fatalf("state %+v, want in sync", st)
	}
	hb.Time = "2026-11-27T00:00:01Z"
	w.Heartbeat("d1", hb) // in sync already: nothing to hurry
	quiet("a heartbeat still in sync")
}
