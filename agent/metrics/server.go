package metrics

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// ServerOptions bound the HTTP server of /metrics and /healthz. Without timeouts a
// keep-alive connection that sends nothing more stays open for good, so idle connections
// could use up the process's file descriptors (the broker's too).
type ServerOptions struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
	// MaxConnections is how many connections may be open at once; one beyond is closed as
	// soon as it is accepted (Serve).
	MaxConnections int
}

// Server is the bounded HTTP server of /metrics and /healthz.
type Server struct {
	http *http.Server
	o    ServerOptions
	log  *slog.Logger
}

// NewServer returns a server of h bounded by o; its accept errors and refusals go to log.
func NewServer(o ServerOptions, h http.Handler, log *slog.Logger) *Server {
	return &Server{o: o, log: log, http: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn), // accept errors, retried at most once a second
	}}
}

// Serve serves l until Shutdown, with at most MaxConnections connections open at once.
func (s *Server) Serve(l net.Listener) error {
	return s.http.Serve(newLimitListener(l, s.o.MaxConnections, s.log))
}

// Shutdown stops the server as http.Server.Shutdown does.
func (s *Server) Shutdown(ctx context.Context) error { return s.http.Shutdown(ctx) }

// limitListener closes a connection it accepts beyond max open ones at once, instead of
// leaving it in the kernel's queue (as golang.org/x/net/netutil.LimitListener does, which
// stops accepting): a client beyond the limit learns it at once, and the queue never fills.
type limitListener struct {
	net.Listener
	max  int
	log  *slog.Logger
	open atomic.Int64

	mu         sync.Mutex
	lastLogged time.Time
	refused    int
}

func newLimitListener(l net.Listener, max int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: l, max: max, log: log}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err // net/http retries temporary errors itself
		}
		if l.open.Add(1) <= int64(l.max) {
			return &limitedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		_ = c.Close()
		l.refusedOne(c.RemoteAddr())
	}
}

// refusedOne logs a refused connection, at most once a second with the count since.
func (l *limitListener) refusedOne(remote net.Addr) {
	l.mu.Lock()
	l.refused++
	if time.Since(l.lastLogged) < time.Second {
		l.mu.Unlock()
		return
	}
	n := l.refused
	l.refused, l.lastLogged = 0, time.Now()
	l.mu.Unlock()
	l.log.Warn("metrics: connection closed at accept: max_connections open", "max_connections", l.max,
		"remote", remote.String(), "refused", n)
}

// limitedConn gives its slot back when closed (once).
type limitedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

// Close gives the slot back before it closes the socket: a peer that sees its connection
// end and connects again must find the slot free (given back after, the new connection
// could be refused as one too many). Open descriptors can pass the bound by the sockets
// being closed at that moment, never by one that stays open.
func (c *limitedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// Close closes the server's listeners and connections at once, as http.Server.Close does.
func (s *Server) Close() error { return s.http.Close() }
