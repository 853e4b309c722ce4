// SPDX-License-Identifier: MIT

package mqtt

// faceagent patch (PUBACK after storing): the acknowledgements of a client's publishes are
// written once an AckWaiter says they are stored, held while more of its packets are read.
//
//	go test -race -run 'TestClientAcknowledgementsKeepAcksHeld|TestHeldAcknowledgements|TestRefusedPublishFlushesHeldAcknowledgements|TestUnstoredPublishIsNotAcknowledged' github.com/mochi-mqtt/server/v2

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// ackWaitCounter counts the waits for storage before held acknowledgements are written.
type ackWaitCounter struct {
	HookBase
	waits atomic.Int32
}

func (w *ackWaitCounter) ID() string                  { return "ack-wait-counter" }
func (w *ackWaitCounter) WaitBeforeAck(*Client) error { w.waits.Add(1); return nil }

// sendTogether writes pks in one write, so that the server reads them as one burst.
func (c *pipePeer) sendTogether(pks ...packets.Packet) {
	c.t.Helper()
	var buf bytes.Buffer
	for _, pk := range pks {
		pk.ProtocolVersion = 5
		if c.version != 0 {
			pk.ProtocolVersion = c.version
		}
		var err error
		switch pk.FixedHeader.Type {
		case packets.Publish:
			err = pk.PublishEncode(&buf)
		case packets.Puback:
			err = pk.PubackEncode(&buf)
		default:
			c.t.Fatalf("sendTogether: %s", packets.PacketNames[pk.FixedHeader.Type])
		}
		if err != nil {
			c.t.Fatal(err)
		}
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write(buf.Bytes()); err != nil {
		c.t.Fatal(err)
	}
}

// A request/response client's burst: its requests (QoS 1 PUBLISHes) interleaved with its
// PUBACKs of the server's earlier messages. The requests' PUBACKs are written in order after
// one wait for storage; a PUBACK that is the last packet read still has the held ones
// written before it is handled, so none waits for the client's next packet. Flushing before
// every PUBACK from the client made one wait per request (3 here, not 1).
func TestClientAcknowledgementsKeepAcksHeld(t *testing.T) {
	w := new(ackWaitCounter)
	s := newPipeServer(t, w)
	c := pipeConnect(t, s, "c", 0)
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "out", Qos: 1}}})
	c.expect(packets.Suback, 1)
	sent := make([]uint16, 3) // messages in flight to the client
	for i := range sent {
		go func() { _ = s.Publish("out", []byte("answer"), false, 1) }()
		body := c.expect(packets.Publish, 0)
		l := int(body[0])<<8 | int(body[1])
		sent[i] = uint16(body[2+l])<<8 | uint16(body[3+l])
	}
	request := func(id uint16) packets.Packet {
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: id,
			TopicName: "in", Payload: []byte("request")}
	}
	puback := func(id uint16) packets.Packet {
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id}
	}

	w.waits.Store(0)
	c.sendTogether(request(10), puback(sent[0]), request(11), puback(sent[1]), request(12))
	for _, id := range []uint16{10, 11, 12} {
		c.expect(packets.Puback, id)
	}
	c.processed()
	if n := w.waits.Load(); n != 1 {
		t.Fatalf("%d waits for storage before the burst's PUBACKs, want 1", n)
	}

	w.waits.Store(0)
	c.sendTogether(request(13), puback(sent[2]))
	c.expect(packets.Puback, 13)
	c.processed()
	if n := w.waits.Load(); n != 1 {
		t.Fatalf("%d waits for storage, want 1", n)
	}
	cl, _ := s.Clients.Get("c")
	if n := cl.State.Inflight.Len(); n != 0 {
		t.Fatalf("%d messages still in flight to the client after its PUBACKs", n)
	}
}

// ackQoS1 is a QoS 1 PUBLISH of the client's on topic under packet id.
func ackQoS1(topic string, id uint16, payload string) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: topic,
		PacketID: id, Payload: []byte(payload)}
}

