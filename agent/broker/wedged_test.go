package broker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/mqttlink"
)

// promptly bounds what must not wait on a wedged terminal. Far above what the steps take
// (microseconds to milliseconds), far below the write timeout (30 s) they waited for before
// the mochi patches marked "faceagent patch (wedged peer)" (third_party/mochi/README.md).
const promptly = 2 * time.Second

// wedgedTerminal connects a raw MQTT 5 terminal as id, subscribed to dev/face/{id} with
// QoS 1, with a small socket receive buffer. The test never reads from it again (a firmware
// hang, a half-dead TCP connection).
func wedgedTerminal(t *testing.T, addr, id string) *memClient {
	t.Helper()
	c := memConnect(t, addr, id)
	t.Cleanup(c.close)
	if tc, ok := c.conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	return c
}

// wedge publishes 256 KiB QoS 0 messages to id's command topic until the broker's writer
// for id is blocked in a write: its queue of pending writes is full (a message was
// dropped) and the writer holds the client's lock. Both ends' socket buffers are made
// small, so no such message fits: the first one written blocks for good, holding the
// client's lock (mochi's WritePacket holds it while it writes to the socket; nothing else
// writes to a client that sends nothing). It returns the client.
func wedge(t *testing.T, b *Broker, id string) *mqtt.Client {
	t.Helper()
	cl, ok := b.Server().Clients.Get(id)
	if !ok {
		t.Fatalf("no client %s", id)
	}
	if dc, ok := cl.Net.Conn.(*deadlineConn); ok {
		if tc, ok := dc.Conn.(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(4096)
		}
	}
	payload := bytes.Repeat([]byte{'x'}, 256<<10)
	dropped := b.DroppedMessages()
	deadline := time.Now().Add(waitFor)
	for i := 0; i < 1024 && time.Now().Before(deadline); i++ {
		if err := b.Server().Publish("dev/face/"+id, payload, false, 0); err != nil {
			t.Fatal(err)
		}
		if b.DroppedMessages() == dropped {
			continue // queued: the writer has something to block on
		}
		if !cl.TryLock() {
			return cl // the writer holds the lock, blocked on the full socket
		}
		cl.Unlock()
		// The queue is full (a message was dropped) but its writer has not taken the lock
		// yet, or has not got a message too large for the socket: nothing announces either.
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s: the broker's writes never blocked (%d dropped)", id, b.DroppedMessages()-dropped)
	return nil
}

// wedgeOptions gives terminals a queue of 4 pending writes: what wedge queues stays small.
func wedgeOptions() Options {
	return Options{TerminalTopic: isCommandTopic, TerminalPendingWrites: 4}
}

// readWithin reads the next packet from c within d: its first byte (type and flags) and
// its body.
func readWithin(c *memClient, d time.Duration) (byte, []byte, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	first, err := c.r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, mul := 0, 1
	for {
		b, err := c.r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n += int(b&0x7f) * mul
		if b&0x80 == 0 {
			break
		}
		if mul *= 128; mul > 128*128*128 {
			return 0, nil, fmt.Errorf("malformed remaining length")
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return 0, nil, err
	}
	return first, body, nil
}

// expectWithin reads the next packet within promptly and fails unless it is of type typ.
func expectWithin(t *testing.T, c *memClient, typ byte, what string) []byte {
	t.Helper()
	first, body, err := readWithin(c, promptly)
	if err != nil {
		t.Fatalf("%s: no packet within %v: %v", what, promptly, err)
	}
	if got := first >> 4; got != typ {
		t.Fatalf("%s: got packet type %d, want %d", what, got, typ)
	}
	return body
}

// relayHook stands in for the agent's intake: inside OnPublish of a task (before mochi
// acknowledges it to the back office) it sends commands through the inline client at QoS 1,
// as the outbox's inline send does.
type relayHook struct {
	mqtt.HookBase
	srv    *mqtt.Server
	topic  string
	relays []string
}

func (h *relayHook) ID() string { return "test-relay" }

func (h *relayHook) Provides(b byte) bool { return b == mqtt.OnPublish }

func (h *relayHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || pk.TopicName != h.topic {
		return pk, nil
	}
	for _, topic := range h.relays {
		if err := h.srv.Publish(topic, pk.Payload, false, 1); err != nil {
			return pk, err
		}
	}
	return pk, nil
}

// TestWedgedTerminalStallsNoOne: a terminal that stops reading, with the broker's writer
// blocked on its full socket, holds up nothing but itself. A back office's task whose
// intake sends commands to it and to a healthy terminal inside OnPublish is acknowledged,
// a QoS 1 publish to it from another goroutine returns, and the healthy terminal gets
// both commands: taking the wedged client's lock for a QoS 1 packet id, as unpatched
// mochi v2.7.9 does, would wait the write timeout.
func TestWedgedTerminalStallsNoOne(t *testing.T) {
	relay := &relayHook{topic: "faceagent/gw/tasks", relays: []string{"dev/face/stuck", "dev/face/healthy"}}
	b := startBroker(t, wedgeOptions(), relay)
	relay.srv = b.Server()
	healthy := memConnect(t, b.Addr(), "healthy")
	defer healthy.close()
	backOffice := memConnectTo(t, b.Addr(), "back-office", "faceagent/gw/results")
	defer backOffice.close()
	wedgedTerminal(t, b.Addr(), "stuck")
	wedge(t, b, "stuck")

	backOffice.write(t, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   "faceagent/gw/tasks", PacketID: 7, Payload: []byte("task-1"),
	})
	ack := expectWithin(t, backOffice, packets.Puback, "the back office's PUBACK")
	if len(ack) < 2 || ack[0] != 0 || ack[1] != 7 {
		t.Fatalf("PUBACK % x, want packet id 7", ack)
	}
	if got := healthy.expectPublishAndAck(t); string(got) != "task-1" {
		t.Fatalf("healthy terminal got %q, want the relayed task", got)
	}

	published := make(chan string, 2)
	go func() {
		_ = b.Server().Publish("dev/face/stuck", []byte("cmd-2"), false, 1)
		published <- "stuck"
		_ = b.Server().Publish("dev/face/healthy", []byte("cmd-2"), false, 1)
		published <- "healthy"
	}()
	for _, want := range []string{"stuck", "healthy"} {
		select {
		case got := <-published:
			if got != want {
				t.Fatalf("published %s, want %s", got, want)
			}
		case <-time.After(promptly):
			t.Fatalf("an inline QoS 1 publish to %s did not return within %v", want, promptly)
		}
	}
	if got := healthy.expectPublishAndAck(t); string(got) != "cmd-2" {
		t.Fatalf("healthy terminal got %q, want cmd-2", got)
	}
}

// connectKept connects a raw MQTT 5 client as id with a session kept for an hour, starting
// clean or resuming, and returns it with CONNACK's session present flag.
func connectKept(t *testing.T, addr, id string, clean bool) (*memClient, bool) {
	t.Helper()
	return connectKeptMax(t, addr, id, clean, 0)
}

// connectKeptMax is connectKept with Receive Maximum max (0: none sent, the protocol's
// 65,535).
func connectKeptMax(t *testing.T, addr, id string, clean bool, max uint16) (*memClient, bool) {
	t.Helper()
	c := dialMem(t, addr)
	c.write(t, packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: clean,
			Keepalive: 60, ClientIdentifier: id},
		Properties: packets.Properties{SessionExpiryInterval: 3600, SessionExpiryIntervalFlag: true,
			ReceiveMaximum: max},
	})
	ack := expectWithin(t, c, packets.Connack, id+"'s CONNACK")
	return c, len(ack) > 0 && ack[0]&1 == 1
}

