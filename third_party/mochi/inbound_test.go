// SPDX-License-Identifier: MIT

package mqtt

// faceagent patch (packet-id spaces): tests of Inbound and of the server keeping a client's
// own QoS 1/2 publishes apart from the messages it sends that client.
//
//	go test -race -run 'TestInbound|TestOwnPublish' github.com/mochi-mqtt/server/v2

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

func ackPacket(typ byte, id uint16) *packets.Packet {
	return &packets.Packet{FixedHeader: packets.FixedHeader{Type: typ}, PacketID: id}
}

func TestInboundFlows(t *testing.T) {
	in := NewInbound()
	if !in.put(ackPacket(packets.Puback, 1)) || !in.put(ackPacket(packets.Pubrec, 2)) {
		t.Fatal("a new flow does not report that it started")
	}
	if in.put(ackPacket(packets.Puback, 1)) {
		t.Fatal("a flow already there reports that it started (it would be charged twice)")
	}
	if in.state(1) != inboundPuback || in.state(2) != inboundQos2 || in.state(3) != inboundNone {
		t.Fatalf("states %d %d %d", in.state(1), in.state(2), in.state(3))
	}
	var dst packets.Packet
	if !in.pending(2, &dst) || dst.FixedHeader.Type != packets.Pubrec || dst.PacketID != 2 {
		t.Fatalf("pending(2) = %v", dst)
	}
	if !in.written(1) || in.Has(1) {
		t.Fatal("a written PUBACK must end its charged flow")
	}
	if in.written(2) || !in.Has(2) || in.pending(2, &dst) {
		t.Fatal("a written PUBREC must leave its flow waiting for PUBREL, with nothing to write")
	}
	if in.drop(2) {
		t.Fatal("drop ended a flow whose PUBREC is written")
	}
	if !in.rearm(ackPacket(packets.Pubrec, 2)) || !in.pending(2, &dst) {
		t.Fatal("a QoS 2 publish sent again must have its PUBREC written again")
	}
	if in.rearm(ackPacket(packets.Pubrec, 2)) {
		t.Fatal("rearm with a PUBREC still pending")
	}
	if in.drop(2) || !in.Has(2) || in.pending(2, &dst) {
		t.Fatal("a dropped PUBREC written before must leave its flow waiting for PUBREL")
	}
	in.put(ackPacket(packets.Pubrec, 3))
	in.put(ackPacket(packets.Puback, 4))
	c := in.carry()
	if c.Len() != 2 || !c.Has(2) || !c.Has(3) || c.Has(4) {
		t.Fatalf("carried %d flows, want the QoS 2 ones (2, 3)", c.Len())
	}
	if c.pending(3, &dst) {
		t.Fatal("a carried flow has a PUBREC to write: the new connection would send it unasked")
	}
	if c.end(2) || c.Has(2) {
		t.Fatal("a carried flow was charged to the new connection's receive quota")
	}
	if !in.end(2) || !in.drop(3) || !in.written(4) || in.Len() != 0 {
		t.Fatalf("the flows did not end, %d left", in.Len())
	}
}

// allowAll lets every client in and everything through.
type allowAll struct{ HookBase }

func (allowAll) ID() string { return "allow-all" }
func (allowAll) Provides(b byte) bool {
	return b == OnConnectAuthenticate || b == OnACLCheck
}
func (allowAll) OnConnectAuthenticate(*Client, packets.Packet) bool { return true }
func (allowAll) OnACLCheck(*Client, string, bool) bool              { return true }

// qosRecorder records the packet types the OnQos hooks see.
type qosRecorder struct {
	HookBase
	mu  sync.Mutex
	got []string
}

func (r *qosRecorder) ID() string { return "qos-recorder" }
func (r *qosRecorder) Provides(b byte) bool {
	return b == OnQosPublish || b == OnQosComplete || b == OnQosDropped
}
func (r *qosRecorder) record(what string, pk packets.Packet) {
	if pk.FixedHeader.Type != packets.Publish && pk.FixedHeader.Type != packets.Pubrel &&
		pk.FixedHeader.Type != packets.Puback && pk.FixedHeader.Type != packets.Pubcomp &&
		pk.FixedHeader.Type != packets.Pubrec {
		what += "?"
	}
	r.mu.Lock()
	r.got = append(r.got, what+" "+packets.PacketNames[pk.FixedHeader.Type])
	r.mu.Unlock()
}
func (r *qosRecorder) OnQosPublish(_ *Client, pk packets.Packet, _ int64, _ int) {
	r.record("publish", pk)
}
func (r *qosRecorder) OnQosComplete(_ *Client, pk packets.Packet) { r.record("complete", pk) }
func (r *qosRecorder) OnQosDropped(_ *Client, pk packets.Packet)  { r.record("dropped", pk) }

