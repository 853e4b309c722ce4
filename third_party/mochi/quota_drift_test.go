// faceagent patch (counter drift): tests of the send quota on the paths that move a message
// in flight between sent and waiting, or end it.

package mqtt

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// newQuotaServer returns a server with caps changed by set, letting everyone in.
func newQuotaServer(t *testing.T, set func(*Capabilities)) *Server {
	t.Helper()
	c := NewDefaultServerCapabilities()
	set(c)
	s := New(&Options{InlineClient: true, Capabilities: c, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := s.AddHook(new(allowAll), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// publishID returns the packet id of the PUBLISH whose body is body.
func publishID(body []byte) uint16 {
	l := int(body[0])<<8 | int(body[1])
	return uint16(body[2+l])<<8 | uint16(body[3+l])
}

// A QoS 1 message held in the session because the client's queue of pending writes was
// full takes one unit of send quota, not two: with Receive Maximum 4, three messages
// published at once all arrive before any PUBACK, and once they are acknowledged the quota
// is whole again, round after round. Before, putInflight took one and the writer's drain
// (takeNextInto) another, and the PUBACK gave back one: the third message waited for a
// PUBACK, and after a few rounds the client got nothing more.
func TestHeldMessageTakesOneSendQuota(t *testing.T) {
	s := newQuotaServer(t, func(c *Capabilities) {
		c.MaximumClientWritesPendingBytes = 1 // every message beyond the first one queued is held
	})
	const receiveMax = 4
	c := pipeConnect(t, s, "c", receiveMax)
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "out", Qos: 1}}})
	c.expect(packets.Suback, 1)
	cl, _ := s.Clients.Get("c")
	for round := 0; round < 4; round++ {
		for i := 0; i < 3; i++ {
			if err := s.Publish("out", []byte("m"), false, 1); err != nil {
				t.Fatal(err)
			}
		}
		ids := make([]uint16, 0, 3)
		for i := 0; i < 3; i++ {
			ids = append(ids, publishID(c.expect(packets.Publish, 0)))
		}
		for _, id := range ids {
			c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id})
		}
		c.processed()
		if q := atomic.LoadInt32(&cl.State.Inflight.sendQuota); q != receiveMax || cl.State.Inflight.Len() != 0 {
			t.Fatalf("round %d: send quota %d, in flight %d; want %d, 0", round, q, cl.State.Inflight.Len(), receiveMax)
		}
	}
}

// A PUBREC with an error code ends the QoS 2 message's flow and gives back its unit of
// send quota (MQTT 5, 4.9: "each time a PUBREC packet is received with a Return Code of
// 0x80 or greater"). Before, the message left the in-flight set with its unit: a client
// that refused Receive Maximum QoS 2 messages was sent nothing more.
func TestRefusedPubrecGivesBackSendQuota(t *testing.T) {
	s := newQuotaServer(t, func(*Capabilities) {})
	const receiveMax = 2
	c := pipeConnect(t, s, "c", receiveMax)
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "out", Qos: 2}}})
	c.expect(packets.Suback, 1)
	cl, _ := s.Clients.Get("c")
	for i := 0; i < 2*receiveMax+1; i++ {
		go func() { _ = s.Publish("out", []byte("m"), false, 2) }()
		id := publishID(c.expect(packets.Publish, 0))
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: id,
			ReasonCode: packets.ErrUnspecifiedError.Code})
		c.processed()
	}
	if q := atomic.LoadInt32(&cl.State.Inflight.sendQuota); q != receiveMax || cl.State.Inflight.Len() != 0 {
		t.Fatalf("send quota %d, in flight %d; want %d, 0", q, cl.State.Inflight.Len(), receiveMax)
	}
	if n := atomic.LoadInt64(&s.Info.Inflight); n != 0 {
		t.Fatalf("Info.Inflight %d, want 0", n)
	}
}