// TestWedgedTerminalReconnects: the terminal comes back on a new connection (its firmware
// restarted) while the broker's writer is still blocked on the old one. mochi disconnects
// the old client first (session takeover), on the new connection's goroutine: its
// DISCONNECT waited for the blocked write, then for a socket still full, before the new
// connection got its CONNACK. The session goes over whole: the command the old connection
// never read is sent again, and the subscription routes the next one.
func TestWedgedTerminalReconnects(t *testing.T) {
	b := startBroker(t, wedgeOptions())
	old, _ := connectKept(t, b.Addr(), "stuck", true)
	subscribeMem(t, old, "dev/face/stuck")
	if tc, ok := old.conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	if err := b.Server().Publish("dev/face/stuck", []byte("cmd-0"), false, 1); err != nil {
		t.Fatal(err)
	}
	oldClient := wedge(t, b, "stuck") // cmd-0 went out first: in flight, never read

	again, present := connectKept(t, b.Addr(), "stuck", false)
	if !present {
		t.Fatal("the session was not kept across the takeover")
	}
	if !oldClient.Closed() {
		t.Fatal("the wedged connection's client is still open after the takeover")
	}
	if got := again.expectPublishAndAck(t); string(got) != "cmd-0" {
		t.Fatalf("the terminal got %q again on its new connection, want cmd-0", got)
	}
	if err := b.Server().Publish("dev/face/stuck", []byte("cmd-1"), false, 1); err != nil {
		t.Fatal(err)
	}
	if got := again.expectPublishAndAck(t); string(got) != "cmd-1" {
		t.Fatalf("the terminal got %q on its new connection, want cmd-1", got)
	}
}

