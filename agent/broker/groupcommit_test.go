package broker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

func openTestCommitter(t *testing.T, dir string) *committer {
	t.Helper()
	j, err := journal.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newCommitter(j, slog.New(slog.DiscardHandler))
	if err := c.replay(nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// liveKeys renders the committed records of c.
func liveKeys(c *committer) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]string{}
	for k, v := range c.live {
		m[k] = string(v)
	}
	return fmt.Sprint(m)
}

// TestGroupCommitBatches: the last change of a key wins; a put acknowledged in the same
// batch writes nothing, not even a journal record; a record already on disk is deleted;
// dropping a client deletes its committed and its queued records, not another's. What
// was committed is what a reopened journal replays.
func TestGroupCommitBatches(t *testing.T) {
	dir := t.TempDir()
	c := openTestCommitter(t, dir)
	a, b, cc, d := clientKey("a"), subscriptionKey("a", "x/#"), inflightKey("a", 1), inflightKey("a:b", 2)
	steps := []struct {
		batch   []write
		keys    map[string]string
		commits uint64
	}{
		{[]write{{key: a, value: []byte("1")}, {key: a}}, map[string]string{}, 0},
		{[]write{{key: b, value: []byte("1")}, {key: b, value: []byte("2")}}, map[string]string{b: "2"}, 1},
		{[]write{{key: cc, value: []byte("1")}, {key: b}, {key: cc}}, map[string]string{}, 2},
		{[]write{{key: "never"}}, map[string]string{}, 2},
		{[]write{{key: d, value: []byte("1")}}, map[string]string{d: "1"}, 3},
		{[]write{{key: d, value: []byte("2")}, {key: d}}, map[string]string{}, 4}, // a resend acked: the old record goes
		{[]write{{key: a, value: []byte("c")}, {key: b, value: []byte("s")}, {key: d, value: []byte("other")}}, map[string]string{a: "c", b: "s", d: "other"}, 5},
		{[]write{{key: cc, value: []byte("m")}, {dropClient: "a"}, {key: b, value: []byte("s2")}}, map[string]string{b: "s2", d: "other"}, 6},
		{[]write{{dropClient: "nobody"}}, map[string]string{b: "s2", d: "other"}, 6},
	}
	for i, s := range steps {
		if err := c.commit(s.batch); err != nil {
			t.Fatal(err)
		}
		if got, want := liveKeys(c), fmt.Sprint(s.keys); got != want {
			t.Fatalf("step %d: keys %v, want %v", i, got, want)
		}
		if c.commits != s.commits {
			t.Fatalf("step %d: %d commits, want %d", i, c.commits, s.commits)
		}
	}
	if n := c.j.Stats().Records; n != c.commits {
		t.Fatalf("%d journal records for %d commits", n, c.commits)
	}
	c.start()
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	reopened := openTestCommitter(t, dir)
	defer reopened.close()
	if got, want := liveKeys(reopened), fmt.Sprint(steps[len(steps)-1].keys); got != want {
		t.Fatalf("replayed %v, want %v", got, want)
	}
}

// TestSessionsJournalCompacts: records that keep being replaced do not grow the journal
// without bound: once the dead bytes pass a segment's worth (and the live bytes), a
// snapshot replaces the files, and replay gives the live records back.
func TestSessionsJournalCompacts(t *testing.T) {
	dir := t.TempDir()
	c := openTestCommitter(t, dir)
	c.minDead = 64 << 10
	c.start()
	keep := inflightKey("another-office", 9)
	if err := c.enqueueWait(write{key: keep, value: []byte("kept")}); err != nil {
		t.Fatal(err)
	}
	const rounds = 20_000
	value := strings.Repeat("m", 100)
	var most int64
	for i := range rounds {
		// 100 keys, each replaced in every commit of 100 (one fsync each).
		c.enqueue(write{key: inflightKey("back-office", uint16(1+i%100)), value: fmt.Appendf(nil, "%s%d", value, i)})
		if i%100 == 99 {
			if err := c.sync(); err != nil {
				t.Fatal(err)
			}
			// Measured once a snapshot started meanwhile is written: while it is, the files
			// also hold what is committed meanwhile, as much as the snapshot's writer lags
			// (seconds on a loaded CI machine), which is no bound of the journal's.
			c.waitCompaction()
			most = max(most, c.j.Stats().FileBytes)
		}
	}
	for i := range 100 {
		c.enqueue(write{key: inflightKey("back-office", uint16(1+i))})
	}
	if err := c.sync(); err != nil {
		t.Fatal(err)
	}
	c.waitCompaction()
	st := c.stats()
	// Many times the live records written; between snapshots the files never hold more
	// than the live records, the dead bytes a compaction waits for and one commit of 100.
	if bound := 2*st.LiveBytes + 3*c.minDead; st.Compactions < 10 || most > bound {
		t.Fatalf("%d compactions; the files reached %d bytes, bound %d", st.Compactions, most, bound)
	}
	want := liveKeys(c)
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	reopened := openTestCommitter(t, dir)
	defer reopened.close()
	if got := liveKeys(reopened); got != want || !strings.Contains(got, "kept") {
		t.Fatalf("replayed %v, want %v", got, want)
	}
}

// publishInline publishes n messages through the broker's inline client.
func publishInline(t testing.TB, b *Broker, topic string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if err := b.Server().Publish(topic, []byte(fmt.Sprint(i)), false, 1); err != nil {
			t.Fatal(err)
		}
	}
}

// receiveAll waits for the payloads from..from+n-1 (in any order, duplicates allowed).
func receiveAll(t *testing.T, c *client, from, n int) {
	t.Helper()
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case m := <-c.other:
			seen[string(m.Payload)] = true
		case <-time.After(waitFor):
			t.Fatalf("%d of %d messages", len(seen), n)
		}
	}
	for i := from; i < from+n; i++ {
		if !seen[fmt.Sprint(i)] {
			t.Fatalf("message %d missing", i)
		}
	}
}