// pipePeer is an MQTT 5 client on one end of a net.Pipe whose other end the server serves.
type pipePeer struct {
	t       *testing.T
	conn    net.Conn
	r       *bufio.Reader
	version byte // the protocol version of what send writes: 5 unless set
}

func pipeConnect(t *testing.T, s *Server, id string, receiveMax uint16) *pipePeer {
	t.Helper()
	srv, cli := net.Pipe()
	go func() { _ = s.EstablishConnection("pipe", srv) }()
	c := &pipePeer{t: t, conn: cli, r: bufio.NewReader(cli)}
	t.Cleanup(func() { _ = cli.Close() })
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: id},
		Properties: packets.Properties{ReceiveMaximum: receiveMax}})
	if body := c.expect(packets.Connack, 0); len(body) < 2 || body[1] != 0 {
		t.Fatalf("CONNACK % x, want success", body)
	}
	return c
}

func (c *pipePeer) send(pk packets.Packet) {
	c.t.Helper()
	pk.ProtocolVersion = 5
	if c.version != 0 {
		pk.ProtocolVersion = c.version
	}
	var buf bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(&buf)
	case packets.Subscribe:
		err = pk.SubscribeEncode(&buf)
	case packets.Unsubscribe:
		err = pk.UnsubscribeEncode(&buf)
	case packets.Publish:
		err = pk.PublishEncode(&buf)
	case packets.Puback:
		err = pk.PubackEncode(&buf)
	case packets.Pubrec:
		err = pk.PubrecEncode(&buf)
	case packets.Pubrel:
		err = pk.PubrelEncode(&buf)
	case packets.Pubcomp:
		err = pk.PubcompEncode(&buf)
	case packets.Pingreq:
		err = pk.PingreqEncode(&buf)
	}
	if err == nil {
		_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, err = c.conn.Write(buf.Bytes())
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// expect reads the next packet, which must be of type typ (and for id, if not 0), and
// returns its body.
func (c *pipePeer) expect(typ byte, id uint16) []byte {
	c.t.Helper()
	first, body := c.next()
	if first>>4 != typ {
		c.t.Fatalf("got %s (% x), want %s", packets.PacketNames[first>>4], body, packets.PacketNames[typ])
	}
	if id != 0 {
		if typ == packets.Publish {
			l := int(body[0])<<8 | int(body[1])
			body = body[2+l:]
		}
		if got := uint16(body[0])<<8 | uint16(body[1]); got != id {
			c.t.Fatalf("%s for packet id %d, want %d", packets.PacketNames[typ], got, id)
		}
	}
	return body
}

// next reads the next packet within 5 s: its first byte and its body.
func (c *pipePeer) next() (byte, []byte) {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	first, err := c.r.ReadByte()
	if err != nil {
		c.t.Fatal(err)
	}
	n, shift := 0, 0
	for {
		d, err := c.r.ReadByte()
		if err != nil {
			c.t.Fatal(err)
		}
		n |= int(d&0x7f) << shift
		if shift += 7; d&0x80 == 0 {
			break
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		c.t.Fatal(err)
	}
	return first, body
}

// processed returns once the server handled everything sent before (a PINGREQ's answer).
func (c *pipePeer) processed() {
	c.t.Helper()
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	c.expect(packets.Pingresp, 0)
}

func newPipeServer(t *testing.T, hooks ...Hook) *Server {
	t.Helper()
	s := New(&Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for _, h := range append([]Hook{new(allowAll)}, hooks...) {
		if err := s.AddHook(h, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// A client's QoS 2 publish under the packet id of a QoS 2 message the server sends it: both
// flows run to the end under the one id, each taking and giving back only its own quota
// (the client's publish the receive quota, the server's message the send quota), and the
// OnQos hooks see only the server's message. Upstream kept both in the in-flight set: the
// client's PUBLISH displaced the server's message, its PUBREC stage took receive quota, its
// PUBREL gave back send quota, and the hooks saw the server's PUBREC and the client's PUBREL.
func TestOwnPublishAndSentMessageShareAnID(t *testing.T) {
	rec := new(qosRecorder)
	s := newPipeServer(t, rec)
	const receiveMax = 10
	c := pipeConnect(t, s, "c", receiveMax)
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "out", Qos: 2}}})
	c.expect(packets.Suback, 1)
	cl, _ := s.Clients.Get("c")
	recvMax := atomic.LoadInt32(&cl.State.Inflight.receiveQuota)
	quotas := func(what string, recv, send int32) {
		t.Helper()
		c.processed()
		if r, s := atomic.LoadInt32(&cl.State.Inflight.receiveQuota), atomic.LoadInt32(&cl.State.Inflight.sendQuota); r != recv || s != send {
			t.Fatalf("%s: receive quota %d, send quota %d; want %d, %d", what, r, s, recv, send)
		}
	}

	go func() { _ = s.Publish("out", []byte("from the server"), false, 2) }()
	body := c.expect(packets.Publish, 0)
	l := int(body[0])<<8 | int(body[1])
	id := uint16(body[2+l])<<8 | uint16(body[3+l])
	quotas("server's message sent", recvMax, receiveMax-1)

	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2}, PacketID: id,
		TopicName: "in", Payload: []byte("from the client")})
	c.expect(packets.Pubrec, id)
	quotas("client's publish received", recvMax-1, receiveMax-1)
	if typ, ok := cl.State.Inflight.TypeOf(id); !ok || typ != packets.Publish || !cl.State.Inbound.Has(id) {
		t.Fatalf("in flight under %d: %d, %v; inbound: %v", id, typ, ok, cl.State.Inbound.Has(id))
	}

	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: id}) // the server's message
	c.expect(packets.Pubrel, id)
	quotas("server's message at PUBREL", recvMax-1, receiveMax-1)

	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel, Qos: 1}, PacketID: id}) // the client's publish
	if body := c.expect(packets.Pubcomp, id); len(body) > 2 && body[2] != 0 {
		t.Fatalf("PUBCOMP reason %#x", body[2])
	}
	quotas("client's publish complete", recvMax, receiveMax-1)
	if cl.State.Inbound.Len() != 0 || cl.State.Inflight.Len() != 1 {
		t.Fatalf("inbound %d, in flight %d; want 0, 1", cl.State.Inbound.Len(), cl.State.Inflight.Len())
	}

	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubcomp}, PacketID: id}) // the server's message
	quotas("server's message complete", recvMax, receiveMax)
	if cl.State.Inflight.Len() != 0 {
		t.Fatalf("%d in flight after PUBCOMP", cl.State.Inflight.Len())
	}
	if n := atomic.LoadInt64(&s.Info.Inflight); n != 0 {
		t.Fatalf("Info.Inflight %d", n)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []string{"publish Publish", "complete Pubcomp"}
	if len(rec.got) != len(want) || rec.got[0] != want[0] || rec.got[1] != want[1] {
		t.Fatalf("OnQos hooks saw %q, want %q", rec.got, want)
	}
}