// An MQTT 3.1.1 client has no Receive Maximum: it may send more QoS 1 PUBLISHes than the
// server's in one burst. The server counts the acknowledgements it has not written against
// that quota and disconnects a client that has none left; upstream wrote each PUBACK before
// reading the next packet, so a 3.1.1 client never ran out. The acknowledgements held while
// more of a burst is buffered (PUBACK after storing) must not run it out either.
func TestHeldAcknowledgementsKeepReceiveQuota(t *testing.T) {
	const receiveMax, n = 8, 40
	s := newQuotaServer(t, func(c *Capabilities) { c.ReceiveMaximum = receiveMax })
	if err := s.AddHook(new(ackWaitCounter), nil); err != nil {
		t.Fatal(err)
	}
	c, _ := connectSession(t, s, "v311-burst", 4, true, 0)
	burst := make([]packets.Packet, 0, n)
	for i := 0; i < n; i++ {
		burst = append(burst, ackQoS1("burst", uint16(i+1), fmt.Sprintf("m-%d", i)))
	}
	c.sendTogether(burst...)
	for i := 0; i < n; i++ {
		c.expect(packets.Puback, uint16(i+1))
	}
}

// A PUBLISH of a burst that the server refuses (here a QoS 1 one under the packet id of a
// QoS 2 flow waiting for its PUBREL: PUBACK 0x91, packet identifier in use) does not
// overtake the acknowledgements held for the PUBLISHes before it, nor leave them held until
// the client sends something else: the client, which waits for them, gets them at once and
// in order.
func TestRefusedPublishFlushesHeldAcknowledgements(t *testing.T) {
	s := newPipeServer(t, new(ackWaitCounter))
	c := pipeConnect(t, s, "publisher", 0)
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2}, TopicName: "results",
		PacketID: 3, Payload: []byte("q2")})
	c.expect(packets.Pubrec, 3)
	// No PUBREL yet: id 3 is in use.
	c.sendTogether(ackQoS1("results", 1, "a"), ackQoS1("results", 2, "b"), ackQoS1("results", 3, "c"))
	for _, want := range []struct {
		id     uint16
		reason byte
	}{{1, 0}, {2, 0}, {3, packets.ErrPacketIdentifierInUse.Code}} {
		body := c.expect(packets.Puback, want.id)
		if reason := append(body, 0)[2]; reason != want.reason {
			t.Fatalf("PUBACK of packet id %d: reason %#x, want %#x", want.id, reason, want.reason)
		}
	}
}

// A client's burst of QoS 1 PUBLISHes in which a later one uses the packet id of a message
// in flight to it: the acknowledgements held for the earlier ones are written before that
// one's, in order, and the message stays in flight (the PUBACK held under the same id is the
// client's, kept apart from it) and is sent again when the session resumes.
func TestHeldAcknowledgementsKeepDisplacedMessage(t *testing.T) {
	s := newPipeServer(t, new(ackWaitCounter))
	bo, _ := connectSession(t, s, "bo", 5, true, 0)
	bo.subscribe("results")
	if err := s.Publish("results", []byte("result-1"), false, 1); err != nil {
		t.Fatal(err)
	}
	payload, id, _ := bo.readPublish() // not acknowledged: in flight
	if payload != "result-1" {
		t.Fatalf("got %q, want result-1", payload)
	}
	bo.sendTogether(ackQoS1("tasks", id+100, "task"), ackQoS1("tasks", id, "task")) // the second reuses the result's id
	bo.expect(packets.Puback, id+100)
	bo.expect(packets.Puback, id)
	_ = bo.conn.Close()

	again, _ := connectSession(t, s, "bo", 5, false, 0)
	if payload, _, _ := again.readPublish(); payload != "result-1" {
		t.Fatalf("the resumed session got %q, want result-1 again", payload)
	}
}

// failingAckWaiter is a storage hook whose messages never reach the disk.
type failingAckWaiter struct{ HookBase }

func (failingAckWaiter) ID() string                  { return "test-failing-ack-waiter" }
func (failingAckWaiter) WaitBeforeAck(*Client) error { return errors.New("disk gone") }

// When the storage behind the acknowledgements fails, the publisher gets no PUBACK but a
// DISCONNECT (0x80), and the acknowledgement does not stay for a resumed session to send.
// Before, a failed wait was not seen: the publisher was acknowledged for a message that was
// not stored.
func TestUnstoredPublishIsNotAcknowledged(t *testing.T) {
	s := newPipeServer(t, new(failingAckWaiter))
	c := pipeConnect(t, s, "pub", 0)
	c.send(ackQoS1("results", 7, "r"))
	body := c.expect(packets.Disconnect, 0)
	if len(body) == 0 || body[0] != packets.ErrUnspecifiedError.Code {
		t.Fatalf("DISCONNECT reason % x, want %x", body, packets.ErrUnspecifiedError.Code)
	}
	if cl, ok := s.Clients.Get("pub"); ok && (cl.State.Inbound.Has(7) || cl.State.Inflight.Has(7)) {
		t.Fatal("the unwritten PUBACK stayed held")
	}
}
