package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/agent/kv"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/hlc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const prefix = "faceagent/gw/"

// fixture is remote management over a real store engine (its status keys reserved, as
// the agent's are) and a real outbox with devices r1 and r2.
type fixture struct {
	st       *statestore.Store
	ob       *outbox.Outbox
	doneLog  string
	draining atomic.Bool
	mu       sync.Mutex
	applied  [][]byte // overrides ApplyConfig was given
	resynced []string // devices Resync was asked for ("": all); nil Resync while noResync
	noResync bool
	r        *Remote     // set by start
	sent     chan string // the message id of each command the outbox sent
}

func newFixture(t *testing.T, opts *statestore.Options) *fixture {
	t.Helper()
	o := statestore.Options{}
	if opts != nil {
		o = *opts
	}
	o.ReservedPrefixes = []string{prefix + "config/status", prefix + "control/status"}
	st, err := statestore.New(&o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sent := make(chan string, 16)
	ob, err := outbox.Open(t.TempDir(), outbox.SenderFunc(func(_ context.Context, _ string, c outbox.Command) error {
		select {
		case sent <- c.MessageID:
		default:
		}
		return nil
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ob.Close() })
	for _, id := range []string{"r1", "r2"} {
		ob.SetDevice(id, outbox.DeviceConfig{})
	}
	return &fixture{st: st, ob: ob, doneLog: filepath.Join(t.TempDir(), "control-done.json"), sent: sent}
}

// refuse waits for the outbox to send command id to dev, and has dev refuse it: the
// command fails and is held for retry-failed.
func (f *fixture) refuse(t *testing.T, dev, id string) {
	t.Helper()
	select {
	case got := <-f.sent:
		if got != id {
			t.Fatalf("sent %q, want %q", got, id)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s never sent", id)
	}
	f.ob.Ack(dev, id, 7, "busy")
	if s, _ := f.ob.DeviceStatus(dev); s.FailedHeld != 1 {
		t.Fatalf("%s refused, %s holds %d failures, want 1", id, dev, s.FailedHeld)
	}
}

// start runs remote management until the test ends.
func (f *fixture) start(t *testing.T, log *bytes.Buffer) {
	t.Helper()
	o := Options{
		Store: kv.Engine{Store: f.st, Clock: hlc.NewClock("agent")}, Prefix: prefix, DoneLog: f.doneLog,
		ApplyConfig: func(v []byte) (string, error) {
			f.mu.Lock()
			f.applied = append(f.applied, v)
			f.mu.Unlock()
			if bytes.Contains(v, []byte("bad")) {
				return "", errors.New("override:1: bad is not a setting")
			}
			return "max_tries=" + string(v), nil
		},
		KnownDevice: func(id string) bool { return id == "r1" || id == "r2" },
		Outbox:      f.ob,
		SetDraining: f.draining.Store,
	}
	if !f.noResync {
		o.Resync = func(id string) int {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.resynced = append(f.resynced, id)
			if id == "" {
				return 2
			}
			return 1
		}
	}
	if log != nil {
		o.Log = slogTo(log)
	}
	r := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	r.Start(ctx)
	t.Cleanup(func() { cancel(); r.Wait() })
	f.r = r
}

// write sets key as the back office does (no owner) and waits for statusKey to hold a
// status matching want.
func (f *fixture) write(t *testing.T, key, value, statusKey string, want func(Status) bool) Status {
	t.Helper()
	changed, stop, err := kv.Engine{Store: f.st, Clock: hlc.NewClock("watcher")}.Watch(context.Background(), statusKey)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if value != "" {
		if _, err := f.st.Set(key, []byte(value), statestore.SetOptions{Timestamp: hlc.NewClock("office").Now()}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.After(10 * time.Second)
	for {
		if v, _, err := f.st.Get(statusKey); err == nil {
			var st Status
			if err := json.Unmarshal(v, &st); err != nil {
				t.Fatalf("%s: %v: %q", statusKey, err, v)
			}
			if want(st) {
				return st
			}
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no matching status on %s after writing %s = %q", statusKey, key, value)
		}
	}
}

func byID(id string) func(Status) bool { return func(st Status) bool { return st.ID == id } }

func TestConfig(t *testing.T) {
	f := newFixture(t, nil)
	f.start(t, nil)
	// At start the (missing) config is applied: no override.
	st := f.write(t, "", "", prefix+"config/status", func(st Status) bool { return st.OK })
	if st.Applied != "max_tries=" || st.At == "" {
		t.Fatalf("start-up status %+v", st)
	}
	st = f.write(t, prefix+"config", "9", prefix+"config/status", func(st Status) bool { return st.Applied == "max_tries=9" })
	if !st.OK || st.Error != "" {
		t.Fatalf("status %+v", st)
	}
	st = f.write(t, prefix+"config", "bad", prefix+"config/status", func(st Status) bool { return !st.OK })
	if st.Error != "override:1: bad is not a setting" || st.Applied != "" {
		t.Fatalf("refused override: status %+v", st)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.applied) != 3 || f.applied[0] != nil || string(f.applied[2]) != "bad" {
		t.Fatalf("ApplyConfig got %q", f.applied)
	}
}

func TestControl(t *testing.T) {
	f := newFixture(t, nil)
	f.start(t, nil)
	ctl, ctlStatus := prefix+"control", prefix+"control/status"
	if st := f.write(t, ctl, `{"id":"c1","command":"pause","device":"r1"}`, ctlStatus, byID("c1")); !st.OK || st.Result != "paused" {
		t.Fatalf("pause: %+v", st)
	}
	if s, _ := f.ob.DeviceStatus("r1"); !s.Paused {
		t.Fatal("r1 not paused")
	}
	// The same id again is not executed again; the next id is.
	if _, err := f.st.Set(ctl, []byte(`{"id":"c1","command":"resume","device":"r1"}`), statestore.SetOptions{Timestamp: hlc.NewClock("office").Now()}); err != nil {
		t.Fatal(err)
	}
	if st := f.write(t, ctl, `{"id":"c2","command":"drain"}`, ctlStatus, byID("c2")); !st.OK {
		t.Fatalf("drain: %+v", st)
	}
	if s, _ := f.ob.DeviceStatus("r1"); !s.Paused {
		t.Fatal("a repeated command id was executed again")
	}
	if !f.draining.Load() {
		t.Fatal("not draining")
	}
	for _, c := range []struct{ cmd, err string }{
		{`{"id":"c3","command":"explode"}`, `unknown command "explode"`},
		{`{"id":"c4","command":"pause"}`, "pause needs a device"},
		{`{"id":"c5","command":"resume","device":"r9"}`, `unknown device "r9"`},
	} {
		var id struct{ ID string }
		_ = json.Unmarshal([]byte(c.cmd), &id)
		if st := f.write(t, ctl, c.cmd, ctlStatus, byID(id.ID)); st.OK || !strings.Contains(st.Error, c.err) {
			t.Fatalf("%s: %+v, want the error %q", c.cmd, st, c.err)
		}
	}
	if st := f.write(t, ctl, `not json`, ctlStatus, func(st Status) bool { return strings.HasPrefix(st.Error, "want {") }); st.OK {
		t.Fatalf("bad JSON: %+v", st)
	}
	for _, c := range []struct{ cmd, result string }{
		{`{"id":"c6","command":"retry-failed"}`, "0 commands scheduled again"},
		{`{"id":"c7","command":"purge-failed","device":"r2"}`, "0 failed commands purged"},
		{`{"id":"c8","command":"undrain"}`, "taking tasks again"},
		{`{"id":"c9","command":"resume","device":"r1"}`, "resumed"},
	} {
		var id struct{ ID string }
		_ = json.Unmarshal([]byte(c.cmd), &id)
		if st := f.write(t, ctl, c.cmd, ctlStatus, byID(id.ID)); !st.OK || st.Result != c.result {
			t.Fatalf("%s: %+v, want %q", c.cmd, st, c.result)
		}
	}
	if s, _ := f.ob.DeviceStatus("r1"); s.Paused || f.draining.Load() {
		t.Fatalf("r1 paused %v, draining %v after resume and undrain", s.Paused, f.draining.Load())
	}
}

// resync asks for a reconciliation of one known terminal or of all; an unknown terminal,
// or whitelist sync off, is refused.
func TestControlResync(t *testing.T) {
	f := newFixture(t, nil)
	f.start(t, nil)
	ctl, ctlStatus := prefix+"control", prefix+"control/status"
	if st := f.write(t, ctl, `{"id":"s1","command":"resync","device":"r2"}`, ctlStatus, byID("s1")); !st.OK || st.Result != "1 terminal to reconcile" {
		t.Fatalf("resync r2: %+v", st)
	}
	if st := f.write(t, ctl, `{"id":"s2","command":"resync"}`, ctlStatus, byID("s2")); !st.OK || st.Result != "2 terminals to reconcile" {
		t.Fatalf("resync all: %+v", st)
	}
	if st := f.write(t, ctl, `{"id":"s3","command":"resync","device":"r9"}`, ctlStatus, byID("s3")); st.OK || st.Error != `unknown device "r9"` {
		t.Fatalf("resync r9: %+v", st)
	}
	f.mu.Lock()
	got := strings.Join(f.resynced, ",")
	f.mu.Unlock()
	if got != "r2," {
		t.Fatalf("Resync got %q, want r2 then all", got)
	}

	off := newFixture(t, nil)
	off.noResync = true
	off.start(t, nil)
	if st := off.write(t, ctl, `{"id":"s4","command":"resync","device":"r1"}`, ctlStatus, byID("s4")); st.OK || !strings.Contains(st.Error, "whitelist sync is off") {
		t.Fatalf("resync with sync off: %+v", st)
	}
}

// The ids executed survive a restart: the command in the key at start-up is not
// executed again, and the done log keeps the last MaxDoneIDs.
func TestControlDoneAcrossRestart(t *testing.T) {
	f := newFixture(t, nil)
	done := make([]string, MaxDoneIDs)
	for i := range done {
		done[i] = "old-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
	}
	done[len(done)-1] = "c1"
	if err := writeFileAtomic(f.doneLog, done); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.Set(prefix+"control", []byte(`{"id":"c1","command":"pause","device":"r1"}`),
		statestore.SetOptions{Timestamp: hlc.NewClock("office").Now()}); err != nil {
		t.Fatal(err)
	}
	f.start(t, nil)
	if st := f.write(t, prefix+"control", `{"id":"c2","command":"pause","device":"r2"}`, prefix+"control/status", byID("c2")); !st.OK {
		t.Fatalf("c2: %+v", st)
	}
	if s, _ := f.ob.DeviceStatus("r1"); s.Paused {
		t.Fatal("the command executed before the restart was executed again")
	}
	b, err := os.ReadFile(f.doneLog)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	if err := json.Unmarshal(b, &kept); err != nil {
		t.Fatal(err)
	}
	if len(kept) != MaxDoneIDs || kept[0] != done[1] || kept[len(kept)-1] != "c2" {
		t.Fatalf("done log: %d ids, first %q, last %q", len(kept), kept[0], kept[len(kept)-1])
	}
}

// A store that refuses the watches at start (full) is retried with backoff until it
// takes them; then the keys are applied.
func TestWatchRetried(t *testing.T) {
	f := newFixture(t, &statestore.Options{MaxBytes: 1024})
	clock := hlc.NewClock("office")
	if _, err := f.st.Set("filler", make([]byte, 1024-statestore.KeyOverhead-len("filler")),
		statestore.SetOptions{Timestamp: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	f.start(t, &log)
	deadline := time.Now().Add(10 * time.Second)
	for f.st.Stats().Refused[statestore.BoundBytes] == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the watch was never refused")
		}
		time.Sleep(5 * time.Millisecond) // polling a counter, not standing in for an event
	}
	if _, err := f.st.Set("filler", nil, statestore.SetOptions{Timestamp: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if st := f.write(t, prefix+"config", "7", prefix+"config/status", func(st Status) bool { return st.Applied == "max_tries=7" }); !st.OK {
		t.Fatalf("status %+v", st)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(log.String(), "remote config and control unavailable; retrying") {
		t.Fatalf("no warning logged:\n%s", log.String())
	}
}

// Execute runs a command as the control key does (the operator's page calls it), without
// an id and without a status key.
func TestExecute(t *testing.T) {
	f := newFixture(t, nil)
	f.start(t, nil)
	if res, err := f.r.Execute(ControlCommand{Command: "pause", Device: "r2"}); err != nil || res != "paused" {
		t.Fatalf("pause: %q %v", res, err)
	}
	if s, _ := f.ob.DeviceStatus("r2"); !s.Paused {
		t.Fatal("r2 not paused")
	}
	if _, err := f.r.Execute(ControlCommand{Command: "pause", Device: "nope"}); err == nil || err.Error() != `unknown device "nope"` {
		t.Fatalf("unknown device: %v", err)
	}
	if res, err := f.r.Execute(ControlCommand{Command: "retry-failed"}); err != nil || res != "0 commands scheduled again" {
		t.Fatalf("retry-failed: %q %v", res, err)
	}
	// One command: the results say "command", not "commands".
	f.ob.Heartbeat("r1")
	if err := f.ob.Enqueue(outbox.Task{MessageID: "m1", DeviceID: "r1"}); err != nil {
		t.Fatal(err)
	}
	f.refuse(t, "r1", "m1")
	if res, err := f.r.Execute(ControlCommand{Command: "retry-failed", Device: "r1"}); err != nil || res != "1 command scheduled again" {
		t.Fatalf("retry-failed of one: %q %v", res, err)
	}
	f.refuse(t, "r1", "m1")
	if res, err := f.r.Execute(ControlCommand{Command: "purge-failed", Device: "r1"}); err != nil || res != "1 failed command purged" {
		t.Fatalf("purge-failed of one: %q %v", res, err)
	}
	if v, _, _ := f.st.Get(prefix + "control/status"); v != nil {
		t.Fatal("Execute must not write the control status key")
	}
}
