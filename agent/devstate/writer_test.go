package devstate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/agent/kv"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/resp3"
)

func openOutbox(tb testing.TB) *outbox.Outbox {
	tb.Helper()
	ob, err := outbox.Open(tb.TempDir(), outbox.SenderFunc(func(context.Context, string, outbox.Command) error { return nil }), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ob.Close() })
	return ob
}

func testHeartbeat(device string, persons int) face.Heartbeat {
	return face.Heartbeat{DeviceID: device, Time: "2026-11-22T14:00:00Z", Firmware: "1.0", Persons: persons}
}

// newTestWriter is a writer of ids on the key prefix faceagent/gw/devices/.
func newTestWriter(tb testing.TB, ids []string, set Setter, interval, heartbeatTimeout time.Duration, log *slog.Logger) *Writer {
	return New(Options{Devices: ids, Store: set, Status: openOutbox(tb), Prefix: "faceagent/gw/devices/",
		WriteInterval: interval, HeartbeatTimeout: heartbeatTimeout, Timeout: time.Second, Log: log})
}

func (w *Writer) counts() (written, failed, scans uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written, w.failed, w.scans
}

// A failed write is retried after write_interval by the writer itself: touches of a device
// already dirty do not wake it, so nothing else would.
func TestRetriesFailedWriteUntouched(t *testing.T) {
	var calls atomic.Int32
	set := SetterFunc(func(context.Context, string, []byte, time.Duration) error {
		if calls.Add(1) == 1 {
			return errors.New("store away")
		}
		return nil
	})
	w := newTestWriter(t, []string{"d1"}, set, 20*time.Millisecond, time.Hour, nil)
	ctx, cancel := context.WithCancel(context.Background())
	w.Start(ctx)
	defer func() { cancel(); w.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		written, failed, _ := w.counts()
		if written == 1 && failed == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("written %d, failed %d: the failed write was not retried", written, failed)
		}
		time.Sleep(5 * time.Millisecond) // polling a counter, not standing in for an event
	}
}

