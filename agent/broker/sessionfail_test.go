package broker

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// budgetFS is the operating system's file layer with a byte budget, as a filling disk: a
// write past it writes what fits and fails with ENOSPC. Each snapshot file it creates is
// announced on snaps (when set), with the time.
type budgetFS struct {
	journal.OSFS
	mu     sync.Mutex
	budget int64 // < 0: unlimited
	snaps  chan time.Time
}

type budgetFile struct {
	*os.File
	fs *budgetFS
}

func (b *budgetFS) OpenFile(name string, flag int, perm os.FileMode) (journal.File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(name, ".snap.tmp") && b.snaps != nil {
		select {
		case b.snaps <- time.Now():
		default:
		}
	}
	return &budgetFile{f, b}, nil
}

func (b *budgetFS) setBudget(n int64) { b.mu.Lock(); b.budget = n; b.mu.Unlock() }

func (f *budgetFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	n := int64(len(p))
	if f.fs.budget >= 0 {
		n = min(n, f.fs.budget)
		f.fs.budget -= n
	}
	f.fs.mu.Unlock()
	w, err := f.File.WriteAt(p[:n], off)
	if err == nil && w < len(p) {
		err = &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return w, err
}

// openFaultCommitter starts a committer on a journal in dir written through bfs.
func openFaultCommitter(t *testing.T, dir string, bfs *budgetFS, log *slog.Logger) *committer {
	t.Helper()
	j, err := journal.Open(dir, &journal.Options{FS: bfs})
	if err != nil {
		t.Fatal(err)
	}
	c := newCommitter(j, log)
	c.signal = &healthSignal{}
	if err := c.replay(nil); err != nil {
		t.Fatal(err)
	}
	c.start()
	return c
}

// TestCommitterRecoversFromFullDisk: on a full disk the committer refuses writes (their
// waiters get the error), without a restart it takes them again once space is back, a
// write that failed stays failed (wait, syncSince), and what is on disk then is the
// committed state with the failed deletions applied: neither the refused put nor the
// deleted record comes back after a reopen.
func TestCommitterRecoversFromFullDisk(t *testing.T) {
	dir := t.TempDir()
	bfs := &budgetFS{budget: -1}
	var logs logBuffer
	c := openFaultCommitter(t, dir, bfs, logs.logger())
	// The health signal is told of the failure and of the recovery, each once, with
	// brokenErr already answering what it is told of.
	told := make(chan error, 8)
	tell := func() { told <- c.brokenErr() }
	c.signal.fn.Store(&tell)
	expectTold := func(what string, want error) {
		t.Helper()
		select {
		case err := <-told:
			if !errors.Is(err, want) {
				t.Fatalf("told of %s with brokenErr %v, want %v", what, err, want)
			}
		case <-time.After(waitFor):
			t.Fatalf("the health signal was not told of %s", what)
		}
	}
	a, b, keep := inflightKey("office", 1), inflightKey("office", 2), subscriptionKey("office", "results")
	for _, k := range []string{a, b, keep} {
		if err := c.enqueueWait(write{key: k, value: []byte("v-" + k)}); err != nil {
			t.Fatal(err)
		}
	}
	bfs.setBudget(0) // the disk is full
	mark := c.mark()
	deleted, err := c.enqueue(write{key: a}) // acknowledged: its deletion fails
	if err != nil {
		t.Fatal(err)
	}
	refusedPut := inflightKey("office", 3)
	if err := c.enqueueWait(write{key: refusedPut, value: []byte("new")}); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("a put on a full disk: %v, want ErrNoSpace", err)
	}
	if err := c.wait(deleted); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("a delete on a full disk: %v, want ErrNoSpace", err)
	}
	if err := c.brokenErr(); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("health while the disk is full: %v", err)
	}
	expectTold("the failure", journal.ErrNoSpace)
	for i := range 50 { // refused at once, each one
		if err := c.enqueueWait(write{key: inflightKey("office", uint16(10+i)), value: []byte("x")}); err == nil {
			t.Fatal("a write was taken while the journal is down")
		}
	}

	bfs.setBudget(-1) // space freed
	expectTold("the recovery", nil)
	eventually(t, "the journal taking writes again", func() bool { return c.brokenErr() == nil })
	if err := c.enqueueWait(write{key: inflightKey("office", 4), value: []byte("after")}); err != nil {
		t.Fatalf("a put after the recovery: %v", err)
	}
	if err := c.wait(deleted); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("the failed delete reads %v after the recovery, want its error", err)
	}
	if err := c.syncSince(mark); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("syncSince a mark before the failure: %v, want ErrNoSpace", err)
	}
	if err := c.syncSince(c.mark()); err != nil {
		t.Fatalf("syncSince a mark after the recovery: %v", err)
	}
	st := c.stats()
	if st.Failures != 1 || st.Resets != 1 || st.RefusedWrites < 52 || st.Err != nil {
		t.Fatalf("stats %+v", st)
	}
	if len(told) != 0 {
		t.Fatalf("the health signal was told %d times more", len(told))
	}
	if n := strings.Count(logs.String(), "refuses writes"); n != 1 {
		t.Fatalf("the failure was logged %d times, want once:\n%s", n, logs.String())
	}
	want := liveKeys(c)
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	reopened := openTestCommitter(t, dir)
	defer reopened.close()
	got := liveKeys(reopened)
	if got != want || strings.Contains(got, "v-"+a) || strings.Contains(got, "new") || !strings.Contains(got, "v-"+keep) || !strings.Contains(got, "after") {
		t.Fatalf("replayed %v, want %v: the deleted record and the refused put gone, the rest kept", got, want)
	}
}

// TestCommitterRetriesWithBackoff: while the disk stays full the committer tries again by
// itself (nothing queued), each try later than the one before it, from retryFirst on.
func TestCommitterRetriesWithBackoff(t *testing.T) {
	bfs := &budgetFS{budget: -1, snaps: make(chan time.Time, 16)}
	c := openFaultCommitter(t, t.TempDir(), bfs, slog.New(slog.DiscardHandler))
	defer c.close()
	if err := c.enqueueWait(write{key: clientKey("office"), value: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	bfs.setBudget(0)
	failedAt := time.Now()
	if err := c.enqueueWait(write{key: inflightKey("office", 1), value: []byte("m")}); err == nil {
		t.Fatal("a write was taken on a full disk")
	}
	prev, gap := failedAt, retryFirst
	for i := range 4 {
		select {
		case at := <-bfs.snaps:
			if d := at.Sub(prev); d < gap*9/10 {
				t.Fatalf("try %d came %v after the one before, want at least %v", i+1, d, gap)
			}
			prev, gap = at, min(2*gap, retryMax)
		case <-time.After(waitFor):
			t.Fatalf("no try %d within %v", i+1, waitFor)
		}
	}
}

// TestSyncSinceSeesEveryFailure: syncSince reports a failed write queued after the mark
// even when failures have been forgotten since (more than maxFailedRanges).
func TestSyncSinceSeesEveryFailure(t *testing.T) {
	c := newCommitter(nil, slog.New(slog.DiscardHandler))
	c.queued, c.committed = 1000, 1000
	errOld := errors.New("old")
	c.mu.Lock()
	for i := range maxFailedRanges + 3 {
		c.recordFailure(uint64(10*i+1), uint64(10*i+1), fmt.Errorf("%w %d", errOld, i))
	}
	c.mu.Unlock()
	if err := c.syncSince(0); !errors.Is(err, errOld) {
		t.Fatalf("syncSince(0): %v", err)
	}
	if err := c.syncSince(999); err != nil {
		t.Fatalf("syncSince after every failure: %v", err)
	}
}
