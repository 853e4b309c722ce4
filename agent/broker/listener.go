package broker

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Defaults of the connection deadlines and limits (see Options).
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultWriteTimeout   = 30 * time.Second
	// DefaultMaxConnecting bounds the connections accepted but not yet past CONNECT: the
	// terminals of a large gateway (64) reconnecting at once after a restart, with room.
	DefaultMaxConnecting = 128
)

// tcpListener is mochi's TCP listener with the deadlines and limits mochi leaves out:
//
//   - a connection must send CONNECT within connectTimeout (mochi reads the
//     first packet with no deadline, so a silent peer would hold a goroutine
//     forever);
//   - every write must finish within writeTimeout (mochi writes with no
//     deadline, so a peer that stops reading would block the goroutine
//     writing to it: a notifier, or Close disconnecting it);
//   - at most maxConnecting connections are between accept and CONNACK, and at most
//     maxOpen (max clients + maxConnecting) open at all: a socket beyond either is closed
//     as soon as it is accepted, without a goroutine or a wait for its CONNECT;
//   - a failed Accept (out of file descriptors, of buffers, a connection aborted before it
//     was accepted) is retried after a pause, as net/http's Server.Serve does, and reported
//     by healthy meanwhile: accepting must not end on an error, or the broker would
//     accept nothing more until a restart;
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
	maxConnecting  int
	srv            *mqtt.Server  // disconnects this listener's clients on Close; nil: mochi's closeClients
	log            *slog.Logger  // rate-limited (ratelog.go): peers cause every line
	health         *healthSignal // told when Accept begins failing and when it accepts again

	ln      net.Listener
	wg      sync.WaitGroup // connection goroutines (mochi adds to its own count inside them, too late for Close)
	done    chan struct{}  // closed by Close: ends a retry pause
	served  chan struct{}  // closed when Serve returns
	failure atomic.Pointer[acceptFailure]
	refused atomic.Int64 // sockets closed at accept by the limits
	// stale tells health when the last failure goes stale with no accept since (healthy
	// turns nil then): armed by each failure, on Serve's goroutine only.
	stale *time.Timer

	mu         sync.Mutex
	conns      map[*deadlineConn]struct{}
	connecting int // of conns, those not yet past CONNECT
	serving    bool
	closed     bool
}

// acceptFailure is the listener's state while Accept fails.
type acceptFailure struct {
	since, last time.Time
	err         error
}

// Accept retry pauses, as net/http's Server.Serve: 5 ms, doubling up to 1 s.
const (
	acceptDelayMin = 5 * time.Millisecond
	acceptDelayMax = time.Second
	// acceptStale: a failure older than this, with no accept since, is over (Accept is
	// waiting for a connection): a failing loop refreshes it at least every acceptDelayMax.
	acceptStale = 3 * acceptDelayMax
)

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
	l.done = make(chan struct{})
	l.served = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// Serve accepts until Close, and only Close ends it. mochi runs it in its own goroutine and
// counts the per-connection goroutines (establish) in its ClientsWg.
func (l *tcpListener) Serve(establish listeners.EstablishFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.serving = true
	l.mu.Unlock()
	defer close(l.served)

	maxOpen := math.MaxInt
	if l.srv != nil {
		if c := l.srv.Options.Capabilities.MaximumClients; c < int64(math.MaxInt-l.maxConnecting) {
			maxOpen = int(c) + l.maxConnecting
		}
	}
	var delay time.Duration
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if l.isClosed() {
				return
			}
			delay = min(max(2*delay, acceptDelayMin), acceptDelayMax)
			l.acceptFailed(err, delay)
			pause := time.NewTimer(delay)
			select {
			case <-l.done:
				pause.Stop()
				return
			case <-pause.C:
			}
			continue
		}
		delay = 0
		if f := l.failure.Swap(nil); f != nil {
			l.log.Info("broker: accepting connections again", "failed_for", time.Since(f.since).Round(time.Millisecond))
			l.health.changed()
		}
		if !l.admit(conn, maxOpen, establish) {
			return
		}
	}
}

// acceptFailed records and logs (rate-limited) a failed Accept, retried after delay.
func (l *tcpListener) acceptFailed(err error, delay time.Duration) {
	now := time.Now()
	f := &acceptFailure{since: now, last: now, err: err}
	prev := l.failure.Load()
	if prev != nil {
		f.since = prev.since
	}
	l.failure.Store(f)
	if prev == nil {
		l.health.changed()
	}
	// Accept may now wait for a connection that does not come: healthy turns nil
	// acceptStale after this failure all the same, and whoever shows health must hear it.
	if l.stale == nil {
		l.stale = time.AfterFunc(acceptStale+acceptDelayMin, l.staleCheck)
	} else {
		l.stale.Reset(acceptStale + acceptDelayMin)
	}
	l.log.Warn("broker: accepting a connection failed; retrying", "error", err, "retry_in", delay)
}

