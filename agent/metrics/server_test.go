package metrics

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// A connection beyond MaxConnections is closed as soon as it is accepted, and its slot
// comes back when an open one closes.
func TestServerClosesConnectionsBeyondItsBound(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ServerOptions{ReadHeaderTimeout: 5 * time.Second, MaxConnections: 1},
		http.NotFoundHandler(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	defer func() { _ = s.Close(); <-done }()

	first, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// The first is served: a request gets an answer, so it holds the slot now.
	_, _ = first.Write([]byte("GET / HTTP/1.1\r\nHost: t\r\n\r\n"))
	_ = first.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := first.Read(make([]byte, 64)); n == 0 {
		t.Fatalf("the first connection got no answer: %v", err)
	}
	second, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := second.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the connection beyond the bound: read %d, %v; want it closed", n, err)
	}
	first.Close()
	// The slot comes back once the server has seen the close: a new connection is served.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: t\r\n\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := c.Read(make([]byte, 64))
		c.Close()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection served after the first one closed")
		}
		time.Sleep(10 * time.Millisecond) // the server closes the first one's end asynchronously
	}
}

// closeProbe is a net.Conn whose Close notes how many connections its listener counted
// open at that moment.
type closeProbe struct {
	net.Conn
	l        *limitListener
	openSeen int64
}

func (c *closeProbe) Close() error { c.openSeen = c.l.open.Load(); return nil }

// A connection's slot is free before its socket closes: a peer that sees its connection
// end and connects at once must not be refused as one too many.
func TestSlotFreeBeforeTheSocketCloses(t *testing.T) {
	l := newLimitListener(nil, 1, slog.New(slog.DiscardHandler))
	l.open.Store(1)
	probe := &closeProbe{l: l}
	c := &limitedConn{Conn: probe, l: l}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if probe.openSeen != 0 {
		t.Fatalf("the socket closed while its slot was still counted (%d open)", probe.openSeen)
	}
	if err := c.Close(); err != nil || l.open.Load() != 0 {
		t.Fatalf("a second Close: %v, %d open", err, l.open.Load())
	}
}
