// SPDX-License-Identifier: MIT

package mqtt

// faceagent patch (terminal queues): Client.ResizeOutbound, carried out by the writer
// goroutine.
//
//	go test -race -run 'TestResizeOutbound|TestResizeKeepsARacingPublish' github.com/mochi-mqtt/server/v2

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// ResizeOutbound on a client whose writer runs replaces an empty queue by a shorter one,
// and refuses a longer one, a second resize, and a client that has stopped; a resize
// waiting for a writer that has stopped returns. The marker it queues is never written to
// the peer.
func TestResizeOutbound(t *testing.T) {
	s := newPipeServer(t)
	full := int(s.Options.Capabilities.MaximumClientWritesPending)
	cl, conn := pipeClient(t, s, "t01", "dev/face/t01") // its writer runs
	r := bufio.NewReader(conn)

	if cl.ResizeOutbound(full * 2) {
		t.Fatal("a resize to a longer queue was applied")
	}
	done := make(chan bool, 1)
	go func() { done <- cl.ResizeOutbound(8) }()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("a resize of an empty queue was refused")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ResizeOutbound still waits for a running writer")
	}
	if slots := cl.OutboundCap(); slots != 8 {
		t.Fatalf("queue of %d slots after the resize, want 8", slots)
	}
	// WriteLoop counts the marker out once the writer has taken it, after the resize.
	waitFor(t, "the marker counted out", func() bool { return cl.OutboundLen() == 0 })
	if cl.ResizeOutbound(8) {
		t.Fatal("a resize to the same size was applied")
	}
	// The writer goes on with the new queue, and wrote nothing for the marker: the first
	// packet the peer reads is a message routed to the client.
	if err := s.Publish("dev/face/t01", []byte("cmd"), false, 0); err != nil {
		t.Fatal(err)
	}
	if got := readPublish(t, conn, r); string(got.Payload) != "cmd" {
		t.Fatalf("payload %q, want cmd", got.Payload)
	}
	cl.Stop(nil)
	if cl.ResizeOutbound(4) {
		t.Fatal("a resize of a stopped client was applied")
	}

	// A writer that is not running (stopped before it took the marker): the resize returns
	// once the client stops.
	conn2, peer2 := net.Pipe()
	defer peer2.Close()
	idle := s.NewClient(conn2, "test", "t02", false)
	resized := make(chan bool, 1)
	go func() { resized <- idle.ResizeOutbound(4) }()
	waitFor(t, "the marker queued", func() bool { return idle.OutboundLen() == 1 })
	idle.Stop(nil)
	select {
	case ok := <-resized:
		if ok {
			t.Fatal("a resize reported done with no writer")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ResizeOutbound still waits for a writer of a stopped client")
	}
}

// A message queued behind the marker, by a publisher routing on a stale subscriber list
// (the server routes by client id: a client taking a clean session over gets deliveries
// meant for the one it replaced) between ResizeOutbound's check and the swap, is written,
// not left in the replaced queue where no one reads it and no drop is reported: the client
// keeps its full queue.
func TestResizeKeepsARacingPublish(t *testing.T) {
	s := newPipeServer(t)
	full := int(s.Options.Capabilities.MaximumClientWritesPending)
	near, far := net.Pipe()
	t.Cleanup(func() { _ = near.Close(); _ = far.Close() })
	cl := s.NewClient(near, "t", "t01", false) // its writer does not run yet
	cl.Properties.ProtocolVersion = 5
	t.Cleanup(func() { cl.Stop(nil) })
	resized := make(chan bool, 1)
	go func() { resized <- cl.ResizeOutbound(8) }() // the reader goroutine, in OnSubscribe
	waitFor(t, "the marker queued", func() bool { return cl.OutboundLen() == 1 })
	// The racing publisher, routed to the client's old queue.
	s.Clients.Add(cl)
	s.Topics.Subscribe(cl.ID, packets.Subscription{Filter: "dev/face/t01"})
	if err := s.Publish("dev/face/t01", []byte("cmd"), false, 0); err != nil {
		t.Fatal(err)
	}
	if q := cl.OutboundLen(); q != 2 {
		t.Fatalf("%d packets queued, want the marker and the message", q)
	}
	go cl.WriteLoop()
	if got := readPublish(t, far, bufio.NewReader(far)); string(got.Payload) != "cmd" {
		t.Fatalf("payload %q, want cmd", got.Payload)
	}
	select {
	case ok := <-resized:
		if ok {
			t.Fatal("the queue was replaced with a message behind the marker")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ResizeOutbound still waits for the writer")
	}
	if slots := cl.OutboundCap(); slots != full {
		t.Fatalf("queue of %d slots after a racing publish, want the full %d kept", slots, full)
	}
}
