package broker

import (
	"sync/atomic"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// publishOnResume publishes one message, once, as soon as mochi has written the CONNACK of a
// resumed session to client id: before it resends the session's messages in flight.
type publishOnResume struct {
	mqtt.HookBase
	srv            *mqtt.Server
	id, topic, msg string
	done           atomic.Bool
}

func (h *publishOnResume) ID() string { return "test-publish-on-resume" }

func (h *publishOnResume) Provides(b byte) bool { return b == mqtt.OnPacketSent }

func (h *publishOnResume) OnPacketSent(cl *mqtt.Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type == packets.Connack && pk.SessionPresent && cl.ID == h.id && h.done.CompareAndSwap(false, true) {
		_ = h.srv.Publish(h.topic, []byte(h.msg), false, 1)
	}
}

// readPublish reads a QoS 1 PUBLISH within promptly: its payload, packet id and DUP flag.
func readPublish(t *testing.T, c *memClient) (string, uint16, bool) {
	t.Helper()
	first, body, err := readWithin(c, promptly)
	if err != nil {
		t.Fatalf("no PUBLISH within %v: %v", promptly, err)
	}
	if first>>4 != packets.Publish || len(body) < 2 {
		t.Fatalf("got packet 0x%02x, want a PUBLISH", first)
	}
	n := int(body[0])<<8 | int(body[1])
	if len(body) < 4+n {
		t.Fatal("PUBLISH without a packet id")
	}
	id := uint16(body[2+n])<<8 | uint16(body[3+n])
	return string(publishPayload(t, body[4+n:])), id, first&0x08 != 0
}

// TestResumedSessionSendsEachMessageOnce: a message routed to a resumed session's new
// connection after its CONNACK, before mochi resends the session's messages in flight, goes
// out once. mochi v2.7.9 resent every message in the set, that one too (with DUP), and its
// writer sent it again; the client's lock in NextPacketID made the window small (see the
// wedged-peer patches in third_party/mochi/README.md).
func TestResumedSessionSendsEachMessageOnce(t *testing.T) {
	const topic = "faceagent/gw/results"
	hook := &publishOnResume{id: "back-office", topic: topic, msg: "live"}
	b := startBroker(t, Options{}, hook)
	hook.srv = b.Server()

	first, _ := connectKept(t, b.Addr(), "back-office", true)
	subscribeMem(t, first, topic)
	if err := b.Server().Publish(topic, []byte("in-flight"), false, 1); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := readPublish(t, first); got != "in-flight" {
		t.Fatalf("got %q, want in-flight", got)
	}
	// Not acknowledged: in flight when the session resumes.

	again, present := connectKept(t, b.Addr(), "back-office", false)
	if !present {
		t.Fatal("session not resumed")
	}
	seen := map[string]int{}
	for range 2 {
		msg, id, dup := readPublish(t, again)
		seen[msg]++
		if msg == "in-flight" && !dup {
			t.Error("the message in flight was sent again without DUP")
		}
		again.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id})
	}
	if seen["in-flight"] != 1 || seen["live"] != 1 {
		t.Fatalf("after resuming got %v, want in-flight and live once each", seen)
	}
	if err := b.Server().Publish(topic, []byte("after"), false, 1); err != nil {
		t.Fatal(err)
	}
	if msg, _, dup := readPublish(t, again); msg != "after" {
		t.Fatalf("got %q (DUP %v) after the resumed session's messages, want after", msg, dup)
	}
}