// A client's SUBSCRIBE under the packet id of a message in flight to it is answered (the
// id is the client's, free on its side); one under the id of its own QoS 2 publish waiting
// for PUBREL is refused (0x91) [MQTT-2.2.1-3]. Upstream checked the in-flight set, and
// refused the first.
func TestOwnSubscribeIDs(t *testing.T) {
	s := newPipeServer(t)
	c := pipeConnect(t, s, "c", 0)
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "out", Qos: 1}}})
	c.expect(packets.Suback, 1)
	go func() { _ = s.Publish("out", []byte("m"), false, 1) }()
	body := c.expect(packets.Publish, 0)
	l := int(body[0])<<8 | int(body[1])
	id := uint16(body[2+l])<<8 | uint16(body[3+l]) // not acknowledged

	subscribe := func(id uint16) byte {
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: id,
			Filters: packets.Subscriptions{{Filter: "other", Qos: 1}}})
		body := c.expect(packets.Suback, id)
		return body[len(body)-1]
	}
	if code := subscribe(id); code != 1 {
		t.Fatalf("SUBSCRIBE under the id of a message in flight to the client: reason %#x, want 1", code)
	}
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2}, PacketID: 9,
		TopicName: "in", Payload: []byte("x")})
	c.expect(packets.Pubrec, 9)
	if code := subscribe(9); code != packets.ErrPacketIdentifierInUse.Code {
		t.Fatalf("SUBSCRIBE under the id of the client's QoS 2 flow: reason %#x, want 0x91", code)
	}
}