// A device touched after its write is written again once write_interval has passed, and
// many touches inside the interval make one write, not one each.
func TestCoalescesTouches(t *testing.T) {
	var writes atomic.Int32
	set := SetterFunc(func(context.Context, string, []byte, time.Duration) error { writes.Add(1); return nil })
	w := newTestWriter(t, []string{"d1"}, set, 50*time.Millisecond, time.Hour, nil)
	ctx, cancel := context.WithCancel(context.Background())
	w.Start(ctx)
	defer func() { cancel(); w.Wait() }()
	waitWrites := func(n int32) {
		deadline := time.Now().Add(10 * time.Second)
		for writes.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d writes, want %d", writes.Load(), n)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitWrites(1) // the start-up write
	for range 100 {
		w.Heartbeat("d1", testHeartbeat("d1", 1))
		w.Touch("d1")
	}
	waitWrites(2)
	if n := writes.Load(); n != 2 {
		t.Fatalf("%d writes after 100 touches inside one interval, want 2", n)
	}
}

// A write the store refuses (an external store, or the embedded one) is counted by
// reason, warned about at most once a minute, and named in RefusedWarnings (which
// /healthz prints) until a write of that device succeeds, so an operator sees it without
// debug logging. Options.Changed hears when a device begins or ceases to be named.
func TestReportsRefusals(t *testing.T) {
	refuse := make(chan error, 1)
	refuse <- store.ErrFencingTokenLowerVersion
	set := SetterFunc(func(context.Context, string, []byte, time.Duration) error {
		select {
		case err := <-refuse:
			return err
		default:
			return nil
		}
	})
	var logs bytes.Buffer
	reg := metrics.NewRegistry()
	w := newTestWriter(t, []string{"d1", "d2"}, set, time.Hour, time.Hour, slog.New(slog.NewTextHandler(&logs, nil)))
	w.m = NewMetrics(reg)
	var changes int
	w.changed = func() { changes++ }
	expectChanges := func(when string, want int) {
		t.Helper()
		if changes != want {
			t.Fatalf("%s: Changed heard %d times, want %d", when, changes, want)
		}
		changes = 0
	}
	now := time.Now()
	if !w.writeOne(context.Background(), "d1", now) {
		t.Fatal("a refused write reported as written")
	}
	expectChanges("d1 refused", 1)
	ws := w.RefusedWarnings()
	if len(ws) != 1 || !strings.Contains(ws[0], "faceagent/gw/devices/d1") ||
		!strings.Contains(ws[0], store.ErrFencingTokenLowerVersion.Text) {
		t.Fatalf("warnings %v", ws)
	}
	refuse <- store.ErrQuotaExceeded
	w.writeOne(context.Background(), "d2", now.Add(time.Second))
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings logged within a minute, want 1:\n%s", n, logs.String())
	}
	expectChanges("d2 refused", 1)
	refuse <- errors.New("link down") // not a refusal: not counted as one
	w.writeOne(context.Background(), "d2", now.Add(2*time.Second))
	expectChanges("d2 away, still named", 0)
	var exp strings.Builder
	if _, err := reg.WriteTo(&exp); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`faceagent_store_write_refused_total{reason="fencing"} 1`,
		`faceagent_store_write_refused_total{reason="quota"} 1`, `faceagent_store_write_errors_total 3`} {
		if !strings.Contains(exp.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	w.writeOne(context.Background(), "d1", now.Add(3*time.Second)) // accepted
	expectChanges("d1 accepted", 1)
	if ws := w.RefusedWarnings(); len(ws) != 1 || !strings.Contains(ws[0], "device d2") {
		t.Fatalf("after d1's write succeeded: %v", ws)
	}
	w.writeOne(context.Background(), "d2", now.Add(4*time.Second)) // accepted
	expectChanges("d2 accepted", 1)
	if ws := w.RefusedWarnings(); len(ws) != 0 {
		t.Fatalf("after every write succeeded: %v", ws)
	}
}

// Through the embedded store engine: the state lands msgp-encoded with PX = 3 ×
// heartbeat_timeout, and a key a client fenced is a refusal (reason fencing), not a
// store that is away.
func TestWritesThroughTheEngine(t *testing.T) {
	var wall atomic.Int64 // the store's wall clock, for its expiry
	wall.Store(time.Now().UnixMilli())
	st, err := statestore.New(&statestore.Options{Now: wall.Load,
		Clock: hlc.NewClock(statestore.DefaultNode, hlc.WithWallClock(wall.Load))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	reg := metrics.NewRegistry()
	w := New(Options{Devices: []string{"d1", "d2"}, Store: kv.Engine{Store: st, Clock: hlc.NewClock("agent")},
		Status: openOutbox(t), Prefix: "faceagent/gw/devices/", WriteInterval: time.Hour,
		HeartbeatTimeout: 10 * time.Second, Timeout: time.Second, Metrics: NewMetrics(reg)})
	fence := hlc.Timestamp{Wall: wall.Load(), Node: "c"}.String()
	set := resp3.AppendArrayHeader(nil, 3)
	for _, a := range []string{"SET", "faceagent/gw/devices/d2", "x"} {
		set = resp3.AppendBlobString(set, a)
	}
	if r, _ := st.Do(&statestore.Request{Payload: set, Timestamp: fence, HasTimestamp: true, FencingToken: fence,
		HasFencingToken: true}, nil); string(r) != "+OK\r\n" {
		t.Fatalf("fencing SET: %q", r)
	}
	now := time.Now()
	w.Heartbeat("d1", testHeartbeat("d1", 7))
	if w.writeOne(context.Background(), "d1", now) {
		t.Fatal("the write of d1 failed")
	}
	v, _, err := st.Get("faceagent/gw/devices/d1")
	if err != nil {
		t.Fatal(err)
	}
	var ds wire.DeviceState
	if _, err := ds.UnmarshalMsg(v); err != nil || ds.DeviceID != "d1" || ds.Persons != 7 || ds.UpdatedAt != now.UnixMilli() {
		t.Fatalf("stored state %+v, %v", ds, err)
	}
	// PX is 3 × heartbeat_timeout: the key is there 1 ms before 30 s, gone at 30 s.
	wall.Add(30_000 - 1)
	if _, _, err := st.Get("faceagent/gw/devices/d1"); err != nil {
		t.Fatalf("1 ms before its expiry: %v", err)
	}
	wall.Add(1)
	if _, _, err := st.Get("faceagent/gw/devices/d1"); !errors.Is(err, statestore.ErrNotFound) {
		t.Fatalf("at its expiry: %v", err)
	}

	if !w.writeOne(context.Background(), "d2", now) {
		t.Fatal("the write of a fenced key did not fail")
	}
	var exp strings.Builder
	if _, err := reg.WriteTo(&exp); err != nil {
		t.Fatal(err)
	}
	if want := `faceagent_store_write_refused_total{reason="fencing"} 1`; !strings.Contains(exp.String(), want) {
		t.Errorf("/metrics lacks %q:\n%s", want, exp.String())
	}
	if ws := w.RefusedWarnings(); len(ws) != 1 || !strings.Contains(ws[0], store.ErrFencingTokenRequired.Text) {
		t.Fatalf("warnings %v", ws)
	}
}

// BenchmarkTouch: marking devices dirty (with a changed state) at event rate while the
// writer runs (64 devices, write_interval 1 s, as in the agent's BenchmarkThroughput64x20ms),
// against the former behaviour of waking the writer on every touch ("always-wake").
// wakes/op is the writer's rounds, each a scan of every device; the loop yields after
// each touch, since events arrive spaced out and the writer gets to run between them.
func BenchmarkTouch(b *testing.B) {
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = fmt.Sprintf("b%02d", i)
	}
	for _, always := range []bool{true, false} {
		name := "wake-on-clean"
		if always {
			name = "always-wake"
		}
		b.Run(name, func(b *testing.B) {
			set := SetterFunc(func(context.Context, string, []byte, time.Duration) error { return nil })
			w := newTestWriter(b, ids, set, time.Second, time.Hour, nil)
			ctx, cancel := context.WithCancel(context.Background())
			w.Start(ctx)
			defer func() { cancel(); w.Wait() }()
			_, _, scans0 := w.counts()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				id := ids[i%len(ids)]
				w.Heartbeat(id, testHeartbeat(id, i)) // a changed state, as every ack's counts are
				if always {
					w.poke()
				}
				runtime.Gosched() // events come spaced out: let the writer run, as it would
				i++
			}
			_, _, scans := w.counts()
			b.ReportMetric(float64(scans-scans0)/float64(b.N), "wakes/op")
		})
	}
}
