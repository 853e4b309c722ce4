package report

import (
	"context"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// BenchmarkForwardAck: what forwarding one ack costs the device event path (encoding,
// the lazy journal append, the backlog), with the publisher running against a publisher
// that takes everything at once and the journal fsyncing (sync = "always") on its own
// goroutine, as in production.
func BenchmarkForwardAck(b *testing.B) {
	f, err := OpenForwarder(b.TempDir(), ForwardOptions{Journal: journal.Options{Sync: journal.SyncAlways, SegmentSize: 4 << 20},
		Prefix: "faceagent/gw-01/devices/", Metrics: NewForwardMetrics(testRegistry()), Logger: quietLog})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx, publisherFunc(func(context.Context, string, []byte) error { return nil }))
	defer func() {
		cancel()
		f.Wait()
		f.Close()
	}()
	ack := face.Ack{MessageID: "EditPerson-951-1494527067538440192"}
	hb := face.Heartbeat{DeviceID: "2042253", Time: "2026-11-22T14:00:00Z", Firmware: "3.2.1", Persons: 1234}
	b.Run("ack", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f.Ack("2042253", ack)
		}
	})
	b.Run("heartbeat", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f.Heartbeat("2042253", hb)
		}
	})
}
