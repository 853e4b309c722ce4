package backlog

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// While the upstream broker takes every entry before its record is due, the journal is
// not written at all: no add records, no reported records, nothing to replay.
func TestWriteBehindWritesNothingAcceptedInTime(t *testing.T) {
	dir := t.TempDir()
	pub := newCollector()
	// However slow the machine, every entry is accepted within the hour.
	r := openRig(t, dir, forwardOptions(8192, 1<<20, time.Hour))
	stop := r.start(t, pub)
	for i := range 200 {
		if err := r.Add('A', "d1", ack(i)); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if err := r.Add('H', "d2", heartbeat("d2", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	pub.waitFor(t, 200) // at least the acks; coalesced heartbeats may be fewer
	r.waitEmpty(t)
	stop()
	if n := r.records(); n != 0 {
		t.Errorf("%d records appended for entries accepted in time", n)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = openRig(t, dir, forwardOptions(8192, 1<<20, time.Hour))
	defer r.Close()
	if rec := r.Recovery(); rec.Records != 0 {
		t.Errorf("the log replayed %d records, want none", rec.Records)
	}
}

// An entry not accepted within the delay is written then, not sooner, and is replayed
// after a restart; Close writes nothing more for it.
func TestWriteBehindWritesWhatWaitsTooLong(t *testing.T) {
	dir := t.TempDir()
	const delay = 30 * time.Millisecond
	r := openRig(t, dir, forwardOptions(8192, 1<<20, delay)) // no publisher: the upstream is away
	start := time.Now()
	for i := range 3 {
		if err := r.Add('A', "d1", ack(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Add('H', "d1", heartbeat("d1", 7)); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "the records to be written", func() bool { return r.records() == 4 })
	if waited := time.Since(start); waited < delay {
		t.Errorf("written %v after the first add, before the delay of %v", waited, delay)
	}
	want := r.lines()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := r.records(); n != 4 {
		t.Errorf("%d records after close, want the 4 written before", n)
	}
	r = openRig(t, dir, forwardOptions(8192, 1<<20, delay))
	defer r.Close()
	if got := r.lines(); !slices.Equal(got, want) || len(got) != 4 {
		t.Errorf("backlog after replay\n%q\nwant\n%q", got, want)
	}
}

// A heartbeat written while the upstream was away, then replaced by one the broker took
// before it was due (never written), does not come back after a restart: the reported
// record covers the written one.
func TestWriteBehindReportsWrittenEntriesItsKillerOutlived(t *testing.T) {
	dir := t.TempDir()
	pub := newCollector()
	r := openRig(t, dir, forwardOptions(8192, 1<<20, time.Millisecond))
	if err := r.Add('H', "d1", heartbeat("d1", 1)); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "the first heartbeat to be written", func() bool { return r.records() == 1 })
	r.mu.Lock()
	r.writeDelay = time.Hour
	r.mu.Unlock()
	if err := r.Add('H', "d1", heartbeat("d1", 2)); err != nil { // replaces the first; never written
		t.Fatal(err)
	}
	stop := r.start(t, pub)
	if got, want := pub.waitFor(t, 1), []string{testPrefix + "d1/heartbeat " + string(heartbeat("d1", 2))}; !slices.Equal(got, want) {
		t.Errorf("published %q, want %q", got, want)
	}
	r.waitEmpty(t)
	stop()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = openRig(t, dir, forwardOptions(8192, 1<<20, time.Hour))
	defer r.Close()
	if got := r.lines(); len(got) != 0 {
		t.Errorf("came back after a restart: %q", got)
	}
}

// A failed publish stops the round and the next one starts from the same entry, in
// order; a coalesced entry whose turn comes after its replacement is not sent.
func TestDrainerRetriesInOrder(t *testing.T) {
	pub := newCollector()
	pub.setFail(errTest)
	r := openRig(t, t.TempDir(), forwardOptions(8192, 1<<20, 0))
	defer r.Close()
	r.start(t, pub)
	for _, add := range []struct {
		kind    byte
		payload []byte
	}{{'A', ack(1)}, {'H', heartbeat("d1", 1)}, {'A', ack(2)}, {'H', heartbeat("d1", 2)}} {
		if err := r.Add(add.kind, "d1", add.payload); err != nil {
			t.Fatal(err)
		}
	}
	pub.setFail(nil)
	want := []string{testPrefix + "d1/ack " + string(ack(1)), testPrefix + "d1/ack " + string(ack(2)),
		testPrefix + "d1/heartbeat " + string(heartbeat("d1", 2))}
	if got := pub.waitFor(t, 3); !slices.Equal(got, want) {
		t.Errorf("published\n%q\nwant\n%q", got, want)
	}
	r.waitEmpty(t)
	if n := r.m.Coalesced.Value(); n != 1 {
		t.Errorf("coalesced %d, want 1", n)
	}
	if a, h := r.m.PublishedByKind.With("ack").Value(), r.m.PublishedByKind.With("heartbeat").Value(); a != 2 || h != 1 {
		t.Errorf("published %d acks and %d heartbeats, want 2 and 1", a, h)
	}
}

var errTest = errors.New("test: the broker is away")
