package sdnotify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// ErrUnsupportedSocket is returned when NOTIFY_SOCKET names a socket kind this package does
// not speak (systemd ≥ 254 also allows "vsock:CID:PORT", used only inside VMs).
var ErrUnsupportedSocket = errors.New("sdnotify: unsupported NOTIFY_SOCKET")

// Notifier sends state changes to the service manager. A nil *Notifier is valid and does
// nothing, so callers need not check whether they run under systemd.
type Notifier struct {
	addr *net.UnixAddr
}

// New returns a Notifier for the socket named like NOTIFY_SOCKET: an absolute path
// ("/run/systemd/notify") or an abstract socket name starting with '@'. An empty name gives nil.
func New(socket string) (*Notifier, error) {
	switch {
	case socket == "":
		return nil, nil
	case socket[0] == '/' || (socket[0] == '@' && len(socket) > 1):
		// sd_notify(3): '@' stands for the leading NUL of an abstract socket; Go's net package
		// makes the same translation for a UnixAddr name starting with '@' on Linux.
		return &Notifier{addr: &net.UnixAddr{Name: socket, Net: "unixgram"}}, nil
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnsupportedSocket, socket)
	}
}

// FromEnv returns a Notifier for $NOTIFY_SOCKET, or nil (which does nothing) when it is unset.
func FromEnv() (*Notifier, error) {
	return New(os.Getenv("NOTIFY_SOCKET"))
}

// Enabled reports whether notifications go anywhere.
func (n *Notifier) Enabled() bool { return n != nil }

// Notify sends one datagram holding the given "KEY=VALUE" assignments, newline-separated, as
// sd_notify(3) does. It dials per call: a daemon notifies rarely, and a fresh socket survives a
// restart of the service manager. On a nil Notifier it does nothing.
func (n *Notifier) Notify(state ...string) error {
	if n == nil {
		return nil
	}
	msg := strings.Join(state, "\n")
	if msg == "" {
		return errors.New("sdnotify: empty state")
	}
	conn, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(msg)); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	return nil
}

// Ready tells the service manager that start-up finished (Type=notify units stay "activating"
// until this arrives). Send it once the broker listens and the journal is open.
func (n *Notifier) Ready() error { return n.Notify("READY=1") }

// Stopping tells the service manager that shutdown began, so a slow flush is not mistaken for
// a hang.
func (n *Notifier) Stopping() error { return n.Notify("STOPPING=1") }

// Status sets the one-line status `systemctl status` shows.
func (n *Notifier) Status(msg string) error { return n.Notify("STATUS=" + oneLine(msg)) }

// ExtendTimeout asks for d more time before the start (or stop) timeout fires
// (EXTEND_TIMEOUT_USEC, systemd ≥ 236): send it while replaying a large journal on a slow SD
// card, repeatedly if needed, instead of raising TimeoutStartSec for every start.
func (n *Notifier) ExtendTimeout(d time.Duration) error {
	return n.Notify("EXTEND_TIMEOUT_USEC=" + strconv.FormatInt(d.Microseconds(), 10))
}

// Watchdog sends one keepalive (WATCHDOG=1).
func (n *Notifier) Watchdog() error { return n.Notify("WATCHDOG=1") }

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// WatchdogInterval returns the unit's WatchdogSec from $WATCHDOG_USEC, and false when the
// watchdog is off or meant for another process ($WATCHDOG_PID set and not ours). Keepalives must
// arrive more often than this; RunWatchdog sends them at half of it.
func WatchdogInterval() (time.Duration, bool) {
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0, false
	}
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 || usec > int64(time.Duration(1<<63-1)/time.Microsecond) {
		return 0, false
	}
	return time.Duration(usec) * time.Microsecond, true
}

// RunWatchdog sends keepalives every interval/2 until ctx is done, and blocks until then; it
// returns nil. healthy (may be nil) is asked before each keepalive: while it returns an error
// the keepalive is withheld and STATUS carries the error instead, so a wedged agent is
// restarted by systemd after WatchdogSec rather than kept alive by a ticker that still works.
// A failed send is retried at the next tick. On a nil Notifier or interval <= 0 it just waits
// for ctx.
func (n *Notifier) RunWatchdog(ctx context.Context, interval time.Duration, healthy func() error) error {
	if n == nil || interval <= 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if healthy != nil {
			if err := healthy(); err != nil {
				_ = n.Status("unhealthy, withholding watchdog keepalive: " + err.Error())
				continue
			}
		}
		_ = n.Watchdog()
	}
}
