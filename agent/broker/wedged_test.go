package broker

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
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
// for id is blocked in a write. Both ends' socket buffers are made small, so no such message
// fits: the first one written blocks for good. It is blocked once its queue of pending writes
// is full (a message was dropped) and it holds the client's lock (mochi's WritePacket holds
// it while it writes to the socket; nothing else writes to a client that sends nothing).
// It returns the client.
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
	for i := 0; i < 256; i++ {
		if err := b.Server().Publish("dev/face/"+id, payload, false, 0); err != nil {
			t.Fatal(err)
		}
		if b.DroppedMessages() == dropped {
			continue
		}
		if !cl.TryLock() {
			return cl // the writer holds the lock, blocked on the full socket
		}
		cl.Unlock()
	}
	t.Fatalf("%s: the broker's writes never blocked (%d dropped)", id, b.DroppedMessages()-dropped)
	return nil
}

// wedgeOptions gives terminals a queue of 4 pending writes: what wedge queues stays small.
func wedgeOptions() Options {
	return Options{TerminalTopic: isCommandTopic, TerminalPendingWrites: 4}
}

// readWithin reads the next packet from c within d: its type and its body.
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
	return first >> 4, body, nil
}

// expectWithin reads the next packet within promptly and fails unless it is of type typ.
func expectWithin(t *testing.T, c *memClient, typ byte, what string) []byte {
	t.Helper()
	got, body, err := readWithin(c, promptly)
	if err != nil {
		t.Fatalf("%s: no packet within %v: %v", what, promptly, err)
	}
	if got != typ {
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
// both commands. (mochi v2.7.9 took the wedged client's lock for a QoS 1 packet id, and
// waited the write timeout.)
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
