package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

func testMetrics() *agentMetrics {
	a := &Agent{registry: metrics.NewRegistry()}
	a.registerMetrics()
	return a.m
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// collector is a publisher that keeps what it was given (as "topic payload" if withTopic),
// and fails while fail is set.
type collector struct {
	mu        sync.Mutex
	got       []string
	fail      error
	more      chan struct{}
	withTopic bool
}

func newCollector() *collector { return &collector{more: make(chan struct{}, 1)} }

func (c *collector) Publish(_ context.Context, topic string, payload []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return c.fail
	}
	line := string(payload)
	if c.withTopic {
		line = topic + " " + line
	}
	c.got = append(c.got, line)
	poke(c.more)
	return nil
}

func (c *collector) waitFor(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		got := append([]string(nil), c.got...)
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-c.more:
		case <-deadline:
			t.Fatalf("published %d of %d: %q", len(got), n, got)
		}
	}
}

// Over the backlog's bound a message with refused tasks is refused whole (not
// acknowledged: its good tasks are not stored either), and counted; once the backlog
// drains the same message is taken.
func TestIntakeRefusesWhenDeadLetterBacklogFull(t *testing.T) {
	cfg := parse(t, fmt.Sprintf("[agent]\ngateway_id = \"gw-b\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n[journal]\nsync = \"none\"\n[[devices]]\nid = \"d1\"\n", t.TempDir()))
	m := testMetrics()
	ob, err := openOutbox(cfg, outbox.SenderFunc(func(context.Context, string, outbox.Command) error { return nil }), quietLog, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	pub := newCollector()
	pub.fail = errors.New("upstream away")
	reported := make(chan struct{}, 1)
	d, err := report.OpenDeadLetters(filepath.Join(cfg.Agent.DataDir, report.DeadLetterDir), report.DeadLetterOptions{
		Journal: journalOptions(cfg.Journal), Topic: "faceagent/gw-b/deadletter", MaxCount: 2, Metrics: m.deadLetters, Logger: quietLog,
		Observe: func(backlog.Event) { poke(reported) }})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	take := newTaker(cfg, nil, quietLog)
	take.Open(ob, d)

	bad := func(i int) string {
		return fmt.Sprintf(`{"taskId":"b%d","deviceId":"nope","op":"AddPerson","person":{"id":"1"}}`, i)
	}
	for i := range 2 {
		if err := take.Accept(context.Background(), []byte(bad(i))); err != nil {
			t.Fatalf("deadletter %d within the bound: %v", i, err)
		}
	}
	msg := []byte(`[` + bad(9) + `,{"taskId":"g1","deviceId":"d1","op":"AddPerson","person":{"id":"5"}}]`)
	if err := take.Accept(context.Background(), msg); !errors.Is(err, report.ErrDeadLetterBacklog) {
		t.Fatalf("over the bound: %v", err)
	}
	if st, _ := ob.DeviceStatus("d1"); st.Queued != 0 {
		t.Errorf("a refused message's good task was stored: %+v", st)
	}
	if got := m.deadLetters.Refused.Value(); got != 1 {
		t.Errorf("refusals counted %d", got)
	}

	pub.mu.Lock()
	pub.fail = nil
	pub.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); d.Wait() }()
	d.Start(ctx, pub)
	pub.waitFor(t, 2)
	waitFor(t, "the backlog to empty", func() bool { return m.deadLetters.Backlog.Value() == 0 }, reported)
	if err := take.Accept(context.Background(), msg); err != nil { // the redelivery
		t.Fatal(err)
	}
	if st, _ := ob.DeviceStatus("d1"); st.Queued+len(st.InFlight) == 0 {
		t.Errorf("the good task was not stored: %+v", st)
	}
	got := pub.waitFor(t, 3)
	dl, err := wire.ParseDeadLetter([]byte(got[2]))
	if err != nil || dl.Reason != `task 0: unknown device "nope"` {
		t.Errorf("deadletter %s: %+v %v", got[2], dl, err)
	}
}
