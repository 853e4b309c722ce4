package broker

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// connectReceiveMax connects the kept session id with Receive Maximum max (MQTT 5).
func connectReceiveMax(t *testing.T, addr, id string, clean bool, max uint16) *memClient {
	t.Helper()
	c, _ := connectKeptMax(t, addr, id, clean, max)
	return c
}

// TestMessageWaitingForSendQuotaStaysInFlight: a message routed to a client that has no
// send quota left (its Receive Maximum reached) waits in its in-flight set; mochi sends it
// when a PUBACK frees quota (sendNextImmediate). mochi v2.7.9 then deleted it from the set:
// its PUBACK found nothing, so the quota it took was never given back (a client with
// Receive Maximum 1 got nothing more), and a session resumed before that PUBACK was not
// sent it again (TestPooledPacketsStayApart lost such messages).
func TestMessageWaitingForSendQuotaStaysInFlight(t *testing.T) {
	const id, topic = "quota", "quota/results"
	b := startBroker(t, Options{})
	c := connectReceiveMax(t, b.Addr(), id, true, 1)
	c.write(t, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    1,
		Filters:     packets.Subscriptions{{Filter: topic, Qos: 1}},
	})
	expectWithin(t, c, packets.Suback, "SUBACK")
	publish := func(msg string) {
		t.Helper()
		if err := b.Server().Publish(topic, []byte(msg), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	ack := func(c *memClient, pid uint16) {
		c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pid})
	}

	publish("one")
	publish("two") // waits for quota
	got, pid, _ := readPublish(t, c)
	if got != "one" {
		t.Fatalf("got %q, want one", got)
	}
	ack(c, pid)
	got, _, _ = readPublish(t, c) // sent as the PUBACK freed quota
	if got != "two" {
		t.Fatalf("got %q, want two", got)
	}
	// Not acknowledged: the resumed session gets it again.
	c.close()
	again := connectReceiveMax(t, b.Addr(), id, false, 1)
	got, pid, dup := readPublish(t, again)
	if got != "two" || !dup {
		t.Fatalf("resumed session got %q (dup %v), want two again", got, dup)
	}
	ack(again, pid)
	publish("three") // the quota "two" took is back
	if got, _, _ := readPublish(t, again); got != "three" {
		t.Fatalf("got %q, want three", got)
	}
}
