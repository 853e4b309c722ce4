package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/report"
)

// waitFor waits for cond, checked again on every poke of ev.
func waitFor(t *testing.T, what string, cond func() bool, ev <-chan struct{}) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-ev:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// rawSubscriber is an MQTT 3.1.1 client on a bare TCP connection, so a test decides when
// it reads: a subscriber that stops reading fills its queue in the broker.
type rawSubscriber struct {
	conn net.Conn
	r    *bufio.Reader
}

// dialRawSubscriber connects clientID with a clean session and subscribes it to filter
// with QoS 1.
func dialRawSubscriber(t *testing.T, addr, clientID, filter string) *rawSubscriber {
	t.Helper()
	return connectRawSubscriber(t, addr, packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, ClientIdentifier: clientID}, filter)
}

// connectRawSubscriber connects with connect on a new connection (closed when t ends) and
// subscribes to filter with QoS 1.
func connectRawSubscriber(t *testing.T, addr string, connect packets.ConnectParams, filter string) *rawSubscriber {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.(*net.TCPConn).SetReadBuffer(4096) // fill up sooner
	s := &rawSubscriber{conn: conn, r: bufio.NewReaderSize(conn, 512)}
	s.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4, Connect: connect})
	if pk := s.read(t); pk.FixedHeader.Type != packets.Connack || pk.ReasonCode != 0 {
		t.Fatalf("connect: %+v", pk)
	}
	s.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: 4,
		PacketID: 1, Filters: packets.Subscriptions{{Filter: filter, Qos: 1}}})
	if pk := s.read(t); pk.FixedHeader.Type != packets.Suback {
		t.Fatalf("subscribe: %+v", pk)
	}
	return s
}

func (s *rawSubscriber) write(t *testing.T, pk packets.Packet) {
	var buf bytes.Buffer
	err := brokertest.EncodeClientPacket(&buf, pk)
	if err == nil {
		_, err = s.conn.Write(buf.Bytes())
	}
	if err != nil {
		t.Errorf("raw subscriber: writing %v: %v", pk.FixedHeader.Type, err)
	}
}

func (s *rawSubscriber) read(t *testing.T) packets.Packet {
	_ = s.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	hb, err := s.r.ReadByte()
	var pk packets.Packet
	if err == nil {
		err = pk.FixedHeader.Decode(hb)
	}
	var n int
	if err == nil {
		n, _, err = packets.DecodeLength(s.r)
	}
	body := make([]byte, n)
	if err == nil {
		_, err = io.ReadFull(s.r, body)
	}
	pk.ProtocolVersion = 4
	if err == nil {
		switch pk.FixedHeader.Type {
		case packets.Publish:
			err = pk.PublishDecode(body)
		case packets.Connack:
			if len(body) == 2 {
				pk.ReasonCode = body[1]
			}
		}
	}
	if err != nil {
		t.Fatalf("raw subscriber: %v", err)
	}
	return pk
}

// With the embedded broker a task message whose deadletters do not fit in the backlog
// is not acknowledged: MQTT5 gets PUBACK 0x83 (send it again), MQTT 3.1.1 no PUBACK and a
// disconnect. Messages without refused tasks are taken meanwhile; once there is room the
// same message is taken and its deadletter delivered.
func TestEmbeddedIntakeRefusesOverTheDeadLetterBound(t *testing.T) {
	cfg, err := config.Parse("f.toml", []byte(fmt.Sprintf("[agent]\ngateway_id = \"gw-f\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[journal]\nsync = \"none\"\n[[devices]]\nid = \"f1\"\n", t.TempDir())), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, a, stop := startAgentFull(t, cfg)
	setBound := func(n int) {
		a.dead.Backlog().SetBounds(n, report.MaxDeadLetterBytes)
	}
	setBound(0)
	bo := connectBackOffice(t, addr, "gw-f")
	bad := []byte(`{"taskId":"f-bad","deviceId":"nope","op":"AddPerson","person":{"id":"1"}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := bo.c.Publish(ctx, &paho.Publish{Topic: "faceagent/gw-f/tasks", QoS: 1, Payload: bad})
	if err == nil || resp == nil || resp.ReasonCode != packets.ErrImplementationSpecificError.Code {
		t.Fatalf("over the bound: PUBACK %+v, err %v; want reason 0x83", resp, err)
	}
	bo.publish("faceagent/gw-f/tasks", []byte(`{"taskId":"f-good","deviceId":"f1","op":"AddPerson","person":{"id":"2"}}`))

	// MQTT 3.1.1 has no negative PUBACK: the connection is dropped instead.
	raw := dialRawSubscriber(t, addr, "v4-publisher", "faceagent/gw-f/nothing")
	var buf bytes.Buffer
	pub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: 4,
		TopicName: "faceagent/gw-f/tasks", PacketID: 7, Payload: bad}
	if err := pub.PublishEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	// mochi writes a DISCONNECT (0xe0) even to 3.1.1 clients, then closes; no PUBACK (0x40).
	_ = raw.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest, err := io.ReadAll(raw.r)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("MQTT 3.1.1 publisher was neither acknowledged nor disconnected")
	}
	if len(rest) > 0 && rest[0]>>4 != packets.Disconnect {
		t.Fatalf("MQTT 3.1.1 publisher got % x before the connection closed, want only a DISCONNECT", rest)
	}
	if got := a.m.deadLetters.Refused.Value(); got != 2 {
		t.Errorf("refusals counted %d, want 2", got)
	}

	setBound(report.MaxDeadLetters)
	bo.publish("faceagent/gw-f/tasks", bad) // the redelivery
	bo.waitFor("the deadletter", 10*time.Second, func() bool { return len(bo.dead) == 1 })
	stop()
}
