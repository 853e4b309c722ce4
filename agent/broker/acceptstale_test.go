package broker

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"
)

// failOnceListener's Accept fails once (a connection aborted in the queue), then waits
// for a connection that never comes, until Close.
type failOnceListener struct {
	once   sync.Once
	closed chan struct{}
}

func (f *failOnceListener) Accept() (net.Conn, error) {
	failed := false
	f.once.Do(func() { failed = true })
	if failed {
		return nil, errors.New("accept: connection aborted")
	}
	<-f.closed
	return nil, net.ErrClosed
}

func (f *failOnceListener) Close() error {
	select {
	case <-f.closed:
	default:
		close(f.closed)
	}
	return nil
}

func (f *failOnceListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// A failing Accept that ends without a connection (Accept then waits for one) turns
// Healthy nil acceptStale after the failure; OnHealthChanged's function hears that too, or
// whoever shows health (the operator's page) would show the failure until it asked again.
func TestAcceptFailureLapseIsTold(t *testing.T) {
	health := &healthSignal{}
	l := &tcpListener{id: "t", log: slog.New(slog.DiscardHandler), health: health, maxConnecting: 1,
		ln: &failOnceListener{closed: make(chan struct{})}, conns: map[*deadlineConn]struct{}{},
		done: make(chan struct{}), served: make(chan struct{})}
	told := make(chan error, 8)
	fn := func() {
		select {
		case told <- l.healthy():
		default:
		}
	}
	health.fn.Store(&fn)
	go l.Serve(func(string, net.Conn) error { return nil })
	defer l.Close(func(string) {})

	select {
	case err := <-told:
		if err == nil {
			t.Fatal("told healthy when Accept began failing")
		}
	case <-time.After(waitFor):
		t.Fatal("not told that Accept began failing")
	}
	start := time.Now()
	select {
	case err := <-told:
		if err != nil {
			t.Fatalf("told, but Healthy still says %v", err)
		}
		if took := time.Since(start); took < acceptStale-time.Second {
			t.Fatalf("told healthy after %v, before the failure went stale (%v)", took, acceptStale)
		}
	case <-time.After(acceptStale + waitFor):
		t.Fatalf("not told within %v that the failure went stale", acceptStale+waitFor)
	}
}
