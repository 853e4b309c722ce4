package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/ui"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// runAgent runs an agent with src until the test ends.
func runAgent(t *testing.T, src string) *agent.Agent {
	t.Helper()
	_, a, _ := startAgentOpts(t, &agent.Options{Config: parse(t, src)})
	return a
}

// getOn sends GET path on an open HTTP/1.1 connection (kept alive) and returns the status
// and body.
func getOn(t *testing.T, c net.Conn, r *bufio.Reader, path string) (int, string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// closedWithin reports whether the server closes c within d (nothing else arrives).
func closedWithin(c net.Conn, r io.Reader, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := r.Read(make([]byte, 1))
	switch {
	case errors.Is(err, io.EOF) || (err != nil && strings.Contains(err.Error(), "connection reset")):
		return nil
	case err != nil:
		return err
	default:
		return fmt.Errorf("read %d bytes", n)
	}
}

// TestMetricsServerBounds: the metrics server had only a read-header timeout, so a
// keep-alive connection that sent nothing more stayed open for good, and connections had
// no bound: idle ones could use up the process's file descriptors (the broker's too). An
// idle connection is now closed after idle_timeout, and beyond max_connections a connection
// is closed as soon as it is accepted.
func TestMetricsServerBounds(t *testing.T) {
	a := runAgent(t, "[agent]\ndata_dir = \""+filepath.Join(t.TempDir(), "d")+"\"\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[metrics]\nlisten = \"127.0.0.1:0\"\nidle_timeout = \"300ms\"\nread_header_timeout = \"10s\"\nmax_connections = 2\n")
	addr := a.MetricsAddr()

	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	r := bufio.NewReader(idle)
	if code, body := getOn(t, idle, r, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if err := closedWithin(idle, r, 5*time.Second); err != nil {
		t.Fatalf("an idle keep-alive connection was not closed after idle_timeout (300ms): %v", err)
	}

	// Two connections that send nothing take both slots (the read-header timeout is 10s);
	// a third is closed at once.
	silent := make([]net.Conn, 2)
	for i := range silent {
		if silent[i], err = net.Dial("tcp", addr); err != nil {
			t.Fatal(err)
		}
		defer silent[i].Close()
	}
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if err := closedWithin(third, third, 2*time.Second); err != nil {
		t.Fatalf("a connection beyond max_connections (2) was not closed at once: %v", err)
	}
	// One goes: there is room again.
	_ = silent[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) { // the server had not seen the close yet: try again
			t.Fatalf("no room after a connection closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The child of TestHealthzReportsBrokerAcceptFailure: an agent running the embedded broker
// and /healthz (and the operator's page, on the same server) in a process with few file
// descriptors to spare; it logs to stdout and says "ready BROKER METRICS".
const healthChildEnv = "FACEAGENT_HEALTH_CHILD" // the data dir

// healthChildSpare is how many descriptors the child may open once it runs: the test's
// metrics connection and a few broker connections, far fewer than the test opens.
const healthChildSpare = 16

func healthChild(dir string) {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "health child:", err); os.Exit(3) }
	src := "[agent]\ngateway_id = \"gw-h\"\ndata_dir = \"" + dir + "\"\n[broker]\nlisten = \"127.0.0.1:0\"\nmax_connecting = 100000\n" +
		"[metrics]\nlisten = \"127.0.0.1:0\"\n[ui]\nlisten = \"127.0.0.1:0\"\n[[devices]]\nid = \"h1\"\n"
	cfg, err := config.Parse("health.toml", []byte(src), nil)
	if err != nil {
		fail(err)
	}
	a, err := agent.New(&agent.Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(os.Stdout, nil))})
	if err != nil {
		fail(err)
	}
	go func() { fail(a.Run(context.Background())) }()
	<-a.Ready()
	if _, err := testutil.LowerFileLimit(healthChildSpare); err != nil {
		fail(err)
	}
	fmt.Println("ready", a.BrokerAddr(), a.MetricsAddr())
	select {} // until the SIGKILL
}

// TestHealthzReportsBrokerAcceptFailure: while the embedded broker could not accept
// connections (its descriptors used up by sockets that never send CONNECT) /healthz still
// said ok, and so did the systemd watchdog. It now answers 503 with the reason while Accept
// fails, and 200 again once a client can connect. The operator's page, open meanwhile,
// shows both changes within three seconds (its keep-alive is 25 s away): the broker tells
// it.
func TestHealthzReportsBrokerAcceptFailure(t *testing.T) {
	child := testutil.StartChild(t, healthChildEnv+"="+t.TempDir())
	f := strings.Fields(child.WaitLine("ready ", 30*time.Second))
	brokerAddr, metricsAddr := f[1], f[2]

	// A keep-alive connection to /healthz, opened while descriptors are left.
	hc, err := net.Dial("tcp", metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	hr := bufio.NewReader(hc)
	if code, body := getOn(t, hc, hr, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz before: %d %s", code, body)
	}
	page := openPageStream(t, metricsAddr)
	page.waitState("healthy", 3*time.Second, func(st ui.State) bool { return st.Health.OK })

	silent := make([]net.Conn, 0, 4*healthChildSpare)
	defer func() {
		for _, c := range silent {
			_ = c.Close()
		}
	}()
	for range cap(silent) {
		c, err := net.DialTimeout("tcp", brokerAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	child.WaitLine("accepting a connection failed; retrying", 5*time.Second)
	page.waitState("the broker not accepting", 3*time.Second, func(st ui.State) bool {
		return !st.Health.OK && strings.Contains(st.Health.Problem, "not accepting connections")
	})
	code, body := getOn(t, hc, hr, "/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not accepting connections") {
		t.Fatalf("/healthz while the broker cannot accept: %d %q, want 503 with the reason", code, body)
	}

	for _, c := range silent {
		_ = c.Close()
	}
	silent = silent[:0]
	conn, err := net.DialTimeout("tcp", brokerAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pc := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pc.Connect(ctx, &paho.Connect{ClientID: "after", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatalf("a client after the descriptors came back: %v", err)
	}
	defer pc.Disconnect(&paho.Disconnect{})
	// The client got in, but the broker may still be closing the silent sockets' server
	// ends (it sees their EOF only now), and an Accept of one still queued may fail once
	// more meanwhile: /healthz turns 200 at the next accept, within the 1 s retry pause.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := getOn(t, hc, hr, "/healthz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz once the broker accepts again: still %d %s after 10 s", code, body)
		}
		time.Sleep(50 * time.Millisecond) // polling /healthz, which has no event to wait on
	}
	page.waitState("healthy again", 3*time.Second, func(st ui.State) bool { return st.Health.OK })
}
