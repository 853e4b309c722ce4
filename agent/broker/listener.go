package broker

import (
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Defaults of the connection deadlines (see Options).
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultWriteTimeout   = 30 * time.Second
)

// tcpListener is mochi's TCP listener with the deadlines mochi leaves out:
//
//   - a connection must send CONNECT within connectTimeout (mochi reads the
//     first packet with no deadline, so a silent peer would hold a goroutine
//     forever);
//   - every write must finish within writeTimeout (mochi writes with no
//     deadline, so a peer that stops reading would block the goroutine
//     writing to it: a notifier, or Close disconnecting it);
//   - Close closes every connection still open once mochi has disconnected
//     its clients, so Close cannot wait on one that never finished CONNECT,
//     and then waits for every connection goroutine (mochi counts them from
//     inside the goroutine, which can miss one that just started).
type tcpListener struct {
	id             string
	address        string
	tlsConfig      *tls.Config
	connectTimeout time.Duration
	writeTimeout   time.Duration
	srv            *mqtt.Server // disconnects this listener's clients on Close; nil: mochi's closeClients

	ln     net.Listener
	wg     sync.WaitGroup // connection goroutines (mochi adds to its own count inside them, too late for Close)
	mu     sync.Mutex
	conns  map[*deadlineConn]struct{}
	closed bool
}

var _ listeners.Listener = (*tcpListener)(nil)

func (l *tcpListener) ID() string       { return l.id }
func (l *tcpListener) Protocol() string { return "tcp" }

// Address returns the bound address once listening, else the configured one.
func (l *tcpListener) Address() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		return l.ln.Addr().String()
	}
	return l.address
}

func (l *tcpListener) Init(*slog.Logger) error {
	ln, err := net.Listen("tcp", l.address)
	if err != nil {
		return err
	}
	if l.tlsConfig != nil {
		ln = tls.NewListener(ln, l.tlsConfig)
	}
	l.mu.Lock()
	l.ln = ln
	l.conns = make(map[*deadlineConn]struct{})
	l.mu.Unlock()
	return nil
}

// Serve accepts until Close. mochi runs it in its own goroutine and counts
// the per-connection goroutines (establish) in its ClientsWg.
func (l *tcpListener) Serve(establish listeners.EstablishFn) {
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			return
		}
		dc := &deadlineConn{Conn: conn, l: l}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = conn.Close()
			return
		}
		l.conns[dc] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		// [MQTT-3.1.4-1]-adjacent: CONNECT must come first, and soon. mochi's
		// keepalive deadline replaces this one once CONNECT is read.
		_ = conn.SetReadDeadline(time.Now().Add(l.connectTimeout))
		go func() {
			defer l.wg.Done()
			_ = establish(l.id, dc)
		}()
	}
}

func (l *tcpListener) Close(closeClients listeners.CloseFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.mu.Unlock()
	l.disconnectClients(closeClients) // DISCONNECT to every known client
	_ = l.ln.Close()
	l.mu.Lock()
	open := make([]*deadlineConn, 0, len(l.conns))
	for c := range l.conns {
		open = append(open, c)
	}
	l.mu.Unlock()
	for _, c := range open { // mid-CONNECT, or not yet known to mochi
		_ = c.Close()
	}
	l.wg.Wait() // every connection goroutine has seen its connection close
}

// deadlineConn bounds every write and forgets itself when closed.
type deadlineConn struct {
	net.Conn
	l         *tcpListener
	closeOnce sync.Once
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.l.writeTimeout))
	return c.Conn.Write(b)
}

// CloseWrite shuts the connection's write side, as mochi does after a DISCONNECT so that
// the peer reads it before the connection closes (mochi's DisconnectLinger).
func (c *deadlineConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *deadlineConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return err
}

// closeConcurrency bounds the DISCONNECTs Close sends at once. A wedged client's takes
// mochi's grace (0.5 s, third_party/mochi: "wedged peer") before the client is stopped
// without it; a healthy one's, microseconds. 64 (the agent's terminals on one gateway) go
// in one grace; each costs a goroutine for that long.
const closeConcurrency = 64

// disconnectClients sends DISCONNECT to every client of this listener, up to
// closeConcurrency at once: one after another, each wedged client held Close for the
// grace (six: 3 s; TestWedgedTerminalsCloseTogether). mochi v2.7.9's own closeClients
// (Server.closeListenerClients → Clients.GetByListener) takes the client list's read lock
// twice (GetByListener calls Len under its RLock): a client leaving at that moment
// (Clients.Delete waits for the write lock between the two) deadlocked Close for good
// (TestHLCExample hung once in about ten runs). Clients.GetAll takes the read lock once.
func (l *tcpListener) disconnectClients(closeClients listeners.CloseFn) {
	if l.srv == nil {
		closeClients(l.id)
		return
	}
	slots := make(chan struct{}, closeConcurrency)
	var wg sync.WaitGroup
	for _, cl := range l.srv.Clients.GetAll() {
		if cl.Net.Listener != l.id || cl.Closed() {
			continue
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = l.srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
			<-slots
		}()
	}
	wg.Wait()
}
