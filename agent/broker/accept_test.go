package broker

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// The child of TestAcceptSurvivesDescriptorExhaustion: a broker in a process with few file
// descriptors to spare, logging to stdout, which also says what Healthy answers each time
// OnHealthChanged tells it ("health: ok" or "health: " and the error). init, not TestMain:
// the package's TestMain is goleak's.
const acceptChildEnv = "FACEAGENT_BROKER_ACCEPT_CHILD"

// acceptChildSpare is how many descriptors the child may open beyond those it has once its
// broker listens: a few connections, far fewer than the test opens.
const acceptChildSpare = 16

func init() {
	if os.Getenv(acceptChildEnv) == "" {
		return
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "accept child:", err)
		os.Exit(3)
	}
	b, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true, ConnectTimeout: time.Minute,
		MaxConnecting: 1 << 20, Logger: slog.New(slog.NewTextHandler(os.Stdout, nil))})
	if err != nil {
		fail(err)
	}
	if err := b.Start(); err != nil {
		fail(err)
	}
	b.OnHealthChanged(func() {
		if err := b.Healthy(); err != nil {
			fmt.Println("health:", err)
		} else {
			fmt.Println("health: ok")
		}
	})
	if _, err := testutil.LowerFileLimit(acceptChildSpare); err != nil {
		fail(err)
	}
	fmt.Println("ready", b.Addr())
	select {}
}

// TestAcceptSurvivesDescriptorExhaustion: the broker's accept loop returned on any Accept
// error, so running out of file descriptors once (sockets that never send CONNECT) ended
// accepting until a restart: the listen queue stayed full, nothing was logged, and every
// client reconnecting afterwards was locked out. Now a failed Accept is logged, retried
// after a pause (5 ms doubling to 1 s), and reported by Healthy; once the silent sockets
// are gone a real client connects and Healthy is nil again. OnHealthChanged tells of both
// changes (the child prints Healthy's answer only when told).
func TestAcceptSurvivesDescriptorExhaustion(t *testing.T) {
	child := testutil.StartChild(t, acceptChildEnv+"=1")
	addr := strings.TrimPrefix(child.WaitLine("ready ", 30*time.Second), "ready ")

	silent := make([]net.Conn, 0, 4*acceptChildSpare)
	defer func() {
		for _, c := range silent {
			_ = c.Close()
		}
	}()
	for range cap(silent) { // the kernel completes them into the listen queue
		c, err := net.DialTimeout("tcp", addr, waitFor)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	// The failure is logged and Healthy reports it (in either order: the child's goroutines).
	child.WaitLines(waitFor, "accepting a connection failed; retrying", "health: broker: not accepting connections since")

	for _, c := range silent {
		_ = c.Close()
	}
	silent = silent[:0]
	c := dialMem(t, addr)
	if code, _ := connectOn(t, c, "after-exhaustion", "", "", 5, true); code != 0 {
		t.Fatalf("CONNACK %#x", code)
	}
	child.WaitLines(waitFor, "accepting connections again", "health: ok")
}

// TestConnectionsBeyondLimitsAreClosedAtAccept: sockets that never send CONNECT must not
// hold goroutines and descriptors without bound. At most MaxConnecting are between accept
// and CONNACK; a socket beyond that, or beyond MaxClients + MaxConnecting, is closed as
// soon as it is accepted, before any CONNECT.
func TestConnectionsBeyondLimitsAreClosedAtAccept(t *testing.T) {
	b := startBroker(t, Options{MaxConnecting: 2, ConnectTimeout: time.Minute})
	s1, s2 := dialSilent(t, b.Addr()), dialSilent(t, b.Addr())
	eventually(t, "two silent sockets accepted", func() bool { _, n := b.listener.counts(); return n == 2 })
	expectClosedAtAccept(t, b.Addr(), "a third socket before CONNECT")
	_ = s1.Close()
	eventually(t, "a silent socket gone", func() bool { _, n := b.listener.counts(); return n == 1 })
	if _, code, _ := connectAs(t, b.Addr(), "real", "", "", 5, true); code != 0 {
		t.Fatalf("a client with a free slot: CONNACK %#x", code)
	}
	eventually(t, "the client past CONNECT", func() bool { _, n := b.listener.counts(); return n == 1 })
	_ = s2.Close()

	// Two clients connected (MaxClients), two sockets before CONNECT: the next is closed.
	b = startBroker(t, Options{MaxClients: 2, MaxConnecting: 2, ConnectTimeout: time.Minute})
	for _, id := range []string{"a", "b"} {
		if _, code, _ := connectAs(t, b.Addr(), id, "", "", 5, true); code != 0 {
			t.Fatalf("%s: CONNACK %#x", id, code)
		}
	}
	// Past CONNECT once OnSessionEstablished ran, just after their CONNACK.
	eventually(t, "two clients established", func() bool { open, n := b.listener.counts(); return open == 2 && n == 0 })
	dialSilent(t, b.Addr())
	dialSilent(t, b.Addr())
	eventually(t, "four connections", func() bool { open, n := b.listener.counts(); return open == 4 && n == 2 })
	expectClosedAtAccept(t, b.Addr(), "a socket beyond max_clients + max_connecting")
	if n := b.RefusedConnections(); n != 1 {
		t.Errorf("RefusedConnections = %d, want 1", n)
	}
}

// dialSilent opens a connection that sends nothing; closed when t ends.
func dialSilent(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// expectClosedAtAccept dials addr and expects the broker to close the connection before
// it sends anything.
func expectClosedAtAccept(t *testing.T, addr, what string) {
	t.Helper()
	c := dialSilent(t, addr)
	_ = c.SetReadDeadline(time.Now().Add(promptly))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("%s: read = %v, want the broker to close it at once", what, err)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}
