package broker

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// A client with two subscriptions matching a topic gets its message once, at the higher of
// their QoS [MQTT-3.3.4-2], also when a shared subscription matches the topic between the
// two (routing holds a lone client outside the maps until a second subscriber, or the
// shared subscription's maps, come).
func TestRoutingMergesAroundSharedSubscription(t *testing.T) {
	b := startBroker(t, Options{})
	sub := func(id string, filters packets.Subscriptions) *wireClient {
		c, err := dialWire(b.Addr(), id, true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.close)
		if err := c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1, Filters: filters}); err != nil {
			t.Fatal(err)
		}
		if err := c.expect(packets.Suback); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Gathered in this order for topic t/x: t/x (QoS 0), the share, then t/# (QoS 1).
	x := sub("x", packets.Subscriptions{{Filter: "t/x", Qos: 0}, {Filter: "t/#", Qos: 1}})
	sub("y", packets.Subscriptions{{Filter: "$share/g/t/x", Qos: 1}})
	if err := b.Server().Publish("t/x", []byte("m"), false, 1); err != nil {
		t.Fatal(err)
	}
	first, _, err := x.readWithHeader()
	if err != nil || first>>4 != packets.Publish {
		t.Fatalf("got %d, %v; want a PUBLISH", first>>4, err)
	}
	if qos := first >> 1 & 3; qos != 1 {
		t.Fatalf("delivered with QoS %d, want 1 (the higher of the two subscriptions)", qos)
	}
}