// TestInlinePublishIsStoredWhenItReturns: what Server().Publish routed to a kept session is
// in the sessions journal when Publish returns (the agent marks results reported then), so a
// crash right after loses none of it.
func TestInlinePublishIsStoredWhenItReturns(t *testing.T) {
	dir := t.TempDir()
	b1 := startBroker(t, Options{DataDir: dir})
	dial(t, b1.Addr(), "back-office", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"results"}}).close()
	const n = 200
	publishInline(t, b1, "results", 0, n)
	crashed := crashCopy(t, dir)

	b2 := startBroker(t, Options{DataDir: crashed})
	f := false
	receiveAll(t, dial(t, b2.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600, noSubscribe: true}), 0, n)
}

// TestPublishDeferredThenSync: what PublishDeferred published survives a crash once
// SyncSessions returned.
func TestPublishDeferredThenSync(t *testing.T) {
	dir := t.TempDir()
	b1 := startBroker(t, Options{DataDir: dir})
	dial(t, b1.Addr(), "back-office", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"results"}}).close()
	const n = 200
	for i := range n {
		if err := b1.PublishDeferred("results", []byte(fmt.Sprint(i)), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := b1.SyncSessions(); err != nil {
		t.Fatal(err)
	}
	crashed := crashCopy(t, dir)

	b2 := startBroker(t, Options{DataDir: crashed})
	f := false
	receiveAll(t, dial(t, b2.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600, noSubscribe: true}), 0, n)
}

// TestCloseFlushesQueuedRecords: messages from a network publisher (not waited for) reach
// the kept session after a clean restart.
func TestCloseFlushesQueuedRecords(t *testing.T) {
	dir := t.TempDir()
	b1, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Start(); err != nil {
		t.Fatal(err)
	}
	dial(t, b1.Addr(), "back-office", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"results"}}).close()
	pub := dial(t, b1.Addr(), "agent", dialOptions{noSubscribe: true})
	const n = 100
	for i := range n {
		if _, err := pub.c.Publish(context.Background(), &paho.Publish{QoS: 1, Topic: "results", Payload: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	pub.close()
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, Options{DataDir: dir})
	f := false
	receiveAll(t, dial(t, b2.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600, noSubscribe: true}), 0, n)
}

// TestVolatileTopicsAreNotStored: a kept session gets messages on volatile topics while the
// broker runs, but only the others are written to the sessions journal.
func TestVolatileTopicsAreNotStored(t *testing.T) {
	dir := t.TempDir()
	opts := Options{DataDir: dir, VolatileTopics: []string{"faceagent/+/devices/+/heartbeat", "faceagent/+/devices/+/ack"}}
	b1 := startBroker(t, opts)
	dial(t, b1.Addr(), "back-office", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"faceagent/gw/#"}}).close()
	for _, topic := range []string{"faceagent/gw/devices/d1/heartbeat", "faceagent/gw/devices/d1/ack", "faceagent/gw/results"} {
		if err := b1.Server().Publish(topic, []byte(topic), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	crashed := crashCopy(t, dir)
	f := false
	live := dial(t, b1.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600, noSubscribe: true})
	for range 3 {
		live.next()
	}
	live.close()

	b2 := startBroker(t, Options{DataDir: crashed})
	back := dial(t, b2.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600})
	if m := back.next(); m.Topic != "faceagent/gw/results" {
		t.Fatalf("restored session got %s", m.Topic)
	}
	back.none()
}

func TestTopicMatches(t *testing.T) {
	for _, c := range []struct {
		filter, topic string
		want          bool
	}{
		{"a/+/c", "a/b/c", true},
		{"a/+/c", "a/b/d", false},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"#", "a/b", true},
		{"a/+", "a", false},
		{"a/+", "a/b/c", false},
		{"a/b", "a/b", true},
		{"a/b", "a/b/c", false},
		{"faceagent/+/devices/+/ack", "faceagent/gw/devices/7/ack", true},
		{"faceagent/+/devices/+/ack", "faceagent/gw/results", false},
	} {
		if got := topicMatches(c.filter, c.topic); got != c.want {
			t.Errorf("topicMatches(%q, %q) = %v", c.filter, c.topic, got)
		}
	}
}

// The writes waiting for the committer are bounded in bytes: with nothing committing, a
// write that would take the queue over maxQueuedWriteBytes waits, and goes once the
// committer runs; one larger than the bound goes when the queue is empty.
func TestCommitterQueueBoundInBytes(t *testing.T) {
	c := openTestCommitter(t, t.TempDir())
	half := make([]byte, maxQueuedWriteBytes/2-16)
	for i := range 2 {
		if _, err := c.enqueue(write{key: inflightKey("c", uint16(i+1)), value: half}); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	full := !c.roomFor(len(half))
	c.mu.Unlock()
	if !full {
		t.Fatal("room for a third half-bound write")
	}
	done := make(chan uint64)
	go func() {
		seq, _ := c.enqueue(write{key: inflightKey("c", 3), value: half})
		done <- seq
	}()
	c.start() // the committer takes the queue: the waiting write goes
	seq := <-done
	if err := c.wait(seq); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 2*maxQueuedWriteBytes)
	seq, _ = c.enqueue(write{key: inflightKey("c", 4), value: big}) // alone: goes
	if err := c.wait(seq); err != nil {
		t.Fatal(err)
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	if !c.onDiskHas(inflightKey("c", 3)) || !c.onDiskHas(inflightKey("c", 4)) {
		t.Error("a write that waited for room, or one larger than the bound, was not committed")
	}
}
