package report

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// smallLogBound is the most a forward or deadletter log occupies with live bytes of backlog,
// when at most written bytes are written between two compaction checks (agent/doc.go,
// "Disk"; agent/backlog, "Compaction"): the open segment's reserved blocks, the files (live, up to max(segment, live)
// dead bytes and what was written since the last check), a snapshot being written (live),
// and block rounding.
func smallLogBound(live, written int64) int64 {
	return backlog.SegmentSize + 2*live + max(backlog.SegmentSize, live) + written + 64<<10
}

// TestDeadLetterLogStaysWithinItsBound: deadletters carry the refused message, so 1,024
// dead records (the count that starts a compaction) can be hundreds of megabytes; a stream
// of 256 KiB deadletters, each published and reported, keeps the log's directory within its
// bound all along.
func TestDeadLetterLogStaysWithinItsBound(t *testing.T) {
	const n, size = 300, 256 << 10
	dir := t.TempDir()
	pub := newCollector()
	d := openTestDeadLetters(t, dir, DeadLetterOptions{Journal: journal.Options{Sync: journal.SyncNone, SegmentSize: backlog.SegmentSize}})
	defer d.Close()
	d.start(t, pub)
	payload := []byte(strings.Repeat("x", size))
	bound := smallLogBound(0, size+backlog.RecordOverhead)
	var most int64
	for i := range n {
		if err := d.Add([][]byte{payload}); err != nil {
			t.Fatal(err)
		}
		pub.waitFor(t, i+1)
		d.waitBacklog(t, 0)
		most = max(most, testutil.DirDiskBytes(t, dir))
		if most > bound {
			t.Fatalf("after %d deadletters of %d bytes the log occupies %d bytes, over its bound %d", i+1, size, most, bound)
		}
	}
	t.Logf("%d deadletters of %d bytes: at most %d bytes on disk (bound %d), %d snapshots", n, size, most, bound, d.Backlog().Stats().Journal.Snapshots)
}

// TestForwardLogStaysWithinItsBound: acks with the longest message and id a terminal may
// send, each written (the upstream slower than the write-behind delay), published and
// reported, 100 at a time, keep the forward log's directory within its bound through
// several compactions.
func TestForwardLogStaysWithinItsBound(t *testing.T) {
	const rounds, perRound = 180, 100 // about three compactions' worth of dead bytes
	dir := t.TempDir()
	pub := newTopicCollector()
	// Every ack written at once.
	f := openTestForwarderWith(t, dir, pub, ForwardOptions{Journal: journal.Options{Sync: journal.SyncNone, SegmentSize: backlog.SegmentSize}, WriteDelay: -1})
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); f.wg.Wait() }()
	f.start(ctx)
	message := strings.Repeat("m", face.MaxTextLen)
	id := strings.Repeat("i", face.MaxIDLen-8)
	// A round's acks are written before they are reported, and the compactor, poked once the
	// dead bytes call for a snapshot, runs on its own goroutine: on a loaded machine the next
	// round may be written before it gets its turn.
	bound := smallLogBound(0, 2*perRound<<10)
	var most int64
	for r := range rounds {
		for i := range perRound {
			f.Ack("d1", face.Ack{MessageID: fmt.Sprintf("%s%08d", id, r*perRound+i), Code: 1, Message: message})
		}
		pub.waitFor(t, (r+1)*perRound)
		waitFor(t, "the backlog to empty", func() bool { return f.m.Backlog.Value() == 0 }, f.reported)
		most = max(most, testutil.DirDiskBytes(t, dir))
		if most > bound {
			t.Fatalf("after %d acks the forward log occupies %d bytes, over its bound %d", (r+1)*perRound, most, bound)
		}
	}
	// The compactor runs on its own goroutine: the last one poked may still be writing.
	waitFor(t, fmt.Sprintf("two snapshots after %d acks of %d bytes", rounds*perRound, len(message)),
		func() bool { return f.Backlog().Stats().Journal.Snapshots >= 2 }, f.reported)
	t.Logf("%d acks: at most %d bytes on disk (bound %d), %d snapshots", rounds*perRound, most, bound, f.Backlog().Stats().Journal.Snapshots)
}
