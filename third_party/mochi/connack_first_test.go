package mqtt

import (
	"bufio"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// routeDuringConnack lets every client in, and when a client's CONNACK is about to be
// encoded (the client registered, as it is when a message is routed to it) queues a PUBLISH
// for it the way publishToClient does, then waits for the writer to send that PUBLISH: a
// writer free to write sends it at once, ahead of the CONNACK. A writer that waits for the
// CONNACK does not; the hook gives up after routedWait.
type routeDuringConnack struct {
	HookBase
	sent     chan struct{}
	sentOnce sync.Once
	queued   chan bool
}

const routedWait = 500 * time.Millisecond

func (h *routeDuringConnack) ID() string { return "test-route-during-connack" }
func (h *routeDuringConnack) Provides(b byte) bool {
	return b == OnConnectAuthenticate || b == OnPacketEncode || b == OnPacketSent
}
func (h *routeDuringConnack) OnConnectAuthenticate(*Client, packets.Packet) bool { return true }

func (h *routeDuringConnack) OnPacketEncode(cl *Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type != packets.Connack {
		return pk
	}
	h.queued <- cl.QueueWrite(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish},
		TopicName: "early", Payload: []byte("routed before the CONNACK")})
	select {
	case <-h.sent:
	case <-time.After(routedWait):
	}
	return pk
}

func (h *routeDuringConnack) OnPacketSent(_ *Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type == packets.Publish {
		h.sentOnce.Do(func() { close(h.sent) })
	}
}

// TestConnackBeforeAnyPublish: a message routed to a client after its registration and
// before its CONNACK is written goes out behind the CONNACK [MQTT-3.2.0-1]. Upstream's
// writer goroutine, started before the CONNECT is read, wrote it at once: a client taking
// over a kept session while messages flowed to it read a PUBLISH where it waited for its
// CONNACK and dropped the connection (paho: "received unexpected packet 3").
func TestConnackBeforeAnyPublish(t *testing.T) {
	h := &routeDuringConnack{sent: make(chan struct{}), queued: make(chan bool, 1)}
	c, _ := pipeServer(t, nil, h)
	r := bufio.NewReader(c)
	writePacket(t, c, connectPacket(5, "", ""))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	first, err := r.ReadByte()
	if err != nil {
		t.Fatal(err)
	}
	if !<-h.queued {
		t.Fatal("the PUBLISH was not queued for the client")
	}
	if first>>4 != packets.Connack {
		t.Fatalf("first packet of type %d, want a CONNACK (%d)", first>>4, packets.Connack)
	}
	if err := r.UnreadByte(); err != nil {
		t.Fatal(err)
	}
	if code := readConnack(t, c, r); code != 0 {
		t.Fatalf("CONNACK %#x", code)
	}
	// The CONNACK's properties, then the PUBLISH.
	rest := make([]byte, 1)
	if _, err := io.ReadFull(r, rest); err != nil {
		t.Fatal(err)
	}
	props := make([]byte, rest[0])
	if _, err := io.ReadFull(r, props); err != nil {
		t.Fatal(err)
	}
	next, err := r.ReadByte()
	if err != nil {
		t.Fatal(err)
	}
	if next>>4 != packets.Publish {
		t.Fatalf("packet of type %d after the CONNACK, want the PUBLISH routed before it", next>>4)
	}
}
