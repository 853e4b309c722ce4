package broker

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestDeliveryToATakenOverConnectionMovesOn: the guard delivers what it kept for a new
// connection in that connection's OnSessionEstablished. A third connection may take the
// session over meanwhile: once it has copied the second's in-flight set and cleared it, a
// message the guard then puts in the second's set would stay there, never sent while the
// broker runs (TestPooledPacketsStayApart exercises this under load). Delivered to a
// connection already taken over, the message goes to the one that took it over.
func TestDeliveryToATakenOverConnectionMovesOn(t *testing.T) {
	const id, topic = "late", "late/results"
	b := startBroker(t, Options{})
	_, oldClient := keptSubscriber(t, b, id, topic)
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

// TestRedeliveredMessageCountedAndSentOnce: a message the guard redelivers counts in
// Info.Inflight until its PUBACK, as a routed one does (mochi does not count a message
// routed to a taken-over connection, and counts the old connection's cleared ones out), and
// one that was waiting for send quota in the old session (OnQosDropped's copy has Expiry -1)
// goes out once and is not left waiting, to be sent again with the next free quota.
func TestRedeliveredMessageCountedAndSentOnce(t *testing.T) {
	const id, topic = "redeliver", "redeliver/results"
	b := startBroker(t, Options{})
	c, _ := connectKept(t, b.Addr(), id, true)
	subscribeMem(t, c, topic)
	cl, ok := b.Server().Clients.Get(id)
	if !ok {
		t.Fatal("client not registered")
	}
	info := &b.Server().Info.Inflight
	base := atomic.LoadInt64(info)
	g := newTakeoverGuard(b.Server(), nil, slog.New(slog.DiscardHandler))
	g.deliver(cl, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   topic, Payload: []byte("once"), Created: time.Now().Unix(), Expiry: -1,
	})
	got, pid, _ := readPublish(t, c)
	if got != "once" {
		t.Fatalf("got %q, want once", got)
	}
	if n := atomic.LoadInt64(info); n != base+1 {
		t.Fatalf("Info.Inflight %d while in flight, want %d", n, base+1)
	}
	if _, waiting := cl.State.Inflight.NextImmediate(); waiting {
		t.Fatal("the message sent is also left waiting for send quota: it would go out again")
	}
	// A copy left waiting goes out at once (the writer, its queue empty, sends what waits):
	// before the answer to a PINGREQ sent now.
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	if typ, _ := c.read(t); typ != packets.Pingresp {
		t.Fatalf("got packet type %d before the PINGRESP: the message went out twice", typ)
	}
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pid})
	eventually(t, "Info.Inflight back once acknowledged", func() bool { return atomic.LoadInt64(info) == base })
}
