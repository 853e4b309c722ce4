package broker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
)

// BenchmarkMemoryPerConnection measures what one connected terminal costs the
// broker: 64 raw MQTT v5 clients (no goroutine and no library on the client
// side, so nearly all the memory counted is the broker's) connect, subscribe
// to their command topic as device/mqttlink terminals do, receive one QoS 1
// command, PUBACK it and publish a heartbeat, so both per-client goroutines
// have run their usual paths. It reports the growth of HeapInuse and
// StackInuse (after a GC) divided by the number of connections:
//
//	go test -run '^$' -bench MemoryPerConnection -benchtime 3x ./agent/broker/
//
// Sub-benchmarks: "terminal-queue" with Options.TerminalTopic set as the agent sets it
// (the clients get queues of DefaultTerminalPendingWrites), "queue=1024" without (every
// client gets MaxPendingWrites). The client side's share (64 sockets and their bufio
// readers in this process) is a few hundred bytes a connection and is counted too.
func BenchmarkMemoryPerConnection(b *testing.B) {
	b.Run("queue=1024", func(b *testing.B) { benchmarkMemoryPerConnection(b, Options{}) })
	b.Run("terminal-queue", func(b *testing.B) {
		benchmarkMemoryPerConnection(b, Options{TerminalTopic: isCommandTopic})
	})
	b.Run("watcher", benchmarkMemoryPerWatcher)
}

// benchmarkMemoryPerWatcher is the "watcher" sub-benchmark: each client, connected as in
// queue=1024, registers KEYNOTIFY on a key of its own (so it gets a notifier: a queue and
// a goroutine), gets one notification of a change of it and acknowledges it. Compare with
// queue=1024: the difference is what a state store watcher adds.
func benchmarkMemoryPerWatcher(b *testing.B) {
	const conns = 64
	br := startBroker(b, Options{})
	idle := br.Server().Clients.Len()
	var heap, stack float64
	for b.Loop() {
		before := settledMemStats()
		clients := make([]*memClient, conns)
		for i := range clients {
			id := fmt.Sprintf("w%02d", i)
			c := memConnectTo(b, br.Addr(), id, "clients/"+id+"/r")
			c.write(b, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 2,
				TopicName: InvokeTopic, Payload: cmd("KEYNOTIFY", id),
				Properties: packets.Properties{ResponseTopic: "clients/" + id + "/r", CorrelationData: []byte{1},
					User: []packets.UserProperty{{Key: "__ts", Val: "1:0:w"}}},
				Mods: packets.Mods{AllowResponseInfo: true}}) // the encoder drops the Response Topic without it
			for range 2 { // its PUBACK and the response, in either order
				if typ, _ := c.read(b); typ == packets.Publish {
					// the response's packet id is the broker's first: 1
					c.write(b, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: 1})
				}
			}
			clients[i] = c
		}
		for i, c := range clients {
			reply, _ := br.Store().Do(&statestore.Request{Payload: cmd("SET", fmt.Sprintf("w%02d", i), "v"),
				Timestamp: "1:0:w", HasTimestamp: true}, nil)
			if string(reply) != "+OK\r\n" {
				b.Fatalf("SET: %q", reply)
			}
			c.expectPublishAndAck(b)
			c.write(b, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
			c.expect(b, packets.Pingresp)
		}
		after := settledMemStats()
		heap = float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / conns
		stack = float64(int64(after.StackInuse)-int64(before.StackInuse)) / conns
		for _, c := range clients {
			c.close()
		}
		waitClients(b, br, idle)
	}
	b.ReportMetric(heap, "heap-B/conn")
	b.ReportMetric(stack, "stack-B/conn")
	b.ReportMetric(heap+stack, "B/conn")
}

func benchmarkMemoryPerConnection(b *testing.B, o Options) {
	const conns = 64
	br := startBroker(b, o)
	srv := br.Server()
	idle := srv.Clients.Len() // the broker's own inline clients
	var heap, live, stack float64
	for b.Loop() {
		before := settledMemStats()
		clients := make([]*memClient, conns)
		for i := range clients {
			clients[i] = memConnect(b, br.Addr(), fmt.Sprintf("t%02d", i))
		}
		for i, c := range clients {
			topic := fmt.Sprintf("dev/face/t%02d", i)
			if err := srv.Publish(topic, []byte(`["setUser","1","Ann"]`), false, 1); err != nil {
				b.Fatal(err)
			}
			c.expectPublishAndAck(b)
			c.write(b, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish},
				TopicName: topic + "/heartbeat", Payload: []byte(`{"ok":true}`)})
		}
		// A PINGREQ round trip on each client: the broker has handled the
		// heartbeat once the PINGRESP comes back.
		for _, c := range clients {
			c.write(b, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
			c.expect(b, packets.Pingresp)
		}
		after := settledMemStats()
		heap = float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / conns
		live = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / conns
		stack = float64(int64(after.StackInuse)-int64(before.StackInuse)) / conns
		for _, c := range clients {
			c.close()
		}
		waitClients(b, br, idle)
	}
	b.ReportMetric(heap, "heap-B/conn")
	b.ReportMetric(live, "live-B/conn")
	b.ReportMetric(stack, "stack-B/conn")
	b.ReportMetric(heap+stack, "B/conn")
}

