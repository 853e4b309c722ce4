package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/hlc"
)

// A client of the embedded broker cannot put a fencing token on the agent's device-state
// key: before, its SET with __ft was accepted and every later write of the agent was
// refused ("the request fencing token is a lower version than …"), logged at debug only,
// and the terminal's state froze. Now the key is reserved to the agent: the client is
// refused, and the agent's refresh still lands.
func TestDeviceStateKeysReservedToTheAgent(t *testing.T) {
	src := fmt.Sprintf(`[agent]
gateway_id = "gw-f"
data_dir = %q
[broker]
listen = "127.0.0.1:0"
persist = false
[dispatch]
heartbeat_timeout = "1s"
[[devices]]
id = "d1"
`, t.TempDir())
	cfg, err := config.Parse("fence.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, a, _ := startAgentFull(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc, err := store.Connect(ctx, &store.Options{URL: "mqtt://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	const key = "faceagent/gw-f/devices/d1"
	w, err := sc.KeyNotify(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := sc.Get(ctx, key); err == nil {
			break
		}
		select { // the agent's first write
		case <-w.C():
		case <-ctx.Done():
			t.Fatal("the agent never wrote its device state")
		}
	}
	fence := hlc.Timestamp{Wall: time.Now().Add(30 * time.Second).UnixMilli(), Node: "attacker"}
	_, err = sc.Set(ctx, key, []byte("forged"), &store.SetOptions{FencingToken: fence})
	if !errors.Is(err, store.ErrNotAuthorized) {
		t.Errorf("a client's fenced SET of the agent's key: %v, want %v", err, store.ErrNotAuthorized)
	}
	if _, err := sc.Del(ctx, key, nil); !errors.Is(err, store.ErrNotAuthorized) {
		t.Errorf("a client's DEL of the agent's key: %v, want %v", err, store.ErrNotAuthorized)
	}
	for _, k := range []string{"faceagent/gw-f/config/status", "faceagent/gw-f/control/status"} {
		if _, err := sc.Set(ctx, k, []byte("{}"), &store.SetOptions{FencingToken: fence}); !errors.Is(err, store.ErrNotAuthorized) {
			t.Errorf("a client's SET of %s: %v, want %v", k, err, store.ErrNotAuthorized)
		}
	}
	if _, err := sc.Set(ctx, "faceagent/gw-f/config", []byte("[dispatch]\n"), nil); err != nil {
		t.Errorf("the back office's config key must stay writable: %v", err)
	}
	// The agent rewrites the state every heartbeat_timeout: the next write must land.
	for n := 0; ; {
		select {
		case nt := <-w.C():
			var st wire.DeviceState
			if _, err := st.UnmarshalMsg(nt.Value); err != nil || st.DeviceID != "d1" {
				continue // the forged value, before the fix
			}
			if n++; n == 2 {
				if ws := a.Warnings(); len(ws) != 0 {
					t.Errorf("warnings: %v", ws)
				}
				return
			}
		case <-ctx.Done():
			t.Fatalf("the agent's state writes stopped landing (warnings %v)", a.Warnings())
		}
	}
}
