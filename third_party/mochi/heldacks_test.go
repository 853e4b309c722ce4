// SPDX-License-Identifier: MIT

package mqtt

// faceagent patch (PUBACK after storing): a client's acknowledgements of the server's
// messages, read between its publishes, leave the acknowledgements of those publishes held.
//
//	go test -race -run TestClientAcknowledgementsKeepAcksHeld github.com/mochi-mqtt/server/v2

import (
	"bytes"
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
