package mqtt

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// lingerClient is a client of a new server over one end of a pipe; the test is the peer at
// the other end.
func lingerClient(t *testing.T) (*Server, *Client, net.Conn) {
	t.Helper()
	s := New(&Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { _ = s.Close() })
	conn, peer := net.Pipe()
	t.Cleanup(func() { _ = peer.Close(); _ = conn.Close() })
	cl := s.NewClient(conn, "t", "linger", false)
	cl.Properties.ProtocolVersion = 5
	return s, cl, peer
}

// A client whose reader has finished (finishLinger ran, nothing will drain) and is then
// sent a DISCONNECT has its connection closed by Stop, as without the linger: no reader is
// left to close it.
func TestDisconnectAfterReaderGoneCloses(t *testing.T) {
	s, cl, peer := lingerClient(t)
	cl.finishLinger()
	type result struct {
		b   []byte
		err error
	}
	got := make(chan result, 1)
	go func() {
		// Until the pipe closes; a second means it was left open.
		_ = peer.SetReadDeadline(time.Now().Add(time.Second))
		b, err := io.ReadAll(peer)
		got <- result{b, err}
	}()
	_ = s.DisconnectClient(cl, packets.ErrReceiveMaximum)
	r := <-got
	if r.err != nil {
		t.Fatalf("peer read % x, then %v; want the connection closed", r.b, r.err)
	}
	if !bytes.HasPrefix(r.b, []byte{packets.Disconnect << 4}) || !bytes.Contains(r.b, []byte{packets.ErrReceiveMaximum.Code}) {
		t.Fatalf("peer read % x, want the DISCONNECT 0x93", r.b)
	}
}

// A client sent a DISCONNECT while its reader runs keeps its connection open after Stop;
// the reader's finishLinger drains it and closes it once the peer is done, the DISCONNECT
// read first.
func TestDisconnectLingersUntilTheReaderDrains(t *testing.T) {
	s, cl, peer := lingerClient(t)
	head := make([]byte, 2) // the DISCONNECT's fixed header; its length is under 128
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(peer, head)
		if err == nil {
			_, err = io.ReadFull(peer, make([]byte, head[1]))
		}
		read <- err
	}()
	_ = s.DisconnectClient(cl, packets.ErrReceiveMaximum)
	if err := <-read; err != nil || head[0] != packets.Disconnect<<4 {
		t.Fatalf("peer read % x, %v; want a DISCONNECT", head, err)
	}
	if !cl.Closed() {
		t.Fatal("client not stopped after its DISCONNECT")
	}
	// Still open: the peer's writes go through (the reader's drain takes them).
	drained := make(chan struct{})
	go func() { cl.finishLinger(); close(drained) }()
	_ = peer.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := peer.Write([]byte{packets.Pingreq << 4, 0}); err != nil {
		t.Fatalf("peer's write after the DISCONNECT: %v", err)
	}
	_ = peer.Close() // the peer is done: the drain ends and closes at once
	select {
	case <-drained:
	case <-time.After(DisconnectLinger / 2):
		t.Fatal("the drain did not end when the peer closed")
	}
	if _, err := cl.Net.Conn.Write([]byte{0}); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("write to the client's connection after the drain: %v, want it closed", err)
	}
}

// A connection the server sent a DISCONNECT to no longer counts as a connected client
// while it lingers (DisconnectLinger): at MaximumClients 1, another client connects during
// the linger. Before, Info.ClientsConnected counted it until the linger ended, so every
// CONNECT in that second was refused with 0x97 (a client disconnected for a fault and
// reconnecting at once, on a gateway serving its full count).
func TestLingeringConnectionIsNotConnected(t *testing.T) {
	s := newQuotaServer(t, func(c *Capabilities) { c.MaximumClients = 1 })
	a := pipeConnect(t, s, "a", 0)
	cl, _ := s.Clients.Get("a")
	go func() { _ = s.DisconnectClient(cl, packets.ErrReceiveMaximum) }()
	a.expect(packets.Disconnect, 0) // and the connection stays open on this side
	waitFor(t, "the disconnected client no longer counted", func() bool { return atomic.LoadInt64(&s.Info.ClientsConnected) == 0 })
	_ = a.conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := a.conn.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read on the disconnected connection: %v, want it still open (lingering)", err)
	}
	pipeConnect(t, s, "b", 0) // CONNACK 0 within the linger
}
