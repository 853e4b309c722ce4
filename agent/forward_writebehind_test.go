package agent

import (
	"context"
	"slices"
	"testing"
	"time"
)

// writtenRecords is how many records the forwarder appended since Open (or its last
// snapshot).
func (f *forwarder) writtenRecords() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.records
}

// While the upstream broker takes every message before its record is due, the forward
// log is not written at all: no add records, no reported records, nothing to replay.
func TestForwarderWritesNothingAcceptedInTime(t *testing.T) {
	dir := t.TempDir()
	pub := newTopicCollector()
	f := openTestForwarder(t, dir, pub, maxForwarded, maxForwardedBytes)
	f.writeDelay = time.Hour // however slow the machine, every message is accepted in time
	ctx, cancel := context.WithCancel(context.Background())
	f.start(ctx)
	for i := range 200 {
		f.ack("d1", testAck(i))
		if i%10 == 0 {
			f.heartbeat("d2", testHeartbeat("d2", i))
		}
	}
	pub.waitFor(t, 200) // at least the acks; coalesced heartbeats may be fewer
	waitFor(t, "the backlog to empty", func() bool { return f.m.forwardBacklog.Value() == 0 }, f.reported)
	cancel()
	f.wg.Wait()
	if n := f.writtenRecords(); n != 0 {
		t.Errorf("%d records appended for messages accepted in time", n)
	}
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
	f = openTestForwarder(t, dir, nil, maxForwarded, maxForwardedBytes)
	defer f.close()
	if rec := f.j.Recovery(); rec.Records != 0 {
		t.Errorf("the log replayed %d records, want none", rec.Records)
	}
}

// A message not accepted within the delay is written then, not sooner, and is replayed
// after a restart; close writes nothing more for it.
func TestForwarderWritesWhatWaitsTooLong(t *testing.T) {
	dir := t.TempDir()
	f := openTestForwarder(t, dir, nil, maxForwarded, maxForwardedBytes) // no publisher: the upstream is away
	const delay = 30 * time.Millisecond
	f.mu.Lock()
	f.writeDelay = delay
	f.mu.Unlock()
	start := time.Now()
	for i := range 3 {
		f.ack("d1", testAck(i))
	}
	f.heartbeat("d1", testHeartbeat("d1", 7))
	waitFor(t, "the records to be written", func() bool { return f.writtenRecords() == 4 }, f.written)
	if waited := time.Since(start); waited < delay {
		t.Errorf("written %v after the first add, before the delay of %v", waited, delay)
	}
	want := f.backlog()
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
	if n := f.writtenRecords(); n != 4 {
		t.Errorf("%d records after close, want the 4 written before", n)
	}
	f = openTestForwarder(t, dir, nil, maxForwarded, maxForwardedBytes)
	defer f.close()
	if got := f.backlog(); !slices.Equal(got, want) || len(got) != 4 {
		t.Errorf("backlog after replay\n%q\nwant\n%q", got, want)
	}
}

// A heartbeat written while the upstream was away, then replaced by one the broker took
// before it was due (never written), does not come back after a restart: the reported
// record covers the written one.
func TestForwarderReportsWrittenEntriesItsKillerOutlived(t *testing.T) {
	dir := t.TempDir()
	pub := newTopicCollector()
	f := openTestForwarder(t, dir, pub, maxForwarded, maxForwardedBytes)
	f.mu.Lock()
	f.writeDelay = time.Millisecond
	f.mu.Unlock()
	f.heartbeat("d1", testHeartbeat("d1", 1))
	waitFor(t, "the first heartbeat to be written", func() bool { return f.writtenRecords() == 1 }, f.written)
	f.mu.Lock()
	f.writeDelay = time.Hour
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	f.heartbeat("d1", testHeartbeat("d1", 2)) // replaces the first; never written
	f.start(ctx)
	if got, want := pub.waitFor(t, 1), []string{heartbeatLine("d1", 2)}; !slices.Equal(got, want) {
		t.Errorf("published %q, want %q", got, want)
	}
	waitFor(t, "the backlog to empty", func() bool { return f.m.forwardBacklog.Value() == 0 }, f.reported)
	cancel()
	f.wg.Wait()
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
	f = openTestForwarder(t, dir, nil, maxForwarded, maxForwardedBytes)
	defer f.close()
	if got := f.backlog(); len(got) != 0 {
		t.Errorf("came back after a restart: %q", got)
	}
}
