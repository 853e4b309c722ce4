// faceagent patch (counter drift): the byte counters of the bounds come back to nothing on
// the paths that end what they count.

package mqtt

import (
	"bufio"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// failingConnack is a ConnackWaiter that cannot store any session.
type failingConnack struct{ HookBase }

func (failingConnack) ID() string                      { return "failing-connack" }
func (failingConnack) WaitBeforeConnack(*Client) error { return errors.New("disk full") }

// A CONNECT of a kept session with a will, refused because its session could not be stored
// (ConnackWaiter), leaves nothing counted: the will counted in the session's bytes
// (willRoom) goes with the refused connection. Before, it stayed in the server's total for
// good: each such refusal (a full disk, one per reconnect attempt) took the will's bytes
// from MaximumQueuedBytes.
func TestRefusedConnectReleasesItsWill(t *testing.T) {
	s := newQuotaServer(t, func(c *Capabilities) { c.MaximumQueuedBytes = 1 << 20 })
	if err := s.AddHook(new(failingConnack), nil); err != nil {
		t.Fatal(err)
	}
	for _, clean := range []bool{false, true} {
		srv, cli := net.Pipe()
		done := make(chan error, 1)
		go func() { done <- s.EstablishConnection("pipe", srv) }()
		pk := connectPacket(5, "", "")
		pk.Connect.Clean = clean
		pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 3600, true
		pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload = true, "will", make([]byte, 1000)
		writePacket(t, cli, pk)
		if code := readConnack(t, cli, bufio.NewReader(cli)); code != packets.ErrServerUnavailable.Code {
			t.Fatalf("clean %v: CONNACK %#x, want 0x88", clean, code)
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the refused connection did not end")
		}
		_ = cli.Close()
		if n := s.QueuedBytes(); n != 0 {
			t.Fatalf("clean %v: %d bytes still counted after the refused CONNECT", clean, n)
		}
	}
}

// A message larger than the queue's bound counts in the server's total while it is queued
// (reservePending); one still queued when the client's writer ends (the client stopped)
// leaves the total all the same. Before, the writer returned with it in its queue, and
// its bytes stayed in MaximumQueuedBytes for good: a subscriber cut while a large message
// waited for its writer took that much from every other session's room.
func TestQueuedOversizeMessageLeavesTheTotal(t *testing.T) {
	s, _ := newBoundsServer(t, func(c *Capabilities) {
		c.MaximumClientWritesPendingBytes = 1 << 10
		c.MaximumQueuedBytes = 1 << 30
	})
	for i := 0; i < 20; i++ {
		near, far := net.Pipe()
		defer far.Close()
		cl := s.NewClient(near, "t", "o", false)
		cl.Properties.ProtocolVersion = 5
		base := s.QueuedBytes()
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "o", Payload: make([]byte, 4<<10)}
		if err := s.publishToClient(cl, packets.Subscription{Filter: "o"}, &pk); err != nil {
			t.Fatal(err)
		}
		if s.QueuedBytes() <= base {
			t.Fatal("the oversize message is not counted in the total")
		}
		cl.Stop(nil) // before its writer took the message
		ended := make(chan struct{})
		go func() { cl.WriteLoop(); close(ended) }()
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatal("the writer of a stopped client did not end")
		}
		if got := s.QueuedBytes(); got != base {
			t.Fatalf("round %d: total %d after the writer ended, want %d", i, got, base)
		}
		if n := cl.PendingWriteBytes(); n != 0 || cl.OutboundLen() != 0 {
			t.Fatalf("round %d: %d bytes, %d packets still pending", i, n, cl.OutboundLen())
		}
	}
}
