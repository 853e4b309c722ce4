package report

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(forwardChildEnv); dir != "" {
		forwardChild(dir) // a crash test's child: it runs until SIGKILL
		return
	}
	os.Exit(m.Run())
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// events is an Observe hook's channel: poked on every backlog event.
type events chan struct{}

func newEvents() events { return make(events, 1) }

func (e events) observe(backlog.Event) {
	select {
	case e <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds, woken by ev.
func waitFor(t *testing.T, what string, cond func() bool, ev <-chan struct{}) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-ev:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

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
	select {
	case c.more <- struct{}{}:
	default:
	}
	return nil
}

func (c *collector) setFail(err error) {
	c.mu.Lock()
	c.fail = err
	c.mu.Unlock()
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

// running starts what Start runs until the test ends, or stop is called.
func running(t *testing.T, start func(context.Context), wait func()) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	start(ctx)
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wait() }) }
	t.Cleanup(stop)
	return stop
}

func testRegistry() *metrics.Registry { return metrics.NewRegistry() }
