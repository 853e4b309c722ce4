package broker

import (
	"bytes"
	"log/slog"
	"net"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// blockWriter has the broker's writer for cl block in a write that cannot finish: both
// ends' socket buffers small, one QoS 0 message of 256 KiB routed to it on topic, and a
// peer that reads nothing. It returns once the writer holds the client's lock (mochi's
// WritePacket holds it while it writes to the socket, and nothing else writes to a client
// that sends nothing), with nothing queued behind the message.
func blockWriter(t *testing.T, b *Broker, cl *mqtt.Client, peer *memClient, topic string) {
	t.Helper()
	if tc, ok := peer.conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	if dc, ok := cl.Net.Conn.(*deadlineConn); ok {
		if tc, ok := dc.Conn.(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(4096)
		}
	}
	// The writer idle first: the tail of an earlier write (its lock held after the peer
	// read the bytes) would pass for the blocked write.
	eventually(t, "the writer idle", func() bool { return cl.OutboundLen() == 0 })
	if err := b.Server().Publish(topic, bytes.Repeat([]byte{'x'}, 256<<10), false, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the writer blocked in its write", func() bool {
		if cl.TryLock() {
			cl.Unlock()
			return false
		}
		return true
	})
	if queued := cl.OutboundLen(); queued != 1 {
		t.Fatalf("%d packets queued or being written, want the blocked message alone", queued)
	}
}

// TestTakeoverRedeliveryWaitsForNoOne: a message routed to a back office's old connection
// after its session was taken over is handed to the new connection on the publisher's
// goroutine (takeoverGuard.rescue, in OnQosPublish). It goes through the new connection's
// writer. When the new connection does not read (its writer blocked on a full socket), the
// publisher returns at once and the message waits, queued and in flight; the next
// connection of the session gets it. (deliver wrote it on the publisher's goroutine: it
// waited for the client's lock, held by the blocked write, up to the write timeout.)
func TestTakeoverRedeliveryWaitsForNoOne(t *testing.T) {
	b := startBroker(t, Options{})
	srv := b.Server()
	first, _ := connectKept(t, b.Addr(), "office", true)
	subscribeMem(t, first, "faceagent/gw/results")
	old, ok := srv.Clients.Get("office")
	if !ok {
		t.Fatal("no client office")
	}
	again, present := connectKept(t, b.Addr(), "office", false)
	if !present {
		t.Fatal("the session was not kept across the takeover")
	}
	next, ok := srv.Clients.Get("office")
	if !ok || next == old || !old.IsTakenOver() {
		t.Fatal("the second connection did not take the session over")
	}
	// What mochi routed to the old client just before the new one was registered, as the
	// publisher's goroutine hands it to the guard: put in the old client's set (ended by
	// the takeover, where it counts nowhere), then the hooks.
	guard := newTakeoverGuard(srv, nil, slog.New(slog.DiscardHandler))
	routedToOld := func(payload string) {
		pk := packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
			TopicName:   "faceagent/gw/results", PacketID: 9, Payload: []byte(payload),
		}
		old.State.Inflight.Set(pk)
		guard.OnQosPublish(old, pk, time.Now().Unix(), 0)
	}

	routedToOld("result-0")
	if got := again.expectPublishAndAck(t); string(got) != "result-0" {
		t.Fatalf("the new connection got %q, want result-0", got)
	}

	blockWriter(t, b, next, again, "faceagent/gw/results")
	inflight := next.State.Inflight.Len()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		routedToOld("result-1")
	}()
	select {
	case <-returned:
	case <-time.After(promptly):
		t.Fatalf("the publisher's redelivery did not return within %v: it waits for the new connection's socket", promptly)
	}
	if queued := next.OutboundLen(); queued != 2 {
		t.Fatalf("%d packets queued or being written for the new connection, want the blocked one and result-1", queued)
	}
	if got := next.State.Inflight.Len(); got != inflight+1 {
		t.Fatalf("%d messages in flight, want %d", got, inflight+1)
	}

	// The back office comes back on a third connection (the blocked one is cut after the
	// DISCONNECT's grace): result-1, in flight, is sent again.
	third, present := connectKept(t, b.Addr(), "office", false)
	if !present {
		t.Fatal("the session was not kept across the second takeover")
	}
	if got := third.expectPublishAndAck(t); string(got) != "result-1" {
		t.Fatalf("the third connection got %q, want result-1", got)
	}
}
