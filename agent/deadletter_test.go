package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
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

func openTestDeadLetters(t *testing.T, dir string, pub publisher) *deadLetterLog {
	t.Helper()
	d, err := openDeadLetters(dir, journal.Options{Sync: journal.SyncAlways}, pub, "faceagent/gw/deadletter", testMetrics(), quietLog)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDeadLetterRecordRoundTrip(t *testing.T) {
	for _, c := range []struct {
		kind    byte
		id      uint64
		payload string
	}{{deadRecordAdd, 1, `{"reason":"x"}`}, {deadRecordAdd, 1 << 40, "p"}, {deadRecordReported, 300, ""}} {
		rec := appendDeadRecord(nil, c.kind, c.id, []byte(c.payload))
		kind, id, payload, err := parseDeadRecord(rec)
		if err != nil || kind != c.kind || id != c.id || string(payload) != c.payload {
			t.Errorf("%q: got %c %d %q %v", rec, kind, id, payload, err)
		}
	}
	for _, bad := range [][]byte{nil, {1}, {1, 'A'}, {2, 'A', 1, 'x'}, {1, 'A', 1}, {1, 'R', 1, 'x'}, {1, 'Z', 1},
		{1, 'A', 0x80, 0x80}} {
		if _, _, _, err := parseDeadRecord(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// FuzzDeadLetterRecord: no input panics, and what parses encodes back to the same bytes.
func FuzzDeadLetterRecord(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/deadletter/*.rec")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(appendDeadRecord(nil, deadRecordAdd, 7, []byte(`{"reason":"r","payload":"x"}`)))
	f.Add(appendDeadRecord(nil, deadRecordReported, 1<<33, nil))
	f.Fuzz(func(t *testing.T, rec []byte) {
		kind, id, payload, err := parseDeadRecord(rec)
		if err != nil {
			return
		}
		back := appendDeadRecord(nil, kind, id, payload)
		// A uvarint may be written with redundant continuation bytes; compare decoded.
		k2, id2, p2, err := parseDeadRecord(back)
		if err != nil || k2 != kind || id2 != id || !bytes.Equal(p2, payload) {
			t.Fatalf("%q re-encoded as %q", rec, back)
		}
	})
}

// Deadletters survive a restart in order until published; published ones do not come back.
func TestDeadLetterLogReplaysUntilReported(t *testing.T) {
	dir := t.TempDir()
	d := openTestDeadLetters(t, dir, nil)
	if err := d.add([][]byte{[]byte("one"), []byte("two")}); err != nil {
		t.Fatal(err)
	}
	if err := d.add([][]byte{[]byte("three")}); err != nil {
		t.Fatal(err)
	}
	if err := d.close(); err != nil { // never published: the upstream broker was away
		t.Fatal(err)
	}

	pub := newCollector()
	d = openTestDeadLetters(t, dir, pub)
	if n := d.m.deadLetterBacklog.Value(); n != 3 {
		t.Fatalf("backlog after replay %v, want 3", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.start(ctx)
	if got := pub.waitFor(t, 3); strings.Join(got, ",") != "one,two,three" {
		t.Errorf("published %v", got)
	}
	if err := d.add([][]byte{[]byte("four")}); err != nil {
		t.Fatal(err)
	}
	pub.waitFor(t, 4)
	waitBacklog(t, d, 0)
	cancel()
	d.wg.Wait()
	if err := d.close(); err != nil {
		t.Fatal(err)
	}

	d = openTestDeadLetters(t, dir, nil)
	defer d.close()
	if len(d.pending) != 0 {
		t.Errorf("reported deadletters replayed: %d", len(d.pending))
	}
}

// waitBacklog waits until the backlog holds want deadletters.
func waitBacklog(t *testing.T, d *deadLetterLog, want float64) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for d.m.deadLetterBacklog.Value() != want {
		select {
		case <-d.reported:
		case <-deadline:
			t.Fatalf("backlog %v, want %v", d.m.deadLetterBacklog.Value(), want)
		}
	}
}

// A failing publisher keeps the deadletter and retries; the order holds once it works.
func TestDeadLetterLogRetriesInOrder(t *testing.T) {
	pub := newCollector()
	pub.fail = errors.New("broker away")
	d := openTestDeadLetters(t, t.TempDir(), pub)
	defer d.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); d.wg.Wait() }()
	d.start(ctx)
	for i := range 5 {
		if err := d.add([][]byte{fmt.Appendf(nil, "d%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	pub.mu.Lock()
	pub.fail = nil
	pub.mu.Unlock()
	if got := pub.waitFor(t, 5); strings.Join(got, ",") != "d0,d1,d2,d3,d4" {
		t.Errorf("published %v", got)
	}
}

// The log compacts once most of it is reported: the segments go, a reopen finds nothing.
func TestDeadLetterLogCompacts(t *testing.T) {
	dir := t.TempDir()
	pub := newCollector()
	d := openTestDeadLetters(t, dir, pub)
	ctx, cancel := context.WithCancel(context.Background())
	d.start(ctx)
	const n = 3 * compactDeadLetters
	for i := range n {
		if err := d.add([][]byte{fmt.Appendf(nil, "d%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	pub.waitFor(t, n)
	waitBacklog(t, d, 0)
	cancel()
	d.wg.Wait()
	if st := d.j.Stats(); st.Snapshots == 0 {
		t.Errorf("no compaction after %d deadletters: %+v", n, st)
	}
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	d = openTestDeadLetters(t, dir, nil)
	defer d.close()
	if len(d.pending) != 0 || d.records >= compactDeadLetters+deadLetterBatch*2 {
		t.Errorf("after compaction: %d pending, %d records", len(d.pending), d.records)
	}
}

// Over the backlog's bound a message with refused tasks is refused whole (not
// acknowledged: its good tasks are not stored either), and counted; once the backlog
// drains the same message is taken.
func TestIntakeRefusesWhenDeadLetterBacklogFull(t *testing.T) {
	cfg := parse(t, fmt.Sprintf("[agent]\ngateway_id = \"gw-b\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n[journal]\nsync = \"none\"\n[[devices]]\nid = \"d1\"\n", t.TempDir()))
	m := testMetrics()
	ob, err := openOutbox(cfg, outbox.SenderFunc(func(context.Context, string, outbox.Command) error { return nil }), quietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	pub := newCollector()
	pub.fail = errors.New("upstream away")
	d, err := openDeadLetters(filepath.Join(cfg.Agent.DataDir, DeadLetterDir), journalOptions(cfg.Journal), pub, "faceagent/gw-b/deadletter", m, quietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	d.maxCount = 2
	take := newTaker(cfg, nil, quietLog)
	take.Open(ob, deadLetters{d})

	bad := func(i int) string {
		return fmt.Sprintf(`{"taskId":"b%d","deviceId":"nope","op":"AddPerson","person":{"id":"1"}}`, i)
	}
	for i := range 2 {
		if err := take.Accept(context.Background(), []byte(bad(i))); err != nil {
			t.Fatalf("deadletter %d within the bound: %v", i, err)
		}
	}
	msg := []byte(`[` + bad(9) + `,{"taskId":"g1","deviceId":"d1","op":"AddPerson","person":{"id":"5"}}]`)
	if err := take.Accept(context.Background(), msg); !errors.Is(err, errDeadLetterBacklog) {
		t.Fatalf("over the bound: %v", err)
	}
	if st, _ := ob.DeviceStatus("d1"); st.Queued != 0 {
		t.Errorf("a refused message's good task was stored: %+v", st)
	}
	if got := m.deadLettersRefused.Value(); got != 1 {
		t.Errorf("refusals counted %d", got)
	}

	pub.mu.Lock()
	pub.fail = nil
	pub.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); d.wg.Wait() }()
	d.start(ctx)
	pub.waitFor(t, 2)
	waitBacklog(t, d, 0)
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
