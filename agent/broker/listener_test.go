package broker

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"
)

// rawConnect opens a TCP connection that sends CONNECT (and SUBSCRIBE to
// filter when set) and then never reads: a peer whose buffers will fill.
func rawConnect(t *testing.T, addr, id, filter string) net.Conn {
	return rawConnectVersion(t, addr, id, filter, 5)
}

func rawConnectVersion(t *testing.T, addr, id, filter string, version byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	var buf bytes.Buffer
	connect := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: version,
		Connect: packets.ConnectParams{
			ProtocolName: []byte("MQTT"), ClientIdentifier: id, Clean: true, Keepalive: 60,
		},
	}
	if err := connect.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if filter != "" {
		sub := packets.Packet{
			FixedHeader:     packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
			ProtocolVersion: version,
			PacketID:        1,
			Filters:         packets.Subscriptions{{Filter: filter}},
		}
		if err := sub.SubscribeEncode(&buf); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	// Read up to the SUBACK (or the CONNACK without a filter), then never again.
	want := byte(packets.Connack)
	if filter != "" {
		want = packets.Suback
	}
	_ = conn.SetReadDeadline(time.Now().Add(waitFor))
	for {
		if kind, _ := readRawPacket(t, conn); kind == want {
			return conn
		}
	}
}

// readRawPacket reads one MQTT packet and returns its type and body.
func readRawPacket(t *testing.T, conn net.Conn) (byte, []byte) {
	t.Helper()
	var hdr [1]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		t.Fatalf("reading a packet: %v", err)
	}
	n, shift := 0, 0
	for {
		var b [1]byte
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			t.Fatal(err)
		}
		n |= int(b[0]&0x7f) << shift
		shift += 7
		if b[0]&0x80 == 0 {
			break
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(conn, body); err != nil {
		t.Fatal(err)
	}
	return hdr[0] >> 4, body
}

// TestMQTT311Client: a 3.1.1 subscriber gets a v5 client's message.
func TestMQTT311Client(t *testing.T) {
	b := startBroker(t, Options{})
	old := rawConnectVersion(t, b.Addr(), "v311", "dev/+/heartbeat", 4)
	pub := dial(t, b.Addr(), "v5", dialOptions{noSubscribe: true})
	if _, err := pub.c.Publish(context.Background(), &paho.Publish{QoS: 0, Topic: "dev/42/heartbeat", Payload: []byte("alive")}); err != nil {
		t.Fatal(err)
	}
	kind, body := readRawPacket(t, old)
	// v3.1.1 PUBLISH, QoS 0: topic length, topic, payload (no properties).
	want := append([]byte{0, 16}, "dev/42/heartbeatalive"...)
	if kind != packets.Publish || !bytes.Equal(body, want) {
		t.Fatalf("got type %d body %q, want %q", kind, body, want)
	}
}

// TestSilentConnectionIsDropped: a connection that never sends CONNECT is
// closed after ConnectTimeout instead of holding a goroutine forever.
func TestSilentConnectionIsDropped(t *testing.T) {
	b := startBroker(t, Options{ConnectTimeout: 100 * time.Millisecond})
	conn, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(waitFor))
	if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read = %v, want EOF from the broker closing", err)
	}
}

// TestCloseDoesNotWaitForStuckPeers: Close returns although one peer never
// sent CONNECT and another stopped reading with its buffers full.
func TestCloseDoesNotWaitForStuckPeers(t *testing.T) {
	b, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true, ConnectTimeout: time.Minute, WriteTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	silent, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	rawConnect(t, b.Addr(), "stuck", "big/#")
	pub := dial(t, b.Addr(), "pub", dialOptions{noSubscribe: true}) // accepted after both: FIFO backlog
	payload := make([]byte, 64<<10)
	for i := 0; i < 256; i++ { // 16 MB: more than loopback buffers hold
		if _, err := pub.c.Publish(context.Background(), &paho.Publish{QoS: 0, Topic: "big/x", Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	pub.close()
	closeWithin(t, b, waitFor, "with a stuck peer")
	_ = silent.SetReadDeadline(time.Now().Add(waitFor))
	if _, err := silent.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("silent peer: read = %v, want EOF", err)
	}
}
