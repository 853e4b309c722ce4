package sdnotify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// listen opens a real unixgram socket at name (a path, or "@abstract").
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

func TestPathSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	c := listen(t, sock)
	t.Setenv("NOTIFY_SOCKET", sock)
	n, err := FromEnv()
	if err != nil || !n.Enabled() {
		t.Fatalf("FromEnv: %v, %v", n, err)
	}
	for _, step := range []struct {
		send func() error
		want string
	}{
		{n.Ready, "READY=1"},
		{n.Watchdog, "WATCHDOG=1"},
		{func() error { return n.Status("line one\nline two") }, "STATUS=line one line two"},
		{func() error { return n.Notify("READY=1", "STATUS=up") }, "READY=1\nSTATUS=up"},
		{func() error { return n.ExtendTimeout(90 * time.Second) }, "EXTEND_TIMEOUT_USEC=90000000"},
		{n.Stopping, "STOPPING=1"},
	} {
		if err := step.send(); err != nil {
			t.Fatal(err)
		}
		if got := recv(t, c); got != step.want {
			t.Fatalf("got %q, want %q", got, step.want)
		}
	}
}

func TestAbstractSocket(t *testing.T) {
	name := fmt.Sprintf("@faceagent-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	c := listen(t, name)
	n, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Ready(); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, c); got != "READY=1" {
		t.Fatalf("got %q", got)
	}
	// The same name without '@' is a (non-existent) path, not the abstract socket.
	plain, _ := New("/" + name[1:])
	if err := plain.Ready(); err == nil {
		t.Fatal("a path named like the abstract socket reached it")
	}
}

func TestDisabledAndBadSockets(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n, err := FromEnv()
	if err != nil || n != nil || n.Enabled() {
		t.Fatalf("unset NOTIFY_SOCKET: %v, %v", n, err)
	}
	if err := n.Ready(); err != nil {
		t.Fatalf("nil Notifier: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.RunWatchdog(ctx, time.Millisecond, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"vsock:2:1234", "relative/path", "@"} {
		if _, err := New(s); !errors.Is(err, ErrUnsupportedSocket) {
			t.Errorf("New(%q) = %v, want ErrUnsupportedSocket", s, err)
		}
	}
	gone, _ := New(filepath.Join(t.TempDir(), "nobody-listens"))
	if err := gone.Ready(); err == nil {
		t.Fatal("notify to a missing socket succeeded")
	}
	sock := filepath.Join(t.TempDir(), "n")
	listen(t, sock)
	ok, _ := New(sock)
	if err := ok.Notify(); err == nil {
		t.Fatal("empty notification accepted")
	}
}

func TestWatchdogInterval(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "30000000")
	t.Setenv("WATCHDOG_PID", "")
	if d, ok := WatchdogInterval(); !ok || d != 30*time.Second {
		t.Fatalf("got %v, %v", d, ok)
	}
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	if _, ok := WatchdogInterval(); !ok {
		t.Fatal("our own WATCHDOG_PID rejected")
	}
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()+1))
	if _, ok := WatchdogInterval(); ok {
		t.Fatal("another process's watchdog accepted")
	}
	t.Setenv("WATCHDOG_PID", "")
	for _, v := range []string{"", "0", "-5", "abc", "99999999999999999999"} {
		t.Setenv("WATCHDOG_USEC", v)
		if d, ok := WatchdogInterval(); ok {
			t.Errorf("WATCHDOG_USEC=%q gave %v", v, d)
		}
	}
}

// Keepalives flow while healthy; while unhealthy each tick sends STATUS with the reason and no
// WATCHDOG=1; the datagrams arrive in tick order, so the sequence is exact.
func TestRunWatchdog(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	c := listen(t, sock)
	n, _ := New(sock)
	calls := 0
	healthy := func() error { // called only from RunWatchdog's goroutine
		calls++
		if calls >= 2 && calls <= 3 {
			return errors.New("journal stuck")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.RunWatchdog(ctx, 10*time.Millisecond, healthy) }()
	want := []string{
		"WATCHDOG=1",
		"STATUS=unhealthy, withholding watchdog keepalive: journal stuck",
		"STATUS=unhealthy, withholding watchdog keepalive: journal stuck",
		"WATCHDOG=1",
		"WATCHDOG=1",
	}
	for i, w := range want {
		if got := recv(t, c); got != w {
			t.Fatalf("datagram %d: got %q, want %q", i, got, w)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunWatchdog did not return after cancel")
	}
}