// A message sent to a connected client and expired before its PUBACK
// (clearExpiredInflights) gives back its unit of send quota: the PUBACK that comes later
// finds nothing to give back. Before, each such expiry cost the connection a unit of its
// Receive Maximum for good.
func TestExpiredInflightGivesBackSendQuota(t *testing.T) {
	s := newQuotaServer(t, func(c *Capabilities) { c.MaximumMessageExpiryInterval = 60 })
	const receiveMax = 2
	c := pipeConnect(t, s, "c", receiveMax)
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "out", Qos: 1}}})
	c.expect(packets.Suback, 1)
	cl, _ := s.Clients.Get("c")
	for i := 0; i < 2*receiveMax+1; i++ {
		go func() { _ = s.Publish("out", []byte("m"), false, 1) }()
		id := publishID(c.expect(packets.Publish, 0))
		s.clearExpiredInflights(time.Now().Unix() + 3600)                                            // past the maximum expiry
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id}) // too late
		c.processed()
	}
	if q := atomic.LoadInt32(&cl.State.Inflight.sendQuota); q != receiveMax || cl.State.Inflight.Len() != 0 {
		t.Fatalf("send quota %d, in flight %d; want %d, 0", q, cl.State.Inflight.Len(), receiveMax)
	}
}

// qosPublishGate blocks the routing of the next message put in flight (OnQosPublish) once
// armed, until released.
type qosPublishGate struct {
	HookBase
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (*qosPublishGate) ID() string           { return "qos-publish-gate" }
func (*qosPublishGate) Provides(b byte) bool { return b == OnQosPublish }
func (g *qosPublishGate) OnQosPublish(*Client, packets.Packet, int64, int) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
}

// A message routed while the client's PUBACK for the only message in flight is handled
// (Receive Maximum 1) is sent: whether it waits for send quota and the taking of that quota
// are one step (Inflight.admit). Before, the publisher read the quota (0), the PUBACK gave
// it back, the publisher took it and then left the message waiting as if there had been
// none: no quota and nothing in flight, the client was sent nothing more on that
// connection.
func TestMessageRoutedDuringPubackIsSent(t *testing.T) {
	gate := &qosPublishGate{entered: make(chan struct{}), release: make(chan struct{})}
	s := newQuotaServer(t, func(*Capabilities) {})
	if err := s.AddHook(gate, nil); err != nil {
		t.Fatal(err)
	}
	c := pipeConnect(t, s, "c", 1)
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "out", Qos: 1}}})
	c.expect(packets.Suback, 1)
	go func() { _ = s.Publish("out", []byte("first"), false, 1) }()
	first := publishID(c.expect(packets.Publish, 0))

	gate.armed.Store(true)
	published := make(chan struct{})
	go func() { defer close(published); _ = s.Publish("out", []byte("second"), false, 1) }()
	<-gate.entered // the second message is being put in flight
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: first})
	waitFor(t, "the PUBACK handled", func() bool {
		cl, _ := s.Clients.Get("c")
		return !cl.State.Inflight.Has(first)
	})
	close(gate.release)
	<-published
	body := c.expect(packets.Publish, 0)
	if l := int(body[0])<<8 | int(body[1]); string(body[4+l:]) != "second" && !bytes.HasSuffix(body, []byte("second")) {
		t.Fatalf("got % x, want the second message", body)
	}
}

// A packet written on another goroutine (the reader sending a message that waited for
// send quota) while the writer's queue holds only the wake-up for held messages
// (writerKick) is buffered behind it; the writer, taking the wake-up and finding its queue
// empty, sends it. Before, the wake-up wrote nothing and flushed nothing: the message sat
// in the write buffer until the next packet to that client (a PINGRESP, up to a keepalive
// later); TestHeldMessageTakesOneSendQuota timed out once in about a dozen runs.
func TestBufferedWriteBehindWakeUpIsFlushed(t *testing.T) {
	s := newQuotaServer(t, func(*Capabilities) {})
	near, far := net.Pipe()
	t.Cleanup(func() { _ = near.Close(); _ = far.Close() })
	cl := s.NewClient(near, "t", "k", false)
	cl.Properties.ProtocolVersion = 5
	cl.State.outbound <- writerKick
	atomic.AddInt32(&cl.State.outboundQty, 1)
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "out", Payload: []byte("m")}
	if err := cl.WritePacket(pk); err != nil { // buffered: the queue is not empty
		t.Fatal(err)
	}
	go cl.WriteLoop()
	t.Cleanup(func() { cl.Stop(nil) })
	if got := readPublish(t, far, bufio.NewReader(far)); string(got.Payload) != "m" {
		t.Fatalf("got %q, want m", got.Payload)
	}
}
