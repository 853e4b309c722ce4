package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/publish"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// TestResultsNotStoredAreNotCountedStored: the reporter's publisher (PublishDeferred and a
// sync per batch) on an embedded broker whose sessions journal is on a disk that fills up
// and is freed again. A batch published while the disk was full is not counted as stored
// once the journal took writes again (it recovers by itself, and a later commit succeeds):
// SyncSessions alone answered for the last commit only, and the reporter marked such
// results reported though no restart would deliver them. Meanwhile the agent reports the
// journal unhealthy (/healthz, faceagent_up, faceagent_broker_sessions_journal_writable)
// but does not ask the watchdog for a restart, which would not help.
func TestResultsNotStoredAreNotCountedStored(t *testing.T) {
	dir := testutil.SmallFS(t, 2<<20)
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true, DataDir: dir,
		SessionsSegmentSize: 128 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	keptSubscriber(t, b.Addr(), "back-office", "results")

	p := b.Publisher()
	a := &Agent{broker: b, registry: metrics.NewRegistry()}
	a.registerMetrics()
	a.running.Store(true)
	a.started.Store(true)
	ctx := context.Background()

	free := testutil.FillFS(t, dir)
	mark := publish.MarkOf(p)
	for i := 0; b.SessionsErr() == nil; i++ { // what fits in the journal's last block is taken
		if i == 200 {
			t.Fatal("200 results stored on a full disk")
		}
		if err := p.Publish(ctx, "results", fmt.Appendf(nil, "r-%d", i)); err != nil {
			t.Fatal(err)
		}
		_ = publish.SyncSince(p, publish.MarkOf(p)) // the commit, whatever it gives
	}
	if err := a.Healthy(); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("Healthy with the sessions journal refusing writes: %v", err)
	}
	if err := a.NeedsRestart(); err != nil {
		t.Fatalf("NeedsRestart (the watchdog) with the sessions journal refusing writes: %v", err)
	}
	if got := scrape(t, a); !strings.Contains(got, "faceagent_broker_sessions_journal_writable 0") || !strings.Contains(got, "faceagent_up 0") {
		t.Fatalf("metrics while the journal refuses writes:\n%s", got)
	}

	free()
	deadline := time.Now().Add(5 * time.Second)
	for b.SessionsErr() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the sessions journal still refuses writes 5 s after space was freed: %v", b.SessionsErr())
		}
		time.Sleep(10 * time.Millisecond) // polling a state; the recovery has its own backoff
	}
	after := publish.MarkOf(p)
	if err := p.Publish(ctx, "results", []byte("after")); err != nil {
		t.Fatal(err)
	}
	if err := publish.SyncSince(p, mark); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("a batch published while the disk was full syncs as %v, want ErrNoSpace", err)
	}
	if err := publish.SyncSince(p, after); err != nil {
		t.Fatalf("a batch published after the recovery: %v", err)
	}
	if err := a.Healthy(); err != nil {
		t.Fatalf("Healthy after the recovery: %v", err)
	}
	got := scrape(t, a)
	for _, want := range []string{"faceagent_broker_sessions_journal_writable 1", "faceagent_broker_sessions_journal_failures_total 1",
		"faceagent_broker_sessions_journal_recoveries_total 1", `faceagent_journal_file_bytes{journal="broker_sessions"}`} {
		if !strings.Contains(got, want) {
			t.Fatalf("metrics after the recovery lack %q:\n%s", want, got)
		}
	}
}

// keptSubscriber gives id a session kept for an hour, subscribed to filter with QoS 1, and
// leaves it offline: what is published to filter waits for it in the sessions journal.
func keptSubscriber(t *testing.T, addr, id, filter string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	expiry := uint32(3600)
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	<-c.Done()
}

// scrape returns a's metrics as /metrics serves them.
func scrape(t *testing.T, a *Agent) string {
	t.Helper()
	var sb strings.Builder
	if _, err := a.registry.WriteTo(&sb); err != nil {
		t.Fatal(err)
	}
	return sb.String()
}
