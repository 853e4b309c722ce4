package agent

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
)

// newMetricsServer is the HTTP server of /metrics and /healthz, bounded by [metrics]: without
// timeouts a keep-alive connection that sent nothing more stayed open for good, so idle
// connections could use up the process's file descriptors (the broker's too).
func newMetricsServer(m config.Metrics, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: m.ReadHeaderTimeout.Duration,
		ReadTimeout:       m.ReadTimeout.Duration,
		WriteTimeout:      m.WriteTimeout.Duration,
		IdleTimeout:       m.IdleTimeout.Duration,
		MaxHeaderBytes:    int(m.MaxHeaderBytes),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn), // accept errors, retried at most once a second
	}
}

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

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
