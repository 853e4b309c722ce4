package links

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// lastSender is a non-blocking Sender that remembers the last command's message id: the
// outbox sends each next command inline, before the ack's handling returns.
type lastSender struct{ last string }

func (s *lastSender) Send(_ context.Context, _ string, cmd outbox.Command) error {
	s.last = cmd.MessageID
	return nil
}
func (*lastSender) SendsWithoutBlocking(string) bool { return true }

// ackPath is an outbox with n commands queued for one online device, the first in flight.
func ackPath(tb testing.TB, n int) (*outbox.Outbox, *lastSender) {
	tb.Helper()
	snd := &lastSender{}
	ob, err := outbox.Open(tb.TempDir(), snd, &outbox.Options{Journal: journal.Options{Sync: journal.SyncNone},
		MaxQueued: n + 1, MaxQueuedPerDevice: n + 1, CompactAfter: 1 << 30})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ob.Close() })
	payload, err := (&face.Command{MessageID: "m", Op: face.AddPerson, Person: face.Person{ID: "951", Name: "Li Lei"}}).AppendMsg(nil)
	if err != nil {
		tb.Fatal(err)
	}
	tasks := make([]outbox.Task, 0, 1000)
	for i := 0; i < n; i += len(tasks) {
		tasks = tasks[:0]
		for j := i; j < min(i+1000, n); j++ {
			tasks = append(tasks, outbox.Task{MessageID: fmt.Sprintf("EditPerson-%d-1494527067538440192", j), TaskID: "t",
				DeviceID: "dev", Op: "AddPerson", Payload: payload})
		}
		for _, err := range ob.EnqueueBatch(tasks) {
			if err != nil {
				tb.Fatal(err)
			}
		}
	}
	ob.Heartbeat("dev")
	return ob, snd
}

var discard = slog.New(slog.DiscardHandler)

// BenchmarkAckToNextSend measures an ordinary ack's way from the link's event to the
// device's next command: "whole-ack" is the links' path (the ack passed whole, so that a
// query's answer can follow it), "fields" the outbox's Ack with the id, code and message
// only, the path before queries.
func BenchmarkAckToNextSend(b *testing.B) {
	b.Run("whole-ack", func(b *testing.B) {
		ob, snd := ackPath(b, b.N+1)
		s := Sinks{Outbox: ob, Forwarder: nopForwarder{}, State: nopState{}}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			handleEvent(device.Event{Kind: device.Ack, DeviceID: "dev", Ack: face.Ack{MessageID: snd.last}}, nil, s, discard)
		}
	})
	b.Run("fields", func(b *testing.B) {
		ob, snd := ackPath(b, b.N+1)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			ob.Ack("dev", snd.last, 0, "")
		}
	})
}

// An ordinary ack passed whole through the links costs no allocation more than the
// outbox's Ack with its fields alone, also while a query is pending on another device.
func TestOrdinaryAckAllocatesNothingMore(t *testing.T) {
	ob, snd := ackPath(t, 500)
	if err := ob.Query(outbox.Query{MessageID: "q", DeviceID: "other", Done: func(face.Ack, error) {}}); err != nil {
		t.Fatal(err)
	}
	s := Sinks{Outbox: ob, Forwarder: nopForwarder{}, State: nopState{}}
	whole := testing.AllocsPerRun(200, func() {
		handleEvent(device.Event{Kind: device.Ack, DeviceID: "dev", Ack: face.Ack{MessageID: snd.last}}, nil, s, discard)
	})
	fields := testing.AllocsPerRun(200, func() { ob.Ack("dev", snd.last, 0, "") })
	if whole > fields {
		t.Fatalf("allocations per ack and next send: whole ack %.2f, fields %.2f", whole, fields)
	}
	t.Logf("allocations per ack and next send: whole ack %.2f, fields %.2f", whole, fields)
}
