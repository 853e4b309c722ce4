package broker

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// takeoverWithTinyMaxPacket connects id (MQTT 5, a session kept for an hour) on a connection
// that asks for a Maximum Packet Size no CONNACK fits in, over the connected or kept
// session of id: mochi takes the session over, then cannot write the CONNACK, and ends the
// connection.
func takeoverWithTinyMaxPacket(t *testing.T, addr, id string) {
	t.Helper()
	c := dialMem(t, addr)
	c.write(t, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 60,
			ClientIdentifier: id},
		Properties: packets.Properties{SessionExpiryInterval: 3600, SessionExpiryIntervalFlag: true,
			MaximumPacketSize: 4},
	})
	if first, _, err := readWithin(c, promptly); err == nil {
		t.Fatalf("%s: got packet type %d, want the connection closed", id, first>>4)
	}
	c.close()
}

// guardEntries returns the takeovers the guard still follows.
func guardEntries(g *takeoverGuard) (incoming, settling int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.incoming), len(g.settling)
}

// TestFailedTakeoverIsForgotten: a connection that took a session over but whose CONNACK
// could not be written (here: a Maximum Packet Size no CONNACK fits in, which any client
// may ask for; a peer that resets the connection during the password check does the same)
// ends without OnSessionEstablished. The hooks must hear of its end all the same, or the
// takeover guard would keep both its entries for the client id, with the connection's
// whole client, for good (one per id, so a loop over fresh ids would grow the heap without
// bound), and every later end of a client with that id would wait settleTimeout for a
// takeover that never finishes.
func TestFailedTakeoverIsForgotten(t *testing.T) {
	const n = 20
	b := startBroker(t, Options{})
	for i := range n {
		id := fmt.Sprintf("victim-%d", i)
		old, code, _ := connectAs(t, b.Addr(), id, "", "", 5, false)
		if code != 0 {
			t.Fatalf("%s: CONNACK 0x%02x", id, code)
		}
		takeoverWithTinyMaxPacket(t, b.Addr(), id)
		// The old connection was taken over: it reads its DISCONNECT.
		expectWithin(t, old, packets.Disconnect, id+": DISCONNECT of the connection taken over")
	}
	deadline := time.Now().Add(waitFor)
	for {
		in, st := guardEntries(b.takeover)
		if in == 0 && st == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the takeover guard still follows %d takeovers (%d settling) of connections that ended", in, st)
		}
		time.Sleep(10 * time.Millisecond)
	}

}

// publishOnTakeover publishes a message to topic, once, from the OnQosDropped of a client
// that was taken over: while mochi clears the old connection's messages, after it marked it
// taken over and before it registered the new one. Routed then, the message goes to the old
// connection, and the takeover guard holds it for the new one.
type publishOnTakeover struct {
	mqtt.HookBase
	srv   *mqtt.Server
	topic string
	done  atomic.Bool
}

func (h *publishOnTakeover) ID() string           { return "test-publish-on-takeover" }
func (h *publishOnTakeover) Provides(b byte) bool { return b == mqtt.OnQosDropped }
func (h *publishOnTakeover) OnQosDropped(cl *mqtt.Client, _ packets.Packet) {
	if cl.IsTakenOver() && h.done.CompareAndSwap(false, true) {
		_ = h.srv.Publish(h.topic, []byte("routed during the takeover"), false, 1)
	}
}

// TestFailedTakeoverKeepsWhatWasRoutedMeanwhile: a connection that took a kept session
// over and failed before its CONNACK holds that session (mochi registered it); a message
// routed to the old connection during the takeover is the session's, and the client gets it
// when it resumes the session.
func TestFailedTakeoverKeepsWhatWasRoutedMeanwhile(t *testing.T) {
	const id, topic = "resumer", "results/r"
	hook := &publishOnTakeover{topic: topic}
	b := startBroker(t, Options{}, hook)
	hook.srv = b.Server()
	old, code, _ := connectAs(t, b.Addr(), id, "", "", 5, false)
	if code != 0 {
		t.Fatalf("CONNACK 0x%02x", code)
	}
	subscribeMem(t, old, topic)
	if err := b.Server().Publish(topic, []byte("in flight"), false, 1); err != nil {
		t.Fatal(err)
	}
	expectWithin(t, old, packets.Publish, "the message in flight") // not acknowledged

	takeoverWithTinyMaxPacket(t, b.Addr(), id)
	if !hook.done.Load() {
		t.Fatal("nothing was published during the takeover")
	}
	c, code, present := connectAs(t, b.Addr(), id, "", "", 5, false)
	if code != 0 || !present {
		t.Fatalf("resuming: CONNACK 0x%02x, session present %v", code, present)
	}
	want := map[string]bool{"in flight": true, "routed during the takeover": true}
	for len(want) > 0 {
		got := string(c.expectPublishAndAck(t))
		if !want[got] {
			t.Fatalf("unexpected message %q", got)
		}
		delete(want, got)
	}
}

// TestConnectionChurnLeavesNothingBehind: a daemon sees clients come and go for years.
// After rounds of clean connections, kept sessions taken over by connections whose CONNACK
// failed, KEYNOTIFY watchers and persistent changes, all of them gone, nothing kept per
// connection or per client id is left: the takeover guard's maps, the state store
// service's notifiers and counts of answers due, the claims of client ids, the listener's
// connections.
func TestConnectionChurnLeavesNothingBehind(t *testing.T) {
	b := startBroker(t, Options{DataDir: t.TempDir()})
	for i := range 20 {
		id := fmt.Sprintf("churn-%d", i)
		c := dial(t, b.Addr(), id, dialOptions{})
		if r := c.do(cmd("KEYNOTIFY", "k"), req{}); string(r.Payload) != "+OK\r\n" {
			t.Fatalf("KEYNOTIFY: %q", r.Payload)
		}
		c.close()

		kept := dial(t, b.Addr(), "kept", dialOptions{sessionExpiry: 3600})
		if r := kept.do(cmd("SET", "k", id), req{persist: true}); string(r.Payload) != "+OK\r\n" {
			t.Fatalf("SET: %q", r.Payload)
		}
		takeoverWithTinyMaxPacket(t, b.Addr(), "kept")
		kept.close()
	}
	deadline := time.Now().Add(waitFor)
	for {
		in, st := guardEntries(b.takeover)
		b.service.mu.Lock()
		notifiers := len(b.service.notifiers)
		b.service.mu.Unlock()
		b.service.answers.mu.Lock()
		answers := len(b.service.answers.pending)
		b.service.answers.mu.Unlock()
		owners := b.auth.owners
		owners.mu.Lock()
		claims := 0
		for _, c := range owners.claims {
			if owners.live(c) {
				claims++
			}
		}
		owners.mu.Unlock()
		open, connecting := b.listener.counts()
		if in+st+notifiers+answers+claims+open+connecting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: takeovers %d (settling %d), notifiers %d, counts of answers %d, claims %d, connections %d (%d before CONNACK)",
				in, st, notifiers, answers, claims, open, connecting)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
