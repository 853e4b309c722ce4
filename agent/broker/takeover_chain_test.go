package broker

import (
	"sync"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// chainHook sets up a takeover of a takeover: while the second connection (B) takes the
// session over from the first (A), it publishes a message that mochi routes to A (B is not
// registered yet: the takeover guard keeps it for B), and it holds B's goroutine after B's
// CONNACK, before B is established, until the test lets it go.
type chainHook struct {
	mqtt.HookBase
	srv       *mqtt.Server
	id, topic string

	mu        sync.Mutex
	first     *mqtt.Client  // A
	published bool          // the late message went out
	holdB     chan struct{} // closed to let B go on
	heldB     chan struct{} // closed once B is held
	held      bool
}

func (h *chainHook) ID() string { return "test-takeover-chain" }

func (h *chainHook) Provides(b byte) bool { return b == mqtt.OnQosDropped || b == mqtt.OnPacketSent }

func (h *chainHook) OnQosDropped(cl *mqtt.Client, _ packets.Packet) {
	h.mu.Lock()
	publish := cl == h.first && cl.IsTakenOver() && !h.published
	h.published = h.published || publish
	h.mu.Unlock()
	if publish {
		_ = h.srv.Publish(h.topic, []byte("late"), false, 1)
	}
}

func (h *chainHook) OnPacketSent(cl *mqtt.Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type != packets.Connack || !pk.SessionPresent || cl.ID != h.id {
		return
	}
	h.mu.Lock()
	hold := h.first != nil && cl != h.first && !h.held
	h.held = h.held || hold
	h.mu.Unlock()
	if hold {
		close(h.heldB)
		<-h.holdB
	}
}

// TestTakeoverOfATakeoverKeepsRescuedMessages: a message routed to a session's old
// connection while a new one takes it over is kept by the takeover guard for the new
// connection, which gets it once established. When a third connection takes the session
// over before the second is established (a back office reconnecting again while its
// resumed session's messages are resent), the third must get it when the guard replaces
// the second's takeover by the third's, not lose it with the second (it would never be
// sent while the broker runs; TestPooledPacketsStayApart exercises this under load).
func TestTakeoverOfATakeoverKeepsRescuedMessages(t *testing.T) {
	const id, topic = "chain", "chain/results"
	hook := &chainHook{id: id, topic: topic, holdB: make(chan struct{}), heldB: make(chan struct{})}
	b := startBroker(t, Options{}, hook)
	hook.srv = b.Server()
	var release sync.Once
	letBGo := func() { release.Do(func() { close(hook.holdB) }) }
	t.Cleanup(letBGo)

	a, _ := connectKept(t, b.Addr(), id, true)
	subscribeMem(t, a, topic)
	if err := b.Server().Publish(topic, []byte("first"), false, 1); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := readPublish(t, a); got != "first" {
		t.Fatalf("got %q, want first", got)
	}
	// Not acknowledged: in flight when B takes over, so mochi clears it from A (OnQosDropped).
	cl, ok := b.Server().Clients.Get(id)
	if !ok {
		t.Fatal("A not registered")
	}
	hook.mu.Lock()
	hook.first = cl
	hook.mu.Unlock()

	if _, present := connectKept(t, b.Addr(), id, false); !present {
		t.Fatal("B: session not resumed")
	}
	<-hook.heldB
	hook.mu.Lock()
	published := hook.published
	hook.mu.Unlock()
	if !published {
		t.Fatal("the late message was not published during B's takeover")
	}

	c, present := connectKept(t, b.Addr(), id, false)
	if !present {
		t.Fatal("C: session not resumed")
	}
	letBGo()
	seen := map[string]bool{}
	for len(seen) < 2 {
		first, body, err := readWithin(c, promptly)
		if err != nil {
			t.Fatalf("C got %v of first and late; then: %v", seen, err)
		}
		if first>>4 != packets.Publish {
			continue
		}
		n := int(body[0])<<8 | int(body[1])
		msg := string(publishPayload(t, body[4+n:]))
		seen[msg] = true
		c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback},
			PacketID: uint16(body[2+n])<<8 | uint16(body[3+n])})
	}
	if !seen["first"] || !seen["late"] {
		t.Fatalf("C got %v, want first and late", seen)
	}
}
