package backlog

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
)

// The kinds of the tests: acks (droppable) and heartbeats (coalescing per key), as the
// forwarder's; 'D' entries are the deadletter log's (unkeyed, durable).
var testKinds = []Kind{{Code: 'A', Name: "ack", Droppable: true}, {Code: 'H', Name: "heartbeat", Coalesce: true}}

const testPrefix = "faceagent/gw/devices/"

func testTopic(kind byte, key string) string {
	if kind == 'A' {
		return testPrefix + key + "/ack"
	}
	return testPrefix + key + "/heartbeat"
}

// testMetrics are a backlog's series in a registry of their own.
func testMetrics() Metrics {
	r := metrics.NewRegistry()
	return Metrics{
		Live: r.NewGauge("live", "."), Bytes: r.NewGauge("bytes", "."), Published: r.NewCounter("published", "."),
		PublishedByKind: r.NewCounterVec("by_kind", ".", "kind"), Dropped: r.NewCounterVec("dropped", ".", "reason"),
		Coalesced: r.NewCounter("coalesced", "."), Refused: r.NewCounter("refused", "."),
	}
}

// rig is a keyed write-behind backlog with its events on a channel.
type rig struct {
	*Backlog
	events chan struct{} // poked by Observe
}

func forwardOptions(maxCount, maxBytes int, delay time.Duration) Options {
	return Options{Journal: journal.Options{Sync: journal.SyncAlways}, Kinds: testKinds, Keyed: true,
		Durability: WriteBehind(delay), MaxCount: maxCount, MaxBytes: maxBytes, Policy: DropOldest,
		Topic: testTopic, Gather: 5 * time.Millisecond, Metrics: testMetrics()}
}

func openRig(t *testing.T, dir string, opt Options) *rig {
	t.Helper()
	r := &rig{events: make(chan struct{}, 1)}
	opt.Observe = func(Event) { poke(r.events) }
	b, err := Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	r.Backlog = b
	return r
}

// start runs the publisher on pub until the test ends (or stop is called).
func (r *rig) start(t *testing.T, pub *collector) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	r.Start(ctx, pub)
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); r.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// lines lists the live entries as "kind key payload".
func (r *rig) lines() []string {
	var out []string
	for _, e := range r.Entries() {
		out = append(out, fmt.Sprintf("%c %s %s", e.Kind, e.Key, e.Payload))
	}
	return out
}

func (r *rig) records() int { return r.Stats().Records }

// waitFor waits until cond holds, woken by the backlog's events.
func (r *rig) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-r.events:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (r *rig) waitEmpty(t *testing.T) {
	t.Helper()
	r.waitFor(t, "the backlog to empty", func() bool { return r.Stats().Live == 0 })
}

// collector is a publisher that keeps "topic payload" lines, and fails while fail is set.
type collector struct {
	mu   sync.Mutex
	got  []string
	fail error
	more chan struct{}
}

func newCollector() *collector { return &collector{more: make(chan struct{}, 1)} }

func (c *collector) Publish(_ context.Context, topic string, payload []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return c.fail
	}
	c.got = append(c.got, topic+" "+string(payload))
	poke(c.more)
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

func ack(n int) []byte {
	return fmt.Appendf(nil, `{"messageId":"AddPerson-%d-1","code":0,"message":""}`, n)
}
func heartbeat(key string, persons int) []byte {
	return fmt.Appendf(nil, `{"deviceId":%q,"persons":%d}`, key, persons)
}
