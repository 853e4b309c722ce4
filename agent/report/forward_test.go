package report

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/publish"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// newTopicCollector is a collector that keeps "topic payload" lines.
func newTopicCollector() *collector { return &collector{more: make(chan struct{}, 1), withTopic: true} }

const testForwardPrefix = "faceagent/gw/devices/"

// fwdRig is a forwarder under test: its metrics, its backlog's events, its publisher.
type fwdRig struct {
	*Forwarder
	m        *ForwardMetrics
	reported events // every backlog event (reported, written, compacted)
	pub      publish.Publisher
	wg       sync.WaitGroup
}

func openTestForwarder(t *testing.T, dir string, pub publish.Publisher, maxCount, maxBytes int) *fwdRig {
	t.Helper()
	return openTestForwarderWith(t, dir, pub, ForwardOptions{MaxCount: maxCount, MaxBytes: maxBytes})
}

func openTestForwarderWith(t *testing.T, dir string, pub publish.Publisher, o ForwardOptions) *fwdRig {
	t.Helper()
	r := &fwdRig{m: NewForwardMetrics(testRegistry()), reported: newEvents(), pub: pub}
	// The zero journal.Options sync with every append (SyncAlways).
	o.Prefix, o.Logger, o.Metrics, o.Observe = testForwardPrefix, quietLog, r.m, r.reported.observe
	f, err := OpenForwarder(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	r.Forwarder = f
	return r
}

// start publishes through the rig's publisher until ctx ends; wg.Wait waits for it.
func (r *fwdRig) start(ctx context.Context) {
	r.Start(ctx, r.pub)
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.Wait() }()
}

