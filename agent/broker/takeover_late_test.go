package broker

import (
	"log/slog"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestDeliveryToATakenOverConnectionMovesOn: the guard delivers what it kept for a new
// connection in that connection's OnSessionEstablished. A third connection may take the
// session over meanwhile: once it has copied the second's in-flight set and cleared it, a
// message the guard then puts in the second's set stays there, never sent while the broker
// runs (TestPooledPacketsStayApart lost results this way, the guard logging that they wait
// for the next session). Delivered to a connection already taken over, the message goes to
// the one that took it over.
func TestDeliveryToATakenOverConnectionMovesOn(t *testing.T) {
	const id, topic = "late", "late/results"
	b := startBroker(t, Options{})
	old, _ := connectKept(t, b.Addr(), id, true)
	subscribeMem(t, old, topic)
	oldClient, ok := b.Server().Clients.Get(id)
	if !ok {
		t.Fatal("first connection not registered")
	}
	next, present := connectKept(t, b.Addr(), id, false)
	if !present {
		t.Fatal("session not resumed")
	}
	eventually(t, "the first connection taken over", oldClient.IsTakenOver)

	// The first connection's late delivery, as its OnSessionEstablished would make it.
	g := newTakeoverGuard(b.Server(), nil, slog.New(slog.DiscardHandler))
	g.deliver(oldClient, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   topic, Payload: []byte("kept"), Created: time.Now().Unix(),
	})
	if got, _, _ := readPublish(t, next); got != "kept" {
		t.Fatalf("the connection that took over got %q, want kept", got)
	}
}
