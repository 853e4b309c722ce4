package agent

import (
	"context"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
)

// BenchmarkInlineResultPublish: what watching for dropped deliveries (dropWatch) adds to
// the reporter's inline publish of one result, against the same publish unwatched, with
// one connected-style subscriber (an inline subscription) on the results topic.
func BenchmarkInlineResultPublish(b *testing.B) {
	br, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		b.Fatal(err)
	}
	srv := br.Server()
	const topic = "faceagent/gw/results"
	drops := newDropWatch(srv, testMetrics(), topic)
	if err := br.AddHook(drops, nil); err != nil {
		b.Fatal(err)
	}
	if err := br.Start(); err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if err := srv.Subscribe(topic, 1, func(*mqtt.Client, packets.Subscription, packets.Packet) {}); err != nil {
		b.Fatal(err)
	}
	serving := make(chan struct{})
	close(serving)
	payload := resultJSON(outbox.Result{TaskID: "t-1", DeviceID: "2042253", MessageID: "AddPerson-951-1494527067538440192", Status: outbox.Succeeded, Tries: 1})
	for _, c := range []struct {
		name string
		pub  inlinePublisher
	}{{"unwatched", inlinePublisher{srv: srv, serving: serving}}, {"watched", inlinePublisher{srv: srv, serving: serving, drops: drops}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if err := c.pub.Publish(context.Background(), topic, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