// pubrel sends the PUBREL of the client's QoS 2 publish id.
func (c *pipePeer) pubrel(id uint16) {
	c.t.Helper()
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel, Qos: 1}, PacketID: id})
}

// ackReason reads an acknowledgement of type typ for packet id and returns its reason code
// (0 when the short form leaves it out).
func (c *pipePeer) ackReason(typ byte, id uint16) byte {
	c.t.Helper()
	if body := c.expect(typ, id); len(body) > 2 {
		return body[2]
	}
	return 0
}

// qos2Task is a QoS 2 PUBLISH of a task under packet id.
func qos2Task(id uint16, dup bool) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2, Dup: dup},
		TopicName: "tasks", PacketID: id, Payload: []byte("task")}
}

// taskWorker connects a clean session subscribed to "tasks", to count what tasks deliver.
func taskWorker(t *testing.T, s *Server) *pipePeer {
	t.Helper()
	w, _ := connectSession(t, s, "worker", 5, true, 0)
	w.subscribe("tasks")
	return w
}

// expectOnly reads the worker's next message, which must be want, acknowledges it, then
// checks that nothing came between it and a marker published after it.
func expectOnly(t *testing.T, s *Server, w *pipePeer, want string) {
	t.Helper()
	for _, want := range []string{want, "marker"} {
		got, id, _ := w.readPublish()
		if got != want {
			t.Fatalf("worker got %q, want %q", got, want)
		}
		w.puback(id)
		if want != "marker" {
			if err := s.Publish("tasks", []byte("marker"), false, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A client leaves without acknowledging a message sent to it, after sending a QoS 2
// PUBLISH under the same packet id (each side numbers its packets on its own), and
// resumes: the message is sent again, and the client's QoS 2 flow, which its PUBREC left
// waiting for PUBREL, goes with the session (MQTT 5 section 4.1): the PUBREL on the new
// connection completes it. With both directions in one set keyed by packet id, the PUBREC
// took the message's place.
func TestInboundQoS2FlowGoesWithTheSession(t *testing.T) {
	s := newPipeServer(t)
	w := taskWorker(t, s)
	bo, _ := connectSession(t, s, "bo", 5, true, 0)
	bo.subscribe("results")
	if err := s.Publish("results", []byte("result-1"), false, 1); err != nil {
		t.Fatal(err)
	}
	_, id, _ := bo.readPublish()
	bo.send(qos2Task(id, false))
	bo.expect(packets.Pubrec, id)
	expectOnly(t, s, w, "task")
	_ = bo.conn.Close()

	again, _ := connectSession(t, s, "bo", 5, false, 0)
	if payload, resent, dup := again.readPublish(); payload != "result-1" || resent != id || !dup {
		t.Fatalf("resumed session got %q under %d (DUP %v), want result-1 again under %d with DUP", payload, resent, dup, id)
	}
	again.pubrel(id)
	if code := again.ackReason(packets.Pubcomp, id); code != 0 {
		t.Fatalf("PUBCOMP reason %#x, want 0: the task's flow did not go with the session", code)
	}
}

// A QoS 2 PUBLISH sent again with DUP on a resumed session, whose first copy the server
// received (its PUBREC lost with the connection), is acknowledged with a PUBREC of success
// and not delivered again [MQTT-4.3.3-10]: mochi answered 0x91 (packet identifier in use),
// which tells the publisher the message failed although it was delivered.
func TestDuplicateQoS2PublishOnResume(t *testing.T) {
	s := newPipeServer(t)
	w := taskWorker(t, s)
	bo, _ := connectSession(t, s, "bo", 5, true, 0)
	bo.send(qos2Task(5, false))
	bo.expect(packets.Pubrec, 5)
	_ = bo.conn.Close()
	expectOnly(t, s, w, "task")

	again, _ := connectSession(t, s, "bo", 5, false, 0)
	again.send(qos2Task(5, true))
	if code := again.ackReason(packets.Pubrec, 5); code != 0 {
		t.Fatalf("PUBREC of the duplicate: reason %#x, want 0", code)
	}
	again.pubrel(5)
	if code := again.ackReason(packets.Pubcomp, 5); code != 0 {
		t.Fatalf("PUBCOMP reason %#x, want 0", code)
	}
	if err := s.Publish("tasks", []byte("marker"), false, 1); err != nil {
		t.Fatal(err)
	}
	if got, id, _ := w.readPublish(); got != "marker" {
		t.Fatalf("worker got %q, want the marker: the duplicate was delivered again", got)
	} else {
		w.puback(id)
	}
	// The id is free again: a new QoS 2 message under it is a new message.
	again.send(qos2Task(5, false))
	again.expect(packets.Pubrec, 5)
	expectOnly(t, s, w, "task")
}

// sessionWithResults connects the kept session "back-office" subscribed to "results", routes
// it n results and reads them without acknowledging any: their packet ids, in order.
func sessionWithResults(t *testing.T, s *Server, n int) (*pipePeer, []uint16) {
	t.Helper()
	c, _ := connectSession(t, s, "back-office", 5, true, 0)
	c.subscribe("results")
	for i := 0; i < n; i++ {
		if err := s.Publish("results", []byte(fmt.Sprint(i)), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	ids := make([]uint16, 0, n)
	for i := 0; i < n; i++ {
		payload, id, _ := c.readPublish()
		if payload != fmt.Sprint(i) {
			t.Fatalf("result %d: got %q", i, payload)
		}
		ids = append(ids, id)
	}
	return c, ids
}

// resumeWithResults resumes "back-office" and reads the n results sent again.
func resumeWithResults(t *testing.T, s *Server, n int) *pipePeer {
	t.Helper()
	c, _ := connectSession(t, s, "back-office", 5, false, 0)
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		payload, _, _ := c.readPublish()
		seen[payload] = true
	}
	for i := 0; i < n; i++ {
		if !seen[fmt.Sprint(i)] {
			t.Fatalf("result %d not sent again to the resumed session (got %v)", i, seen)
		}
	}
	return c
}

// A back office publishing tasks under the packet ids of results in flight to it (both
// sides number from 1) still gets every result again when it resumes its session without
// having acknowledged them: its publishes' flows are its own (Inbound), apart from the
// results (Inflight). Upstream kept both in one set, and each PUBACK written for a task
// took a result's place.
func TestOwnPublishKeepsMessagesInFlight(t *testing.T) {
	const n = 6
	s := newPipeServer(t)
	c, ids := sessionWithResults(t, s, n)
	for _, id := range ids[:n-1] {
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: id,
			TopicName: "tasks", Payload: []byte("t")})
		c.expect(packets.Puback, id)
	}
	cl, _ := s.Clients.Get("back-office")
	if got := cl.State.Inflight.Len(); got != n {
		t.Fatalf("%d results in flight after the back office's %d publishes, want %d", got, n-1, n)
	}
	_ = c.conn.Close() // gone without acknowledging anything
	resumeWithResults(t, s, n)
}

// A back office resuming its session with results waiting, from a fresh client whose
// packet ids start at 1 again, may subscribe again: upstream answered SUBACK 0x91 (packet
// identifier in use) for the id of a waiting result, looking the client's id up among the
// server's.
func TestResubscribeOnResume(t *testing.T) {
	const n = 3
	s := newPipeServer(t)
	c, ids := sessionWithResults(t, s, n)
	_ = c.conn.Close() // gone without acknowledging them
	again := resumeWithResults(t, s, n)
	again.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: ids[0],
		Filters: packets.Subscriptions{{Filter: "results", Qos: 1}}})
	if body := again.expect(packets.Suback, ids[0]); body[len(body)-1] != 1 {
		t.Fatalf("SUBACK reason %#x, want 1 (granted QoS 1)", body[len(body)-1])
	}
	// The SUBSCRIBE's id is the client's: it never touches the results in flight to it.
	cl, _ := s.Clients.Get("back-office")
	if got := cl.State.Inflight.Len(); got != n {
		t.Fatalf("%d results in flight after the SUBSCRIBE (none acknowledged), want %d", got, n)
	}
}