// TestWedgedTerminalClose: Close (the agent's SIGTERM) disconnects every client; a wedged
// one held it for the blocked write and then for its own DISCONNECT.
func TestWedgedTerminalClose(t *testing.T) {
	b := startBroker(t, wedgeOptions())
	healthy := memConnect(t, b.Addr(), "healthy")
	defer healthy.close()
	wedgedTerminal(t, b.Addr(), "stuck")
	wedge(t, b, "stuck")

	closeWithin(t, b, promptly, "with a wedged terminal")
	body := expectWithin(t, healthy, packets.Disconnect, "the healthy terminal's DISCONNECT")
	if len(body) < 1 || body[0] != packets.ErrServerShuttingDown.Code {
		t.Fatalf("DISCONNECT % x, want reason 0x%02x (server shutting down)", body, packets.ErrServerShuttingDown.Code)
	}
}

// TestWedgedTerminalCutAfterWriteTimeout: a write that times out ends the connection,
// rather than go on writing the next queued packets into the broken stream, each waiting
// the write timeout again, and keep the client until its keepalive runs out (1.5 × 60 s
// here).
func TestWedgedTerminalCutAfterWriteTimeout(t *testing.T) {
	gone := &disconnects{ids: make(chan string, 8)} // sessions_test.go
	o := wedgeOptions()
	o.WriteTimeout = time.Second // wedge is done long before
	b := startBroker(t, o, gone)
	wedgedTerminal(t, b.Addr(), "stuck")
	cl := wedge(t, b, "stuck")
	select {
	case id := <-gone.ids:
		if id != "stuck" {
			t.Fatalf("%s disconnected, want stuck", id)
		}
	case <-time.After(o.WriteTimeout + promptly):
		t.Fatalf("the wedged terminal is still connected %v after its write timeout", promptly)
	}
	if cause := cl.StopCause(); !errors.Is(cause, os.ErrDeadlineExceeded) {
		t.Fatalf("stop cause %v, want the write timeout", cause)
	}
}

// TestWedgedTerminalMqttlinkSend: the agent's own send path, device/mqttlink over the
// embedded broker's inline client (what the outbox calls, also from the intake inside
// OnPublish): a command to the wedged terminal returns, and the next, to a healthy
// terminal, arrives.
func TestWedgedTerminalMqttlinkSend(t *testing.T) {
	b := startBroker(t, wedgeOptions())
	link, err := mqttlink.New(mqttlink.Config{Bus: b})
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	healthy := memConnect(t, b.Addr(), "healthy")
	defer healthy.close()
	wedgedTerminal(t, b.Addr(), "stuck")
	wedge(t, b, "stuck")

	sent := make(chan error, 2)
	go func() {
		for _, id := range []string{"stuck", "healthy"} {
			sent <- link.Send(context.Background(), id, face.Command{
				MessageID: "m-" + id, Op: face.AddPerson, Person: face.Person{ID: "951", Name: "A"}})
		}
	}()
	for _, id := range []string{"stuck", "healthy"} {
		select {
		case err := <-sent:
			if err != nil {
				t.Fatalf("Send to %s: %v", id, err)
			}
		case <-time.After(promptly):
			t.Fatalf("Send to %s did not return within %v", id, promptly)
		}
	}
	if got := healthy.expectPublishAndAck(t); !bytes.Contains(got, []byte(`"messageId":"m-healthy"`)) {
		t.Fatalf("healthy terminal got %s, want the command m-healthy", got)
	}
}

// dialMem opens a raw MQTT connection to addr, closed when t ends; the caller sends its
// CONNECT.
func dialMem(t *testing.T, addr string) *memClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, promptly)
	if err != nil {
		t.Fatal(err)
	}
	c := &memClient{conn: conn, r: bufio.NewReader(conn)}
	t.Cleanup(c.close)
	return c
}

// subscribeMem subscribes c to filter at QoS 1 (packet id 1) and waits for the SUBACK.
func subscribeMem(t *testing.T, c *memClient, filter string) {
	t.Helper()
	c.write(t, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    1,
		Filters:     packets.Subscriptions{{Filter: filter, Qos: 1}},
	})
	expectWithin(t, c, packets.Suback, "SUBACK")
}
