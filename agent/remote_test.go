package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/remote"
	"github.com/seed0e69bba5/faceagent/agent/store"
)

// Remote management through the embedded store: a store client (as an operator's tool
// would) writes faceagent/{gw}/config and …/control; the agent applies them live and
// answers on the status keys.
func TestRemoteConfigAndControl(t *testing.T) {
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-r\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n[dispatch]\nmax_tries = 4\n[[devices]]\nid = \"r1\"\n[[devices]]\nid = \"r2\"\n", t.TempDir())
	cfg, err := config.Parse("r.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, a, stop := startAgentFull(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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

	write("faceagent/gw-r/config", "[dispatch]\nmax_tries = 9\n[[devices]]\nid = \"r2\"\nheartbeat = false\n", "faceagent/gw-r/config/status", ok)
	ob := a.outbox.Load()
	if a.Config().Dispatch.MaxTries != 9 || ob.Settings().MaxTries != 9 || a.Config().Device("r2").HasHeartbeat() {
		t.Fatalf("override not applied: config %d, outbox %d", a.Config().Dispatch.MaxTries, ob.Settings().MaxTries)
	}
	st := write("faceagent/gw-r/config", "[dispatch]\nmax_tries = 0\n", "faceagent/gw-r/config/status", func(st remote.Status) bool { return !st.OK })
	if !strings.Contains(st.Error, "override:2: dispatch.max_tries: 0 is out of range") || ob.Settings().MaxTries != 9 {
		t.Fatalf("bad override: status %+v, running max_tries %d", st, ob.Settings().MaxTries)
	}

	ctl := "faceagent/gw-r/control"
	ctlStatus := "faceagent/gw-r/control/status"
	byID := func(id string) func(remote.Status) bool { return func(st remote.Status) bool { return st.ID == id } }
	if st := write(ctl, `{"id":"c1","command":"pause","device":"r1"}`, ctlStatus, byID("c1")); !st.OK {
		t.Fatalf("pause: %+v", st)
	}
	if s, _ := ob.DeviceStatus("r1"); !s.Paused {
		t.Fatal("r1 not paused")
	}
	// The same id again is not executed again; the next id is.
	if _, err := sc.Set(ctx, ctl, []byte(`{"id":"c1","command":"resume","device":"r1"}`), nil); err != nil {
		t.Fatal(err)
	}
	if st := write(ctl, `{"id":"c2","command":"drain"}`, ctlStatus, byID("c2")); !st.OK {
		t.Fatalf("drain: %+v", st)
	}
	if s, _ := ob.DeviceStatus("r1"); !s.Paused {
		t.Fatal("a repeated command id was executed again")
	}
	if !a.takeDraining() {
		t.Fatal("not draining")
	}
	if st := write(ctl, `{"id":"c3","command":"explode"}`, ctlStatus, byID("c3")); st.OK || !strings.Contains(st.Error, "unknown command") {
		t.Fatalf("unknown command: %+v", st)
	}
	if st := write(ctl, `{"id":"c4","command":"resume","device":"r1"}`, ctlStatus, byID("c4")); !st.OK {
		t.Fatalf("resume: %+v", st)
	}
	if s, _ := ob.DeviceStatus("r1"); s.Paused {
		t.Fatal("r1 still paused")
	}
	stop()
}
