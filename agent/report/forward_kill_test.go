package report

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

const forwardChildEnv = "FACEAGENT_FORWARD_CRASH_DIR"

// killBound keeps the bound out of the crash test: nothing is dropped, so the replayed
// backlog is every ack forwarded and written.
const killBound = 1 << 24

// forwardChild forwards acks 0, 1, 2, … into a forward log in dir (no publisher: the
// upstream broker is away) and prints each ack's number once the journal has written
// it (journal.Stats().Records, fsynced with SyncAlways) — until the parent kills it.
func forwardChild(dir string) {
	f, err := OpenForwarder(dir, ForwardOptions{Journal: journal.Options{Sync: journal.SyncAlways}, Prefix: testForwardPrefix,
		MaxCount: killBound, MaxBytes: 1 << 30, Logger: quietLog})
	if err != nil {
		fmt.Fprintln(os.Stderr, "forward child:", err)
		os.Exit(3)
	}
	fmt.Println("ready")
	written := 0
	for i := 0; ; i++ {
		f.Ack("k1", testAck(i))
		for ; written < int(f.Backlog().Stats().Journal.Records); written++ {
			fmt.Println(written)
		}
		if i%64 == 63 {
			time.Sleep(time.Millisecond) // a terminal's pace, not a tight loop: lazy batches form
		}
	}
}

// SIGKILL while acks are being forwarded: every ack the journal had written is replayed,
// and what is replayed is the acks in the order forwarded, with no gap — a prefix of what
// the killed process forwarded (only the last lazy batch may be lost).
func TestForwardedAcksSurviveSIGKILL(t *testing.T) {
	dir := t.TempDir()
	written := -1
	n := testutil.CrashChild(t, []string{forwardChildEnv + "=" + dir}, 20*time.Second, 300*time.Millisecond, func(line string) {
		i, err := strconv.Atoi(line)
		if err != nil {
			t.Errorf("child said %q", line)
		}
		written = max(written, i)
	})
	if n == 0 {
		t.Fatal("the child had no ack written before the kill")
	}
	f := openTestForwarder(t, dir, nil, killBound, 1<<30)
	defer f.Close()
	backlog := f.backlog()
	if len(backlog) <= written {
		t.Fatalf("%d acks replayed; the child saw %d written", len(backlog), written+1)
	}
	for i, e := range backlog {
		if want := fmt.Sprintf("A k1 {\"messageId\":\"AddPerson-%d-1\",\"code\":0,\"message\":\"\"}", i); e != want {
			t.Fatalf("replayed entry %d is %q, want %q", i, e, want)
		}
	}
	t.Logf("%d acks written before SIGKILL, %d replayed in order", written+1, len(backlog))
}
