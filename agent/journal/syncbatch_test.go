package journal

import (
	"fmt"
	"testing"
	"time"
)

// awaitFsync waits until the gated FS holds an fsync, or fails the test after a generous
// bound: an fsync that does not come within it is held by something it must not be.
func awaitFsync(t *testing.T, g *gatedFS, what string) {
	t.Helper()
	select {
	case <-g.waiting:
	case <-time.After(10 * time.Second):
		t.Fatalf("no fsync started for %s", what)
	}
}

// SyncBatch does not hold a lone record for BatchWindow: with a window of an hour, the
// fsync of a record appended to an idle journal starts at once. Records appended after
// it, within the window, are still gathered into one batch.
func TestSyncBatchLoneRecordGoesAtOnce(t *testing.T) {
	g := &gatedFS{waiting: make(chan struct{})}
	j := openT(t, t.TempDir(), &Options{FS: g, Sync: SyncBatch, BatchWindow: time.Hour})
	gate := g.hold()
	seq, err := j.AppendAsync([]byte("lone"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- j.Wait(seq) }()
	awaitFsync(t, g, "a lone record on an idle journal (held by the window?)")
	g.mu.Lock()
	g.gate = nil // later fsyncs pass
	g.mu.Unlock()
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := j.Stats(); st.Batches != 1 || st.Records != 1 {
		t.Fatalf("after the lone record: %+v, want 1 batch of 1", st)
	}

	// Within the hour after that fsync: the window gathers. Both records wait for the
	// next batch, which Close writes.
	for i := range 2 {
		if _, err := j.AppendAsync(fmt.Appendf(nil, "later-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if st := j.Stats(); st.Batches != 2 || st.Records != 3 {
		t.Fatalf("after Close: %+v, want 2 batches, 3 records", st)
	}
	j = openT(t, j.Dir(), nil)
	defer j.Close()
	if got := replayAll(t, j); len(got) != 3 || got[2] != "later-1" {
		t.Fatalf("replayed %q", got)
	}
}

// Under SyncBatch as under SyncAlways, what is appended while an fsync runs forms the next
// batch: one more fsync, not one per record.
func TestSyncBatchAppendsDuringFsyncShareTheNext(t *testing.T) {
	for _, pol := range []SyncPolicy{SyncAlways, SyncBatch} {
		t.Run(pol.String(), func(t *testing.T) {
			g := &gatedFS{waiting: make(chan struct{})}
			j := openT(t, t.TempDir(), &Options{FS: g, Sync: pol, BatchWindow: time.Millisecond})
			defer j.Close()
			gate := g.hold()
			if _, err := j.AppendAsync([]byte("first")); err != nil {
				t.Fatal(err)
			}
			awaitFsync(t, g, "the first record")
			var last Seq
			for i := range 10 {
				seq, err := j.AppendAsync(fmt.Appendf(nil, "during-%d", i))
				if err != nil {
					t.Fatal(err)
				}
				last = seq
			}
			g.mu.Lock()
			g.gate = nil
			g.mu.Unlock()
			close(gate)
			if err := j.Wait(last); err != nil {
				t.Fatal(err)
			}
			if st := j.Stats(); st.Batches != 2 || st.Records != 11 {
				t.Fatalf("%+v, want 2 batches of 11 records", st)
			}
		})
	}
}
