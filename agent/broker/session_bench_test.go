package broker

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// BenchmarkPersistentSubscriber: a back office with a kept session (MQTT 5, session expiry
// 1 h, clean start off) connected and subscribed with QoS 1 to results, which are published
// one after another through the inline client, as the agent's reporter does; each op is one
// message, sent and acknowledged (b.N messages, then wait for the last). Modes, with the
// sessions journal in a temporary directory (fsync on):
//
//   - group: the committer; each Publish waits for the commit holding its record;
//   - deferred: PublishDeferred, and SyncSessions after every 256 messages (what a reporter
//     publishing a batch of results, then marking it reported, would do);
//   - volatile: the topic in VolatileTopics (not written at all), the ceiling.
func BenchmarkPersistentSubscriber(b *testing.B) {
	for _, mode := range []string{"group", "deferred", "volatile"} {
		b.Run(mode, func(b *testing.B) {
			o := Options{Listen: "127.0.0.1:0", AllowAnonymous: true, DataDir: b.TempDir()}
			if mode == "volatile" {
				o.VolatileTopics = []string{"results"}
			}
			br, err := New(&o)
			if err != nil {
				b.Fatal(err)
			}
			if err := br.Start(); err != nil {
				b.Fatal(err)
			}
			defer br.Close()

			var received atomic.Int64
			want := make(chan struct{}, 1)
			var target atomic.Int64
			conn, err := net.Dial("tcp", br.Addr())
			if err != nil {
				b.Fatal(err)
			}
			c := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {},
				OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(paho.PublishReceived) (bool, error) {
					if received.Add(1) == target.Load() {
						want <- struct{}{}
					}
					return true, nil
				}}})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			expiry := uint32(3600)
			if _, err := c.Connect(ctx, &paho.Connect{ClientID: "back-office", KeepAlive: 30,
				Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil {
				b.Fatal(err)
			}
			defer c.Disconnect(&paho.Disconnect{})
			if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "results", QoS: 1}}}); err != nil {
				b.Fatal(err)
			}
			publish := br.Server().Publish
			if mode == "deferred" {
				publish = func(topic string, payload []byte, _ bool, qos byte) error {
					return br.PublishDeferred(topic, payload, qos)
				}
			}
			b.SetBytes(int64(len(resultPayload(0))))
			b.ReportAllocs()
			target.Store(int64(b.N))
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				payload := resultPayload(i) // mochi keeps the slice until it is written
				if err := publish("results", payload, false, 1); err != nil {
					b.Fatal(err)
				}
				if mode == "deferred" && (i%256 == 255 || i == b.N-1) {
					if err := br.SyncSessions(); err != nil {
						b.Fatal(err)
					}
				}
			}
			select {
			case <-want:
			case <-ctx.Done():
				b.Fatalf("%d of %d received", received.Load(), b.N)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}

func resultPayload(i int) []byte {
	return fmt.Appendf(nil, `{"taskId":"t-%06d","deviceId":"2042253","status":"succeeded","tries":1,"durationMs":21}`, i)
}
