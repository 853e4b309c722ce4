package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// newTopicCollector is a collector that keeps "topic payload" lines.
func newTopicCollector() *collector { return &collector{more: make(chan struct{}, 1), withTopic: true} }

const testForwardPrefix = "faceagent/gw/devices/"

func openTestForwarder(t *testing.T, dir string, pub publisher, maxCount, maxBytes int) *forwarder {
	t.Helper()
	f, err := openForwarderBounded(dir, journal.Options{Sync: journal.SyncAlways}, pub, testForwardPrefix, testMetrics(), quietLog, maxCount, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// backlog lists the live entries as "kind device payload".
func (f *forwarder) backlog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.pending {
		if e.payload != nil {
			out = append(out, fmt.Sprintf("%c %s %s", e.kind, e.device, e.payload))
		}
	}
	return out
}

func testAck(n int) face.Ack { return face.Ack{MessageID: fmt.Sprintf("AddPerson-%d-1", n)} }

func testHeartbeat(device string, persons int) face.Heartbeat {
	return face.Heartbeat{DeviceID: device, Time: "2026-11-22T14:00:00Z", Firmware: "1.0", Persons: persons}
}

func ackLine(device string, n int) string {
	a := testAck(n)
	b, _ := a.AppendJSON(nil)
	return testForwardPrefix + device + "/ack " + string(b)
}

func heartbeatLine(device string, persons int) string {
	h := testHeartbeat(device, persons)
	b, _ := h.AppendJSON(nil)
	return testForwardPrefix + device + "/heartbeat " + string(b)
}

func TestForwardRecordRoundTrip(t *testing.T) {
	for _, c := range []struct {
		kind            byte
		id              uint64
		device, payload string
	}{
		{fwdRecordAck, 1, "2042253", `{"messageId":"m","code":0,"message":""}`},
		{fwdRecordHeartbeat, 1 << 40, "d", "p"},
		{fwdRecordReported, 300, "", ""},
		{fwdRecordSeen, 1, "", ""},
	} {
		rec := appendForwardRecord(nil, c.kind, c.id, c.device, []byte(c.payload))
		kind, id, device, payload, err := parseForwardRecord(rec)
		if err != nil || kind != c.kind || id != c.id || string(device) != c.device || string(payload) != c.payload {
			t.Errorf("%q: got %c %d %q %q %v", rec, kind, id, device, payload, err)
		}
	}
	for _, bad := range [][]byte{
		nil, {1}, {1, 'A'}, // too short
		{2, 'R', 1},          // version
		{1, 'R', 0},          // id 0
		{1, 'R', 1, 'x'},     // trailing bytes after a mark
		{1, 'S', 0x80, 0x80}, // cut uvarint
		{1, 'Z', 1},          // kind
		{1, 'A', 1, 0, 'p'},  // empty device
		{1, 'A', 1, 5, 'd'},  // device longer than the record
		{1, 'A', 1, 1, 'd'},  // empty payload
		{1, 'H', 1, 1, '/', 'p'}, {1, 'H', 1, 1, '+', 'p'}, {1, 'H', 1, 1, '#', 'p'}, {1, 'H', 1, 1, 0, 'p'},
		append([]byte{1, 'A', 1, 0x81, 0x02}, bytes.Repeat([]byte{'d'}, 300)...), // device id over the bound
	} {
		if _, _, _, _, err := parseForwardRecord(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// FuzzForwardRecord: no input panics, and what parses encodes back to a record that
// parses to the same values.
func FuzzForwardRecord(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/forward/*.rec")
	if len(seeds) == 0 {
		f.Fatal("no seeds in testdata/forward")
	}
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		kind, id, device, payload, err := parseForwardRecord(rec)
		if err != nil {
			return
		}
		back := appendForwardRecord(nil, kind, id, string(device), payload)
		k2, id2, d2, p2, err := parseForwardRecord(back)
		if err != nil || k2 != kind || id2 != id || !bytes.Equal(d2, device) || !bytes.Equal(p2, payload) {
			t.Fatalf("%q re-encoded as %q", rec, back)
		}
	})
}

// The seeds are the canonical records; regenerate with FACEAGENT_WRITE_SEEDS=1.
func TestForwardRecordSeeds(t *testing.T) {
	a := testAck(1)
	ack, _ := a.AppendJSON(nil)
	h := testHeartbeat("2042253", 12)
	hb, _ := h.AppendJSON(nil)
	want := map[string][]byte{
		"ack.rec":       appendForwardRecord(nil, fwdRecordAck, 1, "2042253", ack),
		"heartbeat.rec": appendForwardRecord(nil, fwdRecordHeartbeat, 2, "2042253", hb),
		"reported.rec":  appendForwardRecord(nil, fwdRecordReported, 1<<20, "", nil),
		"seen.rec":      appendForwardRecord(nil, fwdRecordSeen, 3, "", nil),
	}
	for name, rec := range want {
		path := filepath.Join("testdata", "forward", name)
		if os.Getenv("FACEAGENT_WRITE_SEEDS") != "" {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, rec, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, rec) {
			t.Errorf("%s is %q, the encoder writes %q", path, got, rec)
		}
	}
}

// Acks forwarded while nothing publishes survive a restart in order, and go out in order
// once a publisher takes them; after that they do not come back.
func TestForwarderReplaysInOrderUntilReported(t *testing.T) {
	dir := t.TempDir()
	f := openTestForwarder(t, dir, nil, maxForwarded, maxForwardedBytes)
	var want []string
	for i := range 5 {
		dev := []string{"d1", "d2"}[i%2]
		f.ack(dev, testAck(i))
		want = append(want, ackLine(dev, i))
	}
	if err := f.close(); err != nil { // lazily written records are flushed by Close
		t.Fatal(err)
	}

	pub := newTopicCollector()
	f = openTestForwarder(t, dir, pub, maxForwarded, maxForwardedBytes)
	if n := f.m.forwardBacklog.Value(); n != 5 {
		t.Fatalf("backlog after replay %v, want 5", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.start(ctx)
	if got := pub.waitFor(t, 5); !slices.Equal(got, want) {
		t.Errorf("published\n%q\nwant\n%q", got, want)
	}
	waitFor(t, "the backlog to empty", func() bool { return f.m.forwardBacklog.Value() == 0 }, f.reported)
	if n := f.m.forwarded.With("ack").Value(); n != 5 {
		t.Errorf("faceagent_forwarded_total{kind=ack} = %d, want 5", n)
	}
	cancel()
	f.wg.Wait()
	if err := f.close(); err != nil {
		t.Fatal(err)
	}

	f = openTestForwarder(t, dir, nil, maxForwarded, maxForwardedBytes)
	defer f.close()
	if got := f.backlog(); len(got) != 0 {
		t.Errorf("reported acks came back after a restart: %q", got)
	}
}

// errPublishFailed is a publisher's failure in tests (the broker is away).
var errPublishFailed = errors.New("test: publish failed")

// A failed publish stops the round (order kept) and is retried from the same message.
func TestForwarderRetriesInOrder(t *testing.T) {
	pub := newTopicCollector()
	pub.fail = errPublishFailed
	f := openTestForwarder(t, t.TempDir(), pub, maxForwarded, maxForwardedBytes)
	defer f.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); f.wg.Wait() }()
	f.start(ctx)
	f.ack("d1", testAck(1))
	f.heartbeat("d1", testHeartbeat("d1", 1))
	f.ack("d1", testAck(2))
	pub.mu.Lock()
	pub.fail = nil
	pub.mu.Unlock()
	got := pub.waitFor(t, 3)
	if want := []string{ackLine("d1", 1), heartbeatLine("d1", 1), ackLine("d1", 2)}; !slices.Equal(got, want) {
		t.Errorf("published\n%q\nwant\n%q", got, want)
	}
	waitFor(t, "the backlog to empty", func() bool { return f.m.forwardBacklog.Value() == 0 }, f.reported)
}

// A device's heartbeat replaces its older one not yet sent, live and after a restart;
// acks are never coalesced.
func TestForwarderCoalescesHeartbeats(t *testing.T) {
	dir := t.TempDir()
	f := openTestForwarder(t, dir, nil, maxForwarded, maxForwardedBytes)
	f.heartbeat("d1", testHeartbeat("d1", 1))
	f.ack("d1", testAck(1))
	f.heartbeat("d2", testHeartbeat("d2", 1))
	for p := 2; p <= 50; p++ {
		f.heartbeat("d1", testHeartbeat("d1", p))
	}
	f.ack("d1", testAck(1)) // the same ack again: both go
	want := []string{ackLine("d1", 1), heartbeatLine("d2", 1), heartbeatLine("d1", 50), ackLine("d1", 1)}
	if n := f.m.forwardCoalesced.Value(); n != 49 {
		t.Errorf("coalesced %d, want 49", n)
	}
	live := f.backlog()
	if len(live) != 4 {
		t.Fatalf("backlog %q, want 4 entries", live)
	}
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
	pub := newTopicCollector()
	f = openTestForwarder(t, dir, pub, maxForwarded, maxForwardedBytes)
	defer f.close()
	if got := f.backlog(); !slices.Equal(got, live) {
		t.Fatalf("backlog after replay\n%q\nwant\n%q", got, live)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); f.wg.Wait() }()
	f.start(ctx)
	if got := pub.waitFor(t, 4); !slices.Equal(got, want) {
		t.Errorf("published\n%q\nwant\n%q", got, want)
	}
}

// Over the bound the oldest acks are dropped (heartbeats kept), the same way after a
// restart; a message is refused only when no ack is left to drop.
func TestForwarderBound(t *testing.T) {
	dir := t.TempDir()
	f := openTestForwarder(t, dir, nil, 4, 1<<20)
	f.heartbeat("d1", testHeartbeat("d1", 1))
	for i := 1; i <= 6; i++ {
		f.ack("d1", testAck(i))
	}
	f.heartbeat("d1", testHeartbeat("d1", 2)) // replaces the first: no drop
	want := []string{ackLine("d1", 4), ackLine("d1", 5), ackLine("d1", 6), heartbeatLine("d1", 2)}
	if n := f.m.forwardDropped.With("bound").Value(); n != 3 {
		t.Errorf("dropped by the bound %d, want 3", n)
	}
	if n := f.m.forwardBacklog.Value(); n != 4 {
		t.Errorf("backlog %v, want 4", n)
	}
	live := f.backlog()
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
	pub := newTopicCollector()
	f = openTestForwarder(t, dir, pub, 4, 1<<20)
	if got := f.backlog(); !slices.Equal(got, live) {
		t.Fatalf("backlog after replay\n%q\nwant\n%q", got, live)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.start(ctx)
	if got := pub.waitFor(t, 4); !slices.Equal(got, want) {
		t.Errorf("published\n%q\nwant\n%q", got, want)
	}
	cancel()
	f.wg.Wait()
	f.close()

	// Only heartbeats: nothing to drop, the newcomer is refused.
	f = openTestForwarder(t, t.TempDir(), nil, 2, 1<<20)
	defer f.close()
	for _, d := range []string{"a", "b", "c"} {
		f.heartbeat(d, testHeartbeat(d, 1))
	}
	if got := f.backlog(); len(got) != 2 || !strings.Contains(got[1], " b ") {
		t.Errorf("backlog %q, want the heartbeats of a and b", got)
	}
	if n := f.m.forwardDropped.With("refused").Value(); n != 1 {
		t.Errorf("refused %d, want 1", n)
	}
}

// The byte bound counts device ids and payloads.
func TestForwarderByteBound(t *testing.T) {
	one := len(ackLine("d1", 1)) - len(testForwardPrefix+"d1/ack ") + len("d1")
	f := openTestForwarder(t, t.TempDir(), nil, 100, 3*one)
	defer f.close()
	for i := 1; i <= 5; i++ {
		f.ack("d1", testAck(i))
	}
	if got := f.backlog(); len(got) != 3 || !strings.Contains(got[0], "AddPerson-3-1") {
		t.Errorf("backlog %q, want acks 3 to 5", got)
	}
	if n := f.m.forwardBacklogBytes.Value(); int(n) != 3*one {
		t.Errorf("backlog bytes %v, want %d", n, 3*one)
	}
}

// Replay skips an add that a snapshot holds and the segment after it repeats (appended
// between the checkpoint and the capture), and takes what follows.
func TestForwardReplaySkipsSnapshotDuplicates(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range [][]byte{
		appendForwardRecord(nil, fwdRecordAck, 1, "d", []byte("a1")), // the snapshot …
		appendForwardRecord(nil, fwdRecordAck, 2, "d", []byte("a2")),
		appendForwardRecord(nil, fwdRecordSeen, 3, "", nil),
		appendForwardRecord(nil, fwdRecordAck, 2, "d", []byte("a2")), // … the segment after it
		appendForwardRecord(nil, fwdRecordReported, 1, "", nil),
		appendForwardRecord(nil, fwdRecordAck, 3, "d", []byte("a3")),
	} {
		if err := j.Append(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	f := openTestForwarder(t, dir, nil, 10, 1<<20)
	defer f.close()
	if got, want := f.backlog(), []string{"A d a2", "A d a3"}; !slices.Equal(got, want) {
		t.Errorf("backlog %q, want %q", got, want)
	}
	if f.nextID != 4 {
		t.Errorf("next id %d, want 4", f.nextID)
	}
}

// Compaction keeps the backlog (and nothing published) across a restart, and the log
// stays small while heartbeats coalesce during an outage.
func TestForwarderCompacts(t *testing.T) {
	const every, n = 100, 2000
	dir := t.TempDir()
	pub := newTopicCollector()
	f := openTestForwarder(t, dir, pub, maxForwarded, maxForwardedBytes)
	f.compactAfter = every
	f.writeDelay = 0 // every add written at once, as if the upstream always took longer
	compacted := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.records-f.live < every
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.start(ctx)
	for i := range n {
		f.ack("d1", testAck(i))
	}
	pub.waitFor(t, n)
	waitFor(t, "the backlog to empty", func() bool { return f.m.forwardBacklog.Value() == 0 }, f.reported)
	waitFor(t, "a snapshot", compacted, f.compacted)
	pub.mu.Lock()
	pub.fail = errPublishFailed // the broker is away: heartbeats coalesce in the log
	pub.mu.Unlock()
	for p := range n {
		f.heartbeat("d1", testHeartbeat("d1", p))
	}
	f.ack("d2", testAck(7))
	waitFor(t, "a snapshot", compacted, f.compacted)
	cancel()
	f.wg.Wait()
	snaps, _ := filepath.Glob(filepath.Join(dir, "*.snap"))
	if len(snaps) != 1 {
		t.Errorf("%d snapshots, want 1", len(snaps))
	}
	live := f.backlog()
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
	f = openTestForwarder(t, dir, nil, maxForwarded, maxForwardedBytes)
	defer f.close()
	if got := f.backlog(); !slices.Equal(got, live) || len(got) != 2 {
		t.Errorf("backlog after compaction and replay %q, want %q (2 entries)", got, live)
	}
	// Without compaction the log would hold more than 2n records.
	if rec := f.j.Recovery(); rec.SnapshotRecords+rec.Records > n/2 {
		t.Errorf("the log replayed %d+%d records; compaction every %d dead ones should keep it far smaller",
			rec.SnapshotRecords, rec.Records, every)
	}
}

// Forwarding never waits for the publisher: with the publisher stuck, acks keep being
// taken (and the bound sheds the oldest).
func TestForwarderDoesNotBlockOnTheUpstream(t *testing.T) {
	stuck := publisherFunc(func(ctx context.Context, _ string, _ []byte) error { <-ctx.Done(); return ctx.Err() })
	f := openTestForwarder(t, t.TempDir(), stuck, 16, 1<<20)
	defer f.close()
	ctx, cancel := context.WithCancel(context.Background())
	f.start(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 1000 {
			f.ack("d1", testAck(i))
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("forwarding blocked behind a stuck publisher")
	}
	cancel()
	f.wg.Wait()
	if n := f.m.forwardDropped.With("bound").Value(); n != 1000-16 {
		t.Errorf("dropped %d, want %d", n, 1000-16)
	}
}

type publisherFunc func(ctx context.Context, topic string, payload []byte) error

func (p publisherFunc) Publish(ctx context.Context, topic string, payload []byte) error {
	return p(ctx, topic, payload)
}

// A device id that could not be replayed is not journalled: the log always opens again.
func TestForwarderRefusesDeviceIDsItCouldNotReplay(t *testing.T) {
	dir := t.TempDir()
	f := openTestForwarder(t, dir, nil, maxForwarded, maxForwardedBytes)
	for _, id := range []string{"", "a/b", "a+", "#", "a\x00", strings.Repeat("d", maxForwardDeviceID+1)} {
		f.ack(id, testAck(1))
	}
	f.ack("ok", testAck(1))
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
	f = openTestForwarder(t, dir, nil, maxForwarded, maxForwardedBytes)
	defer f.close()
	if got := f.backlog(); len(got) != 1 || !strings.HasPrefix(got[0], "A ok ") {
		t.Errorf("backlog %q, want the ack of device ok alone", got)
	}
}
