package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// watch-sync prints "watching" once subscribed, then each report of the terminal (not
// another's), and ends with 0 after done, 1 after failed.
func TestWatchSync(t *testing.T) {
	f := startFakeAgent(t, "gw-s")
	publish := func(dev string, st wire.SyncStatus, missing int) {
		rep := wire.SyncReport{DeviceID: dev, Reason: wire.SyncDigest, Status: st, Missing: missing, At: "2026-11-27T15:04:05.000Z"}
		if st == wire.SyncFailed {
			rep.Error = "capacity: the terminal is full"
		}
		out, err := rep.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.srv.Publish(wire.GatewayTopics("gw-s").DeviceSync(dev), out, false, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		end  wire.SyncStatus
		code int
	}{{wire.SyncDone, 0}, {wire.SyncFailed, 1}} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var out, errOut testutil.SyncBuffer
		code := make(chan int, 1)
		go func() {
			code <- run(ctx, []string{"watch-sync", "-url", f.url, "-gateway", "gw-s", "term-01"}, nil, &out, &errOut, false)
		}()
		tick := time.NewTicker(5 * time.Millisecond)
		for !strings.Contains(out.String(), "watching faceagent/gw-s/devices/term-01/sync\n") {
			select {
			case <-tick.C:
			case <-ctx.Done():
				t.Fatalf("never subscribed: %s%s", out.String(), errOut.String())
			}
		}
		tick.Stop()
		publish("term-02", wire.SyncStarted, 9)
		publish("term-01", wire.SyncStarted, 7)
		publish("term-01", c.end, 7)
		if got := <-code; got != c.code {
			t.Errorf("%s: exit %d, want %d\n%s%s", c.end, got, c.code, out.String(), errOut.String())
		}
		cancel()
		want := "watching faceagent/gw-s/devices/term-01/sync\n" +
			"sync term-01 digest: started, missing 7, extra 0, changed 0, at 2026-11-27T15:04:05.000Z\n" +
			"sync term-01 digest: " + string(c.end) + ", missing 7, extra 0, changed 0, at 2026-11-27T15:04:05.000Z"
		if c.end == wire.SyncFailed {
			want += " (capacity: the terminal is full)"
		}
		if got := out.String(); got != want+"\n" {
			t.Errorf("output:\n%s\nwant:\n%s", got, want)
		}
	}
	if _, errOut, code := runTaskctl(t, false, "watch-sync"); code != 2 || !strings.Contains(errOut, "usage: taskctl watch-sync") {
		t.Errorf("no device: exit %d, %q", code, errOut)
	}
}
