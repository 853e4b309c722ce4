package agent

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/publish"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// dialTestUpstream connects an upstream connection (the agent's, as dialUpstream builds
// it) to the broker at addr with the given publish window, and waits until it is up.
func dialTestUpstream(t testing.TB, addr string, window int) *upstreamConn {
	t.Helper()
	cfg, err := config.Parse("p.toml", fmt.Appendf(nil, `[agent]
gateway_id = "gw-p"
data_dir = %q
[upstream]
url = "mqtt://%s"
session_expiry = "1h"
reconnect_max = "200ms"
[[devices]]
id = "p1"
`, t.TempDir(), addr), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := testMetrics()
	first := make(chan struct{})
	uc, err := dialUpstream(ctx, cfg, newTaker(cfg, m, quietLog), first, make(chan struct{}, 1), m, quietLog)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	uc.window = window // nothing publishes yet
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = uc.close(sctx)
		cancel()
	})
	select {
	case <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream connection did not come up")
	}
	return uc
}

// orderSubscriber keeps the payloads it receives on one topic, in arrival order.
type orderSubscriber struct {
	c       *paho.Client
	mu      sync.Mutex
	got     []string
	changed chan struct{}
}

func subscribeInOrder(t testing.TB, addr, topic string) *orderSubscriber {
	t.Helper()
	return subscribeAllInOrder(t, addr, topic)
}

