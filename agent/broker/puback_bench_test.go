package broker

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// BenchmarkPublisherToKeptSession: a network client publishes QoS 1 messages with 64 in
// flight (as an upstream faceagent publishes its results) to a back office whose kept
// session (expiry 1 h) is connected and acknowledges each message; the sessions journal is
// in a temporary directory (fsync on). One op is one message published, acknowledged to
// the publisher. Each PUBACK waits for the group commit holding the message's record
// (sessionStore.WaitBeforeAck, once for the messages read together), so a lone publisher
// is bound by the journal's fsyncs;
// "clean" is a back office without a kept session (nothing written), the ceiling.
func BenchmarkPublisherToKeptSession(b *testing.B) {
	for _, mode := range []string{"kept", "clean"} {
		b.Run(mode, func(b *testing.B) {
			br := startBroker(b, Options{DataDir: b.TempDir()})
			bo, err := dialWire(br.Addr(), "back-office", mode == "clean")
			if err != nil {
				b.Fatal(err)
			}
			defer bo.close()
			if err := bo.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
				Filters: packets.Subscriptions{{Filter: "results", Qos: 1}}}); err != nil {
				b.Fatal(err)
			}
			if err := bo.expect(packets.Suback); err != nil {
				b.Fatal(err)
			}
			received := make(chan error, 1)
			go func() {
				for range b.N {
					if _, err := bo.nextPublishAndAck(); err != nil {
						received <- err
						return
					}
				}
				received <- nil
			}()
			pub, err := dialWire(br.Addr(), "publisher", true)
			if err != nil {
				b.Fatal(err)
			}
			defer pub.close()
			acked := make(chan error, 1)
			window := make(chan struct{}, pubackWindow)
			go func() {
				for range b.N {
					if err := pub.expect(packets.Puback); err != nil {
						acked <- err
						return
					}
					<-window
				}
				acked <- nil
			}()
			payload := resultPayload(0)
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				window <- struct{}{}
				if err := pub.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
					TopicName: "results", PacketID: uint16(i%65535 + 1), Payload: payload}); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-acked; err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			if err := <-received; err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}