func settledMemStats() runtime.MemStats {
	runtime.GC()
	runtime.GC() // a second cycle frees what the first one's finalizers released
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// waitClients waits until the broker knows exactly n clients.
func waitClients(tb testing.TB, br *Broker, n int) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for br.Server().Clients.Len() != n {
		if time.Now().After(deadline) {
			tb.Fatalf("broker has %d clients, want %d", br.Server().Clients.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// memClient is an MQTT v5 client with no goroutine: it writes a packet and
// reads the answer in the caller's goroutine.
type memClient struct {
	conn net.Conn
	r    *bufio.Reader
}

func memConnect(tb testing.TB, addr, id string) *memClient {
	tb.Helper()
	return memConnectTo(tb, addr, id, "dev/face/"+id)
}

// memConnectTo connects with a clean session and subscribes to filters with QoS 1.
func memConnectTo(tb testing.TB, addr, id string, filters ...string) *memClient {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	c := &memClient{conn: conn, r: bufio.NewReaderSize(conn, 256)}
	c.write(tb, packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true,
			Keepalive: 60, ClientIdentifier: id},
	})
	c.expect(tb, packets.Connack)
	subs := make(packets.Subscriptions, len(filters))
	for i, f := range filters {
		subs[i] = packets.Subscription{Filter: f, Qos: 1}
	}
	c.write(tb, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    1,
		Filters:     subs,
	})
	c.expect(tb, packets.Suback)
	return c
}

func (c *memClient) write(tb testing.TB, pk packets.Packet) {
	tb.Helper()
	pk.ProtocolVersion = 5
	var buf bytes.Buffer
	err := brokertest.EncodeClientPacket(&buf, pk)
	if err != nil {
		tb.Fatal(err)
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write(buf.Bytes()); err != nil {
		tb.Fatal(err)
	}
}

// read returns the next packet's type and body (after the fixed header).
func (c *memClient) read(tb testing.TB) (byte, []byte) {
	tb.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	first, err := c.r.ReadByte()
	if err != nil {
		tb.Fatal(err)
	}
	n, mul := 0, 1
	for {
		d, err := c.r.ReadByte()
		if err != nil {
			tb.Fatal(err)
		}
		n += int(d&0x7f) * mul
		if d&0x80 == 0 {
			break
		}
		if mul *= 128; mul > 128*128*128 {
			tb.Fatal("memClient: malformed remaining length")
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		tb.Fatal(err)
	}
	return first >> 4, body
}

func (c *memClient) expect(tb testing.TB, typ byte) []byte {
	tb.Helper()
	got, body := c.read(tb)
	if got != typ {
		tb.Fatalf("memClient: got packet type %d, want %d", got, typ)
	}
	return body
}

// expectPublishAndAck reads a QoS 1 PUBLISH, answers with PUBACK and returns its payload.
func (c *memClient) expectPublishAndAck(tb testing.TB) []byte {
	tb.Helper()
	body := c.expect(tb, packets.Publish)
	if len(body) < 2 {
		tb.Fatal("memClient: short PUBLISH")
	}
	topicLen := int(body[0])<<8 | int(body[1])
	if len(body) < 2+topicLen+2 {
		tb.Fatal("memClient: PUBLISH without a packet id")
	}
	id := uint16(body[2+topicLen])<<8 | uint16(body[3+topicLen])
	c.write(tb, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id})
	return publishPayload(tb, body[4+topicLen:])
}

// expectPublish reads a QoS 0 PUBLISH and returns its payload.
func (c *memClient) expectPublish(tb testing.TB) []byte {
	tb.Helper()
	body := c.expect(tb, packets.Publish)
	if len(body) < 2 || len(body) < 2+(int(body[0])<<8|int(body[1])) {
		tb.Fatal("memClient: short PUBLISH")
	}
	return publishPayload(tb, body[2+(int(body[0])<<8|int(body[1])):])
}

// publishPayload returns the payload of a PUBLISH's body from its properties on.
func publishPayload(tb testing.TB, rest []byte) []byte {
	tb.Helper()
	payload, err := skipProperties(rest)
	if err != nil {
		tb.Fatal("memClient: " + err.Error())
	}
	return payload
}

// skipProperties returns what follows an MQTT 5 property block (its variable byte integer
// length and the properties) at the start of rest.
func skipProperties(rest []byte) ([]byte, error) {
	n, shift, i := 0, 0, 0
	for ; i < len(rest) && i < 4; i++ {
		n |= int(rest[i]&0x7f) << shift
		shift += 7
		if rest[i]&0x80 == 0 {
			break
		}
	}
	if i >= len(rest) || 1+i+n > len(rest) {
		return nil, errors.New("PUBLISH with malformed properties")
	}
	return rest[1+i+n:], nil
}

func (c *memClient) close() { _ = c.conn.Close() }
