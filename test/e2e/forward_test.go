package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// Acks and heartbeats forwarded while the external broker is down are in data_dir/forward
// when the agent stops; the next run delivers them, in order, to a back office on the
// restarted broker. The terminals are simulated on the embedded broker, tasks come over
// HTTP (the upstream broker is away).
func TestForwardedAcksSurviveAgentRestart(t *testing.T) {
	m := testutil.StartMosquitto(t)
	m.Stop()
	var listed atomic.Bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if listed.Swap(true) {
			_, _ = io.WriteString(w, `[]`)
			return
		}
		var tasks []string
		for i := range 5 {
			tasks = append(tasks, fmt.Sprintf(`{"taskId":"f-%d","deviceId":"f1","op":"AddPerson","person":{"id":"%d"}}`, i, i))
		}
		_, _ = io.WriteString(w, "["+strings.Join(tasks, ",")+"]")
	}))
	defer api.Close()
	cfg, err := config.Parse("f.toml", []byte(fmt.Sprintf(`[agent]
gateway_id = "gw-f"
data_dir = %q
[broker]
listen = "127.0.0.1:0"
[upstream]
url = %q
session_expiry = "1h"
reconnect_max = "300ms"
[store]
request_timeout = "200ms"
[intake.http]
url = %q
page_size = 10
interval = "1h"
[[devices]]
id = "f1"
`, t.TempDir(), m.URL, api.URL)), nil)
	if err != nil {
		t.Fatal(err)
	}

	local, a, stop := startAgentFull(t, cfg)
	fleet, err := sim.StartMQTT("mqtt://"+local, []string{"f1"}, sim.Options{Seed: 7, HeartbeatInterval: 20 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	// No event tells the test that the fifth ack was forwarded. Heartbeats not sent are
	// coalesced to the latest, one for the terminal: once one was, a backlog of six is the
	// five acks and that heartbeat.
	pollUntil(t, "five acks and the latest heartbeat in the forward backlog", func() bool {
		text := scrape(t, a)
		coalesced, _ := seriesValue(text, "faceagent_forward_heartbeats_coalesced_total")
		backlog, _ := seriesValue(text, "faceagent_forward_backlog")
		return coalesced > 0 && backlog >= 6
	})
	fleet.Close()
	stop()
	backlog := forwardLog(t, filepath.Join(cfg.Agent.DataDir, report.ForwardDir)) // what the stopped agent left
	acks, heartbeats := 0, 0
	for _, e := range backlog {
		switch {
		case strings.HasPrefix(e, "A "):
			acks++
		case strings.HasPrefix(e, "H "):
			heartbeats++
		}
	}
	if acks != 5 || heartbeats != 1 {
		t.Fatalf("backlog at the stop, want 5 acks and 1 heartbeat:\n%s", strings.Join(backlog, "\n"))
	}

	m.Restart()
	sub := subscribeForwarded(t, m.Addr, "gw-f")
	_, a, stop = startAgentFull(t, cfg)
	want := published("faceagent/gw-f/devices/", backlog)
	if got := sub.waitFirst(len(want)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("delivered by the second run\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	pollUntil(t, "the backlog to empty", func() bool { return metric(t, a, "faceagent_forward_backlog") == 0 })
	stop()
}

// forwardSubscriber is a back office on mosquitto that keeps every forwarded ack and
// heartbeat as "topic payload", in arrival order.
type forwardSubscriber struct {
	t       *testing.T
	c       *paho.Client
	mu      sync.Mutex
	got     []string
	changed chan struct{}
}

func subscribeForwarded(t *testing.T, addr, gw string) *forwardSubscriber {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &forwardSubscriber{t: t, changed: make(chan struct{}, 1)}
	s.c = paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) {
			s.mu.Lock()
			s.got = append(s.got, pr.Packet.Topic+" "+string(pr.Packet.Payload))
			s.mu.Unlock()
			poke(s.changed)
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.c.Connect(ctx, &paho.Connect{ClientID: "forward-watcher", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	prefix := "faceagent/" + gw + "/devices/+/"
	if _, err := s.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: prefix + "ack", QoS: 1}, {Topic: prefix + "heartbeat", QoS: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

func (s *forwardSubscriber) close() {
	_ = s.c.Disconnect(&paho.Disconnect{})
	<-s.c.Done()
}

// waitFirst waits until the messages received, each counted once (QoS 1 is at least
// once), number n, and returns them in the order of their first arrival.
func (s *forwardSubscriber) waitFirst(n int) []string {
	s.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		s.mu.Lock()
		var first []string
		seen := map[string]bool{}
		for _, m := range s.got {
			if !seen[m] {
				seen[m] = true
				first = append(first, m)
			}
		}
		s.mu.Unlock()
		if len(first) >= n {
			return first
		}
		select {
		case <-s.changed:
		case <-deadline:
			s.t.Fatalf("received %d of %d forwarded messages: %q", len(first), n, first)
		}
	}
}

// published turns backlog entries ("A dev payload") into what a subscriber sees.
func published(prefix string, backlog []string) []string {
	out := make([]string, len(backlog))
	for i, e := range backlog {
		kind, rest, _ := strings.Cut(e, " ")
		dev, payload, _ := strings.Cut(rest, " ")
		sub := "/ack "
		if kind == "H" {
			sub = "/heartbeat "
		}
		out[i] = prefix + dev + sub + payload
	}
	return out
}

// forwardBacklog lists the forwarder's live entries as "kind device payload".
func forwardBacklog(f *report.Forwarder) []string {
	var out []string
	for _, e := range f.Backlog().Entries() {
		out = append(out, fmt.Sprintf("%c %s %s", e.Kind, e.Key, e.Payload))
	}
	return out
}

// forwardLog opens the forward log in dir (the agent that wrote it stopped) and lists its
// live entries as "kind device payload".
func forwardLog(t *testing.T, dir string) []string {
	t.Helper()
	f, err := report.OpenForwarder(dir, report.ForwardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return forwardBacklog(f)
}
