package agent

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
)

// poke signals c (capacity 1) without blocking.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

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