// backlog lists the live entries as "kind device payload".
func (r *fwdRig) backlog() []string {
	var out []string
	for _, e := range r.Backlog().Entries() {
		out = append(out, fmt.Sprintf("%c %s %s", e.Kind, e.Key, e.Payload))
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

// Acks forwarded while nothing publishes survive a restart in order, and go out in order
// once a publisher takes them; after that they do not come back.
func TestForwarderReplaysInOrderUntilReported(t *testing.T) {
	dir := t.TempDir()
	f := openTestForwarder(t, dir, nil, MaxForwarded, MaxForwardedBytes)
	var want []string
	for i := range 5 {
		dev := []string{"d1", "d2"}[i%2]
		f.Ack(dev, testAck(i))
		want = append(want, ackLine(dev, i))
	}
	if err := f.Close(); err != nil { // lazily written records are flushed by Close
		t.Fatal(err)
	}

	pub := newTopicCollector()
	f = openTestForwarder(t, dir, pub, MaxForwarded, MaxForwardedBytes)
	if n := f.m.Backlog.Value(); n != 5 {
		t.Fatalf("backlog after replay %v, want 5", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.start(ctx)
	if got := pub.waitFor(t, 5); !slices.Equal(got, want) {
		t.Errorf("published\n%q\nwant\n%q", got, want)
	}
	waitFor(t, "the backlog to empty", func() bool { return f.m.Backlog.Value() == 0 }, f.reported)
	if n := f.m.Forwarded.With("ack").Value(); n != 5 {
		t.Errorf("faceagent_forwarded_total{kind=ack} = %d, want 5", n)
	}
	cancel()
	f.wg.Wait()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	f = openTestForwarder(t, dir, nil, MaxForwarded, MaxForwardedBytes)
	defer f.Close()
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
	f := openTestForwarder(t, t.TempDir(), pub, MaxForwarded, MaxForwardedBytes)
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); f.wg.Wait() }()
	f.start(ctx)
	f.Ack("d1", testAck(1))
	f.Heartbeat("d1", testHeartbeat("d1", 1))
	f.Ack("d1", testAck(2))
	pub.setFail(nil)
	got := pub.waitFor(t, 3)
	if want := []string{ackLine("d1", 1), heartbeatLine("d1", 1), ackLine("d1", 2)}; !slices.Equal(got, want) {
		t.Errorf("published\n%q\nwant\n%q", got, want)
	}
	waitFor(t, "the backlog to empty", func() bool { return f.m.Backlog.Value() == 0 }, f.reported)
}

// A device's heartbeat replaces its older one not yet sent, live and after a restart;
// acks are never coalesced.
func TestForwarderCoalescesHeartbeats(t *testing.T) {
	dir := t.TempDir()
	f := openTestForwarder(t, dir, nil, MaxForwarded, MaxForwardedBytes)
	f.Heartbeat("d1", testHeartbeat("d1", 1))
	f.Ack("d1", testAck(1))
	f.Heartbeat("d2", testHeartbeat("d2", 1))
	for p := 2; p <= 50; p++ {
		f.Heartbeat("d1", testHeartbeat("d1", p))
	}
	f.Ack("d1", testAck(1)) // the same ack again: both go
	want := []string{ackLine("d1", 1), heartbeatLine("d2", 1), heartbeatLine("d1", 50), ackLine("d1", 1)}
	if n := f.m.Coalesced.Value(); n != 49 {
		t.Errorf("coalesced %d, want 49", n)
	}
	live := f.backlog()
	if len(live) != 4 {
		t.Fatalf("backlog %q, want 4 entries", live)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	pub := newTopicCollector()
	f = openTestForwarder(t, dir, pub, MaxForwarded, MaxForwardedBytes)
	defer f.Close()
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
	f.Heartbeat("d1", testHeartbeat("d1", 1))
	for i := 1; i <= 6; i++ {
		f.Ack("d1", testAck(i))
	}
	f.Heartbeat("d1", testHeartbeat("d1", 2)) // replaces the first: no drop
	want := []string{ackLine("d1", 4), ackLine("d1", 5), ackLine("d1", 6), heartbeatLine("d1", 2)}
	if n := f.m.Dropped.With("bound").Value(); n != 3 {
		t.Errorf("dropped by the bound %d, want 3", n)
	}
	if n := f.m.Backlog.Value(); n != 4 {
		t.Errorf("backlog %v, want 4", n)
	}
	live := f.backlog()
	if err := f.Close(); err != nil {
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
	f.Close()

	// Only heartbeats: nothing to drop, the newcomer is refused.
	f = openTestForwarder(t, t.TempDir(), nil, 2, 1<<20)
	defer f.Close()
	for _, d := range []string{"a", "b", "c"} {
		f.Heartbeat(d, testHeartbeat(d, 1))
	}
	if got := f.backlog(); len(got) != 2 || !strings.Contains(got[1], " b ") {
		t.Errorf("backlog %q, want the heartbeats of a and b", got)
	}
	if n := f.m.Dropped.With("refused").Value(); n != 1 {
		t.Errorf("refused %d, want 1", n)
	}
}

// The byte bound counts device ids and payloads.
func TestForwarderByteBound(t *testing.T) {
	one := len(ackLine("d1", 1)) - len(testForwardPrefix+"d1/ack ") + len("d1")
	f := openTestForwarder(t, t.TempDir(), nil, 100, 3*one)
	defer f.Close()
	for i := 1; i <= 5; i++ {
		f.Ack("d1", testAck(i))
	}
	if got := f.backlog(); len(got) != 3 || !strings.Contains(got[0], "AddPerson-3-1") {
		t.Errorf("backlog %q, want acks 3 to 5", got)
	}
	if n := f.m.BacklogBytes.Value(); int(n) != 3*one {
		t.Errorf("backlog bytes %v, want %d", n, 3*one)
	}
}

// Compaction keeps the backlog (and nothing published) across a restart, and the log
// stays small while heartbeats coalesce during an outage.
func TestForwarderCompacts(t *testing.T) {
	const every, n = 100, 2000
	dir := t.TempDir()
	pub := newTopicCollector()
	// Every add written at once, as if the upstream always took longer.
	f := openTestForwarderWith(t, dir, pub, ForwardOptions{CompactAfter: every, WriteDelay: -1})
	compacted := func() bool {
		st := f.Backlog().Stats()
		return st.Records-st.Live < every
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.start(ctx)
	for i := range n {
		f.Ack("d1", testAck(i))
	}
	pub.waitFor(t, n)
	waitFor(t, "the backlog to empty", func() bool { return f.m.Backlog.Value() == 0 }, f.reported)
	waitFor(t, "a snapshot", compacted, f.reported)
	pub.setFail(errPublishFailed) // the broker is away: heartbeats coalesce in the log
	for p := range n {
		f.Heartbeat("d1", testHeartbeat("d1", p))
	}
	f.Ack("d2", testAck(7))
	waitFor(t, "a snapshot", compacted, f.reported)
	cancel()
	f.wg.Wait()
	snaps, _ := filepath.Glob(filepath.Join(dir, "*.snap"))
	if len(snaps) != 1 {
		t.Errorf("%d snapshots, want 1", len(snaps))
	}
	live := f.backlog()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openTestForwarder(t, dir, nil, MaxForwarded, MaxForwardedBytes)
	defer f.Close()
	if got := f.backlog(); !slices.Equal(got, live) || len(got) != 2 {
		t.Errorf("backlog after compaction and replay %q, want %q (2 entries)", got, live)
	}
	// Without compaction the log would hold more than 2n records.
	if rec := f.Backlog().Recovery(); rec.SnapshotRecords+rec.Records > n/2 {
		t.Errorf("the log replayed %d+%d records; compaction every %d dead ones should keep it far smaller",
			rec.SnapshotRecords, rec.Records, every)
	}
}

// Forwarding never waits for the publisher: with the publisher stuck, acks keep being
// taken (and the bound sheds the oldest).
func TestForwarderDoesNotBlockOnTheUpstream(t *testing.T) {
	stuck := publisherFunc(func(ctx context.Context, _ string, _ []byte) error { <-ctx.Done(); return ctx.Err() })
	f := openTestForwarder(t, t.TempDir(), stuck, 16, 1<<20)
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	f.start(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 1000 {
			f.Ack("d1", testAck(i))
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("forwarding blocked behind a stuck publisher")
	}
	cancel()
	f.wg.Wait()
	if n := f.m.Dropped.With("bound").Value(); n != 1000-16 {
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
	f := openTestForwarder(t, dir, nil, MaxForwarded, MaxForwardedBytes)
	for _, id := range []string{"", "a/b", "a+", "#", "a\x00", strings.Repeat("d", backlog.MaxKeyLen+1)} {
		f.Ack(id, testAck(1))
	}
	f.Ack("ok", testAck(1))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = openTestForwarder(t, dir, nil, MaxForwarded, MaxForwardedBytes)
	defer f.Close()
	if got := f.backlog(); len(got) != 1 || !strings.HasPrefix(got[0], "A ok ") {
		t.Errorf("backlog %q, want the ack of device ok alone", got)
	}
}
