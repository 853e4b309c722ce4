package broker

import (
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// keptSubscriber connects client id with a kept session subscribed to topic and returns
// the connection and the broker's client for it.
func keptSubscriber(t *testing.T, b *Broker, id, topic string) (*memClient, *mqtt.Client) {
	t.Helper()
	c, _ := connectKept(t, b.Addr(), id, true)
	subscribeMem(t, c, topic)
	cl, ok := b.Server().Clients.Get(id)
	if !ok {
		t.Fatal("first connection not registered")
	}
	return c, cl
}

// TestLateHooksOfACopiedMessageRedeliverNothing: a publisher puts a message in a kept
// session's in-flight set, and its hooks (OnQosPublish) run only after a new connection has
// taken the session over (its goroutine descheduled in between, or held up by the session
// store's hook, which runs first). The takeover copied the message to the new connection,
// which was sent it and acknowledged it. The guard, seeing the message routed to a
// connection taken over, delivered it again as a new message (a new packet id, no DUP):
// the check against the new connection's set no longer found it.
func TestLateHooksOfACopiedMessageRedeliverNothing(t *testing.T) {
	const id, topic = "copied", "copied/results"
	b := startBroker(t, Options{})
	first, old := keptSubscriber(t, b, id, topic)
	first.close()
	eventually(t, "the first connection closed", old.Closed)
	if err := b.Server().Publish(topic, []byte("copied"), false, 1); err != nil {
		t.Fatal(err)
	}
	routed, ok := old.State.Inflight.Get(1)
	if !ok || string(routed.Payload) != "copied" {
		t.Fatal("the message is not in the kept session's set")
	}

	next, present := connectKept(t, b.Addr(), id, false)
	if !present {
		t.Fatal("session not resumed")
	}
	got, pid, _ := readPublish(t, next)
	if got != "copied" {
		t.Fatalf("got %q, want copied", got)
	}
	next.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pid})
	cl, ok := b.Server().Clients.Get(id)
	if !ok || cl == old {
		t.Fatal("the new connection is not registered")
	}
	eventually(t, "the message acknowledged", func() bool { return cl.State.Inflight.Len() == 0 })

	// The publisher's hooks, late: mochi calls them after putting the message in flight.
	b.takeover.OnQosPublish(old, routed, routed.Created, 0)
	if err := b.Server().Publish(topic, []byte("after"), false, 1); err != nil {
		t.Fatal(err)
	}
	if got, _, dup := readPublish(t, next); got != "after" {
		t.Fatalf("got %q (DUP %v) after the acknowledged message, want after", got, dup)
	}
}

// TestStaleRouteToASessionStartedCleanIsDropped: a message routed to a kept session's
// connection whose hooks run after a new connection of its client took the session over
// with a clean start belongs to the session the clean start discarded. The guard delivered
// it to the new connection, which never subscribed to its topic (or dropped it, with a
// warning, when the new connection was not yet registered).
func TestStaleRouteToASessionStartedCleanIsDropped(t *testing.T) {
	const id, topic = "cleaned", "cleaned/results"
	b := startBroker(t, Options{})
	_, old := keptSubscriber(t, b, id, topic)
	next, present := connectKept(t, b.Addr(), id, true)
	if present {
		t.Fatal("a clean start resumed the session")
	}
	eventually(t, "the old connection taken over", old.IsTakenOver)
	cl, ok := b.Server().Clients.Get(id)
	if !ok || cl == old {
		t.Fatal("the new connection is not registered")
	}

	// A publisher's stale route: the message lands in the old connection's set after the
	// takeover ended it, and its hooks run then.
	stale := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: topic,
		Payload: []byte("stale"), PacketID: 7, Created: time.Now().Unix()}
	old.State.Inflight.Set(stale)
	b.takeover.OnQosPublish(old, stale, stale.Created, 0)

	// The new connection subscribes elsewhere and is sent a message there: the SUBACK and
	// then that message are the first packets it reads (a delivered stale message would
	// come before either).
	subscribeMem(t, next, "cleaned/other")
	if err := b.Server().Publish("cleaned/other", []byte("marker"), false, 1); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := readPublish(t, next); got != "marker" {
		t.Fatalf("the clean session was sent %q, want only the marker", got)
	}
}
