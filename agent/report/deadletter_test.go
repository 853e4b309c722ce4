package report

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/publish"
)

// deadRig is a deadletter log under test, with its metrics and backlog events.
type deadRig struct {
	*DeadLetters
	m        *DeadLetterMetrics
	reported events
}

func openTestDeadLetters(t *testing.T, dir string, o DeadLetterOptions) *deadRig {
	t.Helper()
	r := &deadRig{m: NewDeadLetterMetrics(testRegistry()), reported: newEvents()}
	// The zero journal.Options sync with every append (SyncAlways).
	o.Topic, o.Logger, o.Metrics, o.Observe = "faceagent/gw/deadletter", quietLog, r.m, r.reported.observe
	d, err := OpenDeadLetters(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	r.DeadLetters = d
	return r
}

func (r *deadRig) start(t *testing.T, pub publish.Publisher) (stop func()) {
	return running(t, func(ctx context.Context) { r.Start(ctx, pub) }, r.Wait)
}

// waitBacklog waits until the backlog holds want deadletters.
func (r *deadRig) waitBacklog(t *testing.T, want float64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("a backlog of %v", want), func() bool { return r.m.Backlog.Value() == want }, r.reported)
}

// Deadletters survive a restart in order until published; published ones do not come back.
func TestDeadLetterLogReplaysUntilReported(t *testing.T) {
	dir := t.TempDir()
	d := openTestDeadLetters(t, dir, DeadLetterOptions{})
	if err := d.Add([][]byte{[]byte("one"), []byte("two")}); err != nil {
		t.Fatal(err)
	}
	if err := d.Add([][]byte{[]byte("three")}); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil { // never published: the upstream broker was away
		t.Fatal(err)
	}

	pub := newCollector()
	d = openTestDeadLetters(t, dir, DeadLetterOptions{})
	if n := d.m.Backlog.Value(); n != 3 {
		t.Fatalf("backlog after replay %v, want 3", n)
	}
	stop := d.start(t, pub)
	if got := pub.waitFor(t, 3); strings.Join(got, ",") != "one,two,three" {
		t.Errorf("published %v", got)
	}
	if err := d.Add([][]byte{[]byte("four")}); err != nil {
		t.Fatal(err)
	}
	pub.waitFor(t, 4)
	d.waitBacklog(t, 0)
	stop()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	d = openTestDeadLetters(t, dir, DeadLetterOptions{})
	defer d.Close()
	if n := d.Backlog().Stats().Live; n != 0 {
		t.Errorf("reported deadletters replayed: %d", n)
	}
}

// A failing publisher keeps the deadletter and retries; the order holds once it works.
func TestDeadLetterLogRetriesInOrder(t *testing.T) {
	pub := newCollector()
	pub.setFail(errors.New("broker away"))
	d := openTestDeadLetters(t, t.TempDir(), DeadLetterOptions{})
	defer d.Close()
	d.start(t, pub)
	for i := range 5 {
		if err := d.Add([][]byte{fmt.Appendf(nil, "d%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	pub.setFail(nil)
	if got := pub.waitFor(t, 5); strings.Join(got, ",") != "d0,d1,d2,d3,d4" {
		t.Errorf("published %v", got)
	}
}

// The log compacts once most of it is reported: the segments go, a reopen finds nothing.
func TestDeadLetterLogCompacts(t *testing.T) {
	dir := t.TempDir()
	pub := newCollector()
	d := openTestDeadLetters(t, dir, DeadLetterOptions{})
	stop := d.start(t, pub)
	const n = 3 * CompactDeadLetters
	for i := range n {
		if err := d.Add([][]byte{fmt.Appendf(nil, "d%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	pub.waitFor(t, n)
	d.waitBacklog(t, 0)
	waitFor(t, "a compaction", func() bool { return d.Backlog().Stats().Journal.Snapshots > 0 }, d.reported)
	stop()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	d = openTestDeadLetters(t, dir, DeadLetterOptions{})
	defer d.Close()
	if st := d.Backlog().Stats(); st.Live != 0 || st.Records >= CompactDeadLetters+DeadLetterBatch*2 {
		t.Errorf("after compaction: %d pending, %d records", st.Live, st.Records)
	}
}

// Room refuses what does not fit, and counts it; Add does not check (Room did).
func TestDeadLetterRoom(t *testing.T) {
	d := openTestDeadLetters(t, t.TempDir(), DeadLetterOptions{MaxCount: 2, MaxBytes: 10})
	defer d.Close()
	if err := d.Room(2, 10); err != nil {
		t.Fatalf("within the bound: %v", err)
	}
	if err := d.Add([][]byte{[]byte("12345")}); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]int{{2, 1}, {1, 6}} {
		if err := d.Room(c[0], c[1]); !errors.Is(err, ErrDeadLetterBacklog) {
			t.Errorf("Room(%d, %d) with 1 of 2 and 5 of 10 bytes taken: %v", c[0], c[1], err)
		}
	}
	if n := d.m.Refused.Value(); n != 2 {
		t.Errorf("refusals counted %d, want 2", n)
	}
}
