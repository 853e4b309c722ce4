package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
)

func openStateWriterOutbox(tb testing.TB) *outbox.Outbox {
	tb.Helper()
	ob, err := outbox.Open(tb.TempDir(), outbox.SenderFunc(func(context.Context, string, outbox.Command) error { return nil }), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ob.Close() })
	return ob
}

func (w *stateWriter) counts() (written, failed, scans uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written, w.failed, w.scans
}

// A failed write is retried after write_interval by the writer itself: touches of a device
// already dirty do not wake it, so nothing else would.
func TestStateWriterRetriesFailedWriteUntouched(t *testing.T) {
	var calls atomic.Int32
	set := func(context.Context, string, []byte, time.Duration) error {
		if calls.Add(1) == 1 {
			return errors.New("store away")
		}
		return nil
	}
	w := newStateWriter([]string{"d1"}, set, openStateWriterOutbox(t), "gw", 20*time.Millisecond, time.Hour, time.Second, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	w.start(ctx)
	defer func() { cancel(); w.wg.Wait() }()
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
func TestStateWriterCoalescesTouches(t *testing.T) {
	var writes atomic.Int32
	set := func(context.Context, string, []byte, time.Duration) error { writes.Add(1); return nil }
	w := newStateWriter([]string{"d1"}, set, openStateWriterOutbox(t), "gw", 50*time.Millisecond, time.Hour, time.Second, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	w.start(ctx)
	defer func() { cancel(); w.wg.Wait() }()
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
		w.heartbeat("d1", testHeartbeat("d1", 1))
		w.touch("d1")
	}
	waitWrites(2)
	if n := writes.Load(); n != 2 {
		t.Fatalf("%d writes after 100 touches inside one interval, want 2", n)
	}
}

// BenchmarkStateWriterTouch: marking devices dirty (with a changed state) at event rate while the writer runs
// (64 devices, write_interval 1 s, as in BenchmarkThroughput64x20ms), against the former
// behaviour of waking the writer on every touch ("always-wake"). wakes/op is the writer's
// rounds, each a scan of every device; the loop yields after each touch, since events
// arrive spaced out and the writer gets to run between them.
func BenchmarkStateWriterTouch(b *testing.B) {
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
			set := func(context.Context, string, []byte, time.Duration) error { return nil }
			w := newStateWriter(ids, set, openStateWriterOutbox(b), "gw", time.Second, time.Hour, time.Second, slog.New(slog.DiscardHandler))
			ctx, cancel := context.WithCancel(context.Background())
			w.start(ctx)
			defer func() { cancel(); w.wg.Wait() }()
			_, _, scans0 := w.counts()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				id := ids[i%len(ids)]
				w.heartbeat(id, testHeartbeat(id, i)) // a changed state, as every ack's counts are
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