// staleCheck tells health that Accept's last failure went stale, if it did and nothing
// accepted since (an accept tells it itself).
func (l *tcpListener) staleCheck() {
	if f := l.failure.Load(); f != nil && time.Since(f.last) > acceptStale && !l.isClosed() {
		l.health.changed()
	}
}

// admit serves conn, or closes it at once when a limit is reached; false when the
// listener is closed.
func (l *tcpListener) admit(conn net.Conn, maxOpen int, establish listeners.EstablishFn) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = conn.Close()
		return false
	}
	var reason string
	switch {
	case l.connecting >= l.maxConnecting:
		reason = "too many connections before CONNECT (max_connecting)"
	case len(l.conns) >= maxOpen:
		reason = "too many connections (max_clients + max_connecting)"
	}
	if reason != "" {
		open, connecting := len(l.conns), l.connecting
		l.mu.Unlock()
		refused := l.refused.Add(1) // before the close: its peer, seeing it, sees the count
		_ = conn.Close()
		l.log.Warn("broker: connection closed at accept", "reason", reason, "remote", conn.RemoteAddr().String(),
			"open", open, "connecting", connecting, "refused_total", refused)
		return true
	}
	dc := &deadlineConn{Conn: conn, l: l}
	l.conns[dc] = struct{}{}
	l.connecting++
	l.wg.Add(1)
	l.mu.Unlock()
	// [MQTT-3.1.4-1]-adjacent: CONNECT must come first, and soon. mochi's
	// keepalive deadline replaces this one once CONNECT is read.
	_ = conn.SetReadDeadline(time.Now().Add(l.connectTimeout))
	go func() {
		defer l.wg.Done()
		_ = establish(l.id, dc)
	}()
	return true
}

func (l *tcpListener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// healthy reports nil unless Accept is failing (its last failure recent, no accept since).
func (l *tcpListener) healthy() error {
	f := l.failure.Load()
	if f == nil || time.Since(f.last) > acceptStale {
		return nil
	}
	return fmt.Errorf("broker: not accepting connections since %s: %v", f.since.Format(time.RFC3339), f.err)
}

// connectDone takes an established client's connection out of the count of those before
// CONNECT (max_connecting).
func (l *tcpListener) connectDone(cl *mqtt.Client) {
	if dc, ok := cl.Net.Conn.(*deadlineConn); ok && dc.l == l && dc.state.CompareAndSwap(connConnecting, connEstablished) {
		l.mu.Lock()
		l.connecting--
		l.mu.Unlock()
	}
}

// counts returns the open connections and those of them before CONNECT (tests).
func (l *tcpListener) counts() (open, connecting int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns), l.connecting
}

// listenerHook tells the listener when a client is past CONNECT.
type listenerHook struct {
	mqtt.HookBase
	l *tcpListener
}

func (h *listenerHook) ID() string           { return "faceagent-listener" }
func (h *listenerHook) Provides(b byte) bool { return b == mqtt.OnSessionEstablished }
func (h *listenerHook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	h.l.connectDone(cl)
}

func (l *tcpListener) Close(closeClients listeners.CloseFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	serving := l.serving
	l.mu.Unlock()
	close(l.done)
	l.disconnectClients(closeClients) // DISCONNECT to every known client
	_ = l.ln.Close()
	if serving {
		<-l.served // no accept after this: every connection is in conns
	}
	if l.stale != nil { // Serve has returned: nothing arms it again
		l.stale.Stop()
	}
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
	state     atomic.Uint32 // connConnecting, connEstablished or connClosed
	closeOnce sync.Once
}

// deadlineConn states: before CONNACK, past it, closed before it.
const (
	connConnecting uint32 = iota
	connEstablished
	connClosed
)

func (c *deadlineConn) Write(b []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.l.writeTimeout))
	return c.Conn.Write(b)
}

// NetConn returns the connection it wraps (a *tls.Conn with TLS), as tls.Conn.NetConn does.
func (c *deadlineConn) NetConn() net.Conn { return c.Conn }

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
		if c.state.CompareAndSwap(connConnecting, connClosed) {
			c.l.connecting--
		}
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
// closeConcurrency at once, so wedged clients hold Close for one grace together, not one
// each (TestWedgedTerminalsCloseTogether). The clients are listed with Clients.GetAll,
// which takes the client list's read lock once: mochi's own closeClients
// (Server.closeListenerClients, Clients.GetByListener) takes it twice (GetByListener calls
// Len under its RLock), and a client leaving between the two (Clients.Delete waits for the
// write lock) would deadlock Close for good.
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
