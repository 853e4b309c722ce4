package devstate

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// States is what would be written, without writing; Changed hears of every change, also
// of a device already waiting for its write (which does not wake the writer).
func TestStatesAndChanged(t *testing.T) {
	ob := openOutbox(t)
	var changes atomic.Int32
	w := New(Options{Devices: []string{"b", "a"}, Status: ob, Prefix: "faceagent/gw/devices/",
		Store: SetterFunc(func(context.Context, string, []byte, time.Duration) error {
			t.Error("States must not write")
			return nil
		}),
		WriteInterval: time.Hour, HeartbeatTimeout: time.Hour, Timeout: time.Second,
		Changed: func() { changes.Add(1) }})
	ob.Heartbeat("a")
	w.Heartbeat("a", testHeartbeat("a", 12))
	w.Result(outbox.Result{DeviceID: "a", Status: outbox.Failed, Err: "refused <b>"})
	w.Touch("a")
	w.Synced("b", wire.SyncDone, time.UnixMilli(1234))
	if n := changes.Load(); n != 4 {
		t.Fatalf("Changed called %d times, want 4 (Heartbeat, Result, Touch, Synced)", n)
	}
	st := w.States()
	if len(st) != 2 || st[0].DeviceID != "a" || st[1].DeviceID != "b" {
		t.Fatalf("States = %+v, want a then b", st)
	}
	if a := st[0]; !a.Online || a.Persons != 12 || a.LastError != "refused <b>" || a.LastHeartbeat == 0 {
		t.Fatalf("a = %+v", a)
	}
	if b := st[1]; b.Online || b.SyncStatus != string(wire.SyncDone) || b.LastSync != 1234 {
		t.Fatalf("b = %+v", b)
	}
	var nilWriter *Writer
	if nilWriter.States() != nil {
		t.Fatal("a nil Writer has no states")
	}
}