// subscribeAllInOrder subscribes to every filter in topics.
func subscribeAllInOrder(t testing.TB, addr string, topics ...string) *orderSubscriber {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &orderSubscriber{changed: make(chan struct{}, 1)}
	s.c = paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) {
			s.mu.Lock()
			s.got = append(s.got, string(pr.Packet.Payload))
			s.mu.Unlock()
			poke(s.changed)
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.c.Connect(ctx, &paho.Connect{ClientID: fmt.Sprintf("sub-%p", s), KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	var subs []paho.SubscribeOptions
	for _, topic := range topics {
		subs = append(subs, paho.SubscribeOptions{Topic: topic, QoS: 1})
	}
	if _, err := s.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

func (s *orderSubscriber) close() {
	_ = s.c.Disconnect(&paho.Disconnect{})
	<-s.c.Done()
}

func (s *orderSubscriber) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func numbered(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"taskId":"t-%05d","status":"succeeded"}`, i)
	}
	return out
}

// firstCopies checks that got holds every one of want, and that the first copy of each
// arrived in want's order (duplicates after a reconnect are allowed).
func firstCopies(t *testing.T, got []string, want [][]byte) {
	t.Helper()
	seen := map[string]bool{}
	next := 0
	for _, g := range got {
		if seen[g] {
			continue
		}
		seen[g] = true
		if next >= len(want) || g != string(want[next]) {
			t.Fatalf("first copy %d is %s, want %s", next, g, want[min(next, len(want)-1)])
		}
		next++
	}
	if next != len(want) {
		t.Fatalf("%d of %d messages arrived", next, len(want))
	}
}

// Across a link with a 40 ms round trip, the stream keeps its window of messages in
// flight — the proxy between the agent and mosquitto sees that many PUBLISH packets
// before the first PUBACK comes back, and never more — and the subscriber gets them in
// order. With a window of 1 it is one message per round trip, as before.
func TestPipelinedPublishKeepsItsWindowInFlight(t *testing.T) {
	m := testutil.StartMosquitto(t)
	for _, tc := range []struct{ window, n int }{{64, 400}, {1, 10}} {
		t.Run(fmt.Sprintf("window=%d", tc.window), func(t *testing.T) {
			proxy := startDelayProxy(t, m.Addr, 20*time.Millisecond)
			topic := fmt.Sprintf("faceagent/gw-p/results-%d", tc.window)
			sub := subscribeInOrder(t, m.Addr, topic)
			uc := dialTestUpstream(t, proxy.addr(), tc.window)
			msgs := numbered(tc.n)
			n, err := publish.InOrder(context.Background(), uc, len(msgs), func(i int) (string, []byte, bool) {
				return topic, msgs[i], false
			})
			if err != nil || n != len(msgs) {
				t.Fatalf("published %d of %d: %v", n, len(msgs), err)
			}
			before, peak, _ := proxy.counts()
			t.Logf("window %d: %d PUBLISH before the first PUBACK, at most %d in flight", tc.window, before, peak)
			if peak > tc.window {
				t.Errorf("%d messages were in flight at once, over the window of %d", peak, tc.window)
			}
			if tc.window == 1 && (before != 1 || peak != 1) {
				t.Errorf("window 1: %d sent before the first PUBACK, %d in flight at most; want 1 and 1", before, peak)
			}
			// The first PUBACK is 40 ms away; writing 64 messages takes far less, even
			// with the race detector on a busy machine.
			if tc.window > 1 && before < tc.window/2 {
				t.Errorf("only %d messages were sent before the first PUBACK; the window is %d", before, tc.window)
			}
			waitFor(t, "every message at the subscriber", func() bool { return len(sub.received()) >= len(msgs) }, sub.changed)
			got := sub.received()
			if len(got) != len(msgs) {
				t.Fatalf("the subscriber got %d messages, want %d", len(got), len(msgs))
			}
			for i, g := range got {
				if g != string(msgs[i]) {
					t.Fatalf("message %d is %s, want %s", i, g, msgs[i])
				}
			}
		})
	}
}

// The upstream broker (mosquitto, which keeps no sessions across a restart) restarts
// while the deadletter stream has a window of messages in flight: its PUBACKs never
// come, the session is gone on reconnect, and the stream sends everything from the first
// unacknowledged message again. Every message arrives, the first copies in order, and
// the backlog empties. The proxy stops the agent's bytes first and the test lets the
// subscriber take what the broker already has, since a broker without persistence
// loses what it acknowledged but had not yet delivered when it stops.
func TestPipelinedPublishSurvivesUpstreamRestart(t *testing.T) {
	m := testutil.StartMosquitto(t)
	proxy := startDelayProxy(t, m.Addr, 5*time.Millisecond)
	const topic = "faceagent/gw/deadletter"
	sub := subscribeInOrder(t, m.Addr, topic)
	uc := dialTestUpstream(t, proxy.addr(), defaultPublishWindow)
	mt := testMetrics()
	reported := make(chan struct{}, 1)
	d, err := report.OpenDeadLetters(filepath.Join(t.TempDir(), "dl"), report.DeadLetterOptions{Journal: journal.Options{Sync: journal.SyncAlways},
		Topic: topic, Metrics: mt.deadLetters, Logger: quietLog, Observe: func(backlog.Event) { poke(reported) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.Start(ctx, uc)
	defer func() { cancel(); d.Wait(); _ = d.Close() }()

	msgs := numbered(2000)
	if err := d.Add(msgs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a third of the messages", func() bool { return len(sub.received()) >= len(msgs)/3 }, sub.changed)
	proxy.hold()
	pollUntil(t, "the subscriber to get what reached the broker", func() bool {
		_, _, forwarded := proxy.counts()
		return len(sub.received()) >= forwarded
	})
	if _, peak, _ := proxy.counts(); peak < 2 {
		t.Errorf("at most %d messages were in flight; the stream is not pipelined", peak)
	}
	before := sub.received()
	sub.close()
	m.Restart()
	sub2 := subscribeInOrder(t, m.Addr, topic)
	proxy.release()
	waitFor(t, "the backlog to empty", func() bool { return mt.deadLetters.Backlog.Value() == 0 }, reported)
	waitFor(t, "the rest at the new subscriber", func() bool {
		seen := map[string]bool{}
		for _, g := range append(before, sub2.received()...) {
			seen[g] = true
		}
		return len(seen) == len(msgs)
	}, sub2.changed)
	got := append(before, sub2.received()...)
	t.Logf("%d before the restart, %d after (%d duplicates)", len(before), len(got)-len(before), len(got)-len(msgs))
	firstCopies(t, got, msgs)
}

// A broker that allows fewer messages in flight (its Receive Maximum, here the embedded
// mochi broker's with 8) than the window gets no more than that: paho waits for a free
// slot, and the broker, which disconnects a client over its quota, takes every message.
func TestPipelinedPublishHonoursReceiveMaximum(t *testing.T) {
	br, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	br.Server().Options.Capabilities.ReceiveMaximum = 8
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	proxy := startDelayProxy(t, br.Addr(), 10*time.Millisecond)
	uc := dialTestUpstream(t, proxy.addr(), 64)
	msgs := numbered(200)
	n, err := publish.InOrder(context.Background(), uc, len(msgs), func(i int) (string, []byte, bool) {
		return "faceagent/gw-p/results", msgs[i], false
	})
	if err != nil || n != len(msgs) {
		t.Fatalf("published %d of %d: %v", n, len(msgs), err)
	}
	before, peak, _ := proxy.counts()
	t.Logf("%d PUBLISH before the first PUBACK, at most %d in flight", before, peak)
	if peak > 8 || before > 8 {
		t.Errorf("%d in flight, %d before the first PUBACK: over the broker's Receive Maximum of 8", peak, before)
	}
	if peak < 4 {
		t.Errorf("at most %d in flight; the window should fill the broker's 8", peak)
	}
}
