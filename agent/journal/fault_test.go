package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// faultFS is the operating system's file layer with a byte budget: a write past it writes
// what fits and fails with ENOSPC, as a full disk does.
type faultFS struct {
	OSFS
	mu      sync.Mutex
	budget  int64 // bytes that may still be written; < 0: unlimited
	syncErr error
}

type faultFile struct {
	*os.File
	fs *faultFS
}

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{file, f}, nil
}

func (f *faultFS) setBudget(n int64) { f.mu.Lock(); f.budget = n; f.mu.Unlock() }

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	allowed := int64(len(p))
	if f.fs.budget >= 0 && allowed > f.fs.budget {
		allowed = f.fs.budget
	}
	if f.fs.budget >= 0 {
		f.fs.budget -= allowed
	}
	f.fs.mu.Unlock()
	n, err := f.File.WriteAt(p[:allowed], off)
	if err == nil && int64(n) < int64(len(p)) {
		err = &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return n, err
}

func (f *faultFile) Sync() error {
	f.fs.mu.Lock()
	err := f.fs.syncErr
	f.fs.mu.Unlock()
	if err != nil {
		return err
	}
	return f.File.Sync()
}

func TestDiskFullRefusesAppendsAndKeepsData(t *testing.T) {
	dir := t.TempDir()
	ffs := &faultFS{budget: -1}
	var failures []error
	var fmu sync.Mutex
	j := openT(t, dir, &Options{FS: ffs, OnFailure: func(err error) {
		fmu.Lock()
		failures = append(failures, err)
		fmu.Unlock()
	}})
	for i := range 20 {
		if err := j.Append(fmt.Appendf(nil, "stored-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	ffs.setBudget(30) // room for one more record and part of the next
	if err := j.Append([]byte("fits-------")); err != nil {
		t.Fatalf("record within budget: %v", err)
	}
	err := j.Append([]byte("does-not-fit-in-the-remaining-space"))
	if !errors.Is(err, ErrNoSpace) || !errors.Is(j.Err(), ErrNoSpace) {
		t.Fatalf("append on a full disk: %v", err)
	}
	if err := j.Append([]byte("later")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append after disk full: %v", err)
	}
	if _, err := j.AppendAsync([]byte("later")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("async append after disk full: %v", err)
	}
	fmu.Lock()
	if len(failures) != 1 || !errors.Is(failures[0], ErrNoSpace) {
		t.Fatalf("OnFailure calls: %v", failures)
	}
	fmu.Unlock()
	j.Close()

	ffs.setBudget(-1) // space freed
	j = openT(t, dir, &Options{FS: ffs})
	got := replayAll(t, j)
	if len(got) != 21 || got[20] != "fits-------" {
		t.Fatalf("after disk full: %d records %v", len(got), got)
	}
	if r := j.Recovery(); r.TornTail != "" {
		t.Fatalf("the failed write was not cut back: %+v", r)
	}
	if err := j.Append([]byte("after-space-freed")); err != nil {
		t.Fatal(err)
	}
	j.Close()
}

func TestFsyncFailureIsSticky(t *testing.T) {
	dir := t.TempDir()
	ffs := &faultFS{budget: -1}
	j := openT(t, dir, &Options{FS: ffs})
	defer j.Close()
	j.Append([]byte("ok"))
	ffs.mu.Lock()
	ffs.syncErr = syscall.EIO
	ffs.mu.Unlock()
	if err := j.Append([]byte("x")); !errors.Is(err, ErrFailed) {
		t.Fatalf("append with failing fsync: %v", err)
	}
	ffs.mu.Lock()
	ffs.syncErr = nil
	ffs.mu.Unlock()
	if err := j.Append([]byte("y")); !errors.Is(err, ErrFailed) {
		t.Fatalf("a failed fsync must not be retried: %v", err)
	}
}

func TestDiskFullDuringSnapshotKeepsLog(t *testing.T) {
	dir := t.TempDir()
	ffs := &faultFS{budget: -1}
	j := openT(t, dir, &Options{FS: ffs})
	for i := range 10 {
		j.Append(fmt.Appendf(nil, "r%d", i))
	}
	cp, err := j.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	ffs.setBudget(20)
	err = j.WriteSnapshot(cp, func(emit func([]byte) error) error {
		return emit(make([]byte, 100))
	})
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("snapshot on a full disk: %v", err)
	}
	ffs.setBudget(-1)
	j.Close()
	j = openT(t, dir, nil)
	defer j.Close()
	if got := replayAll(t, j); len(got) != 10 {
		t.Fatalf("log after failed snapshot: %v", got)
	}
}

// A Checkpoint whose rotation fails makes the journal refuse appends; OnFailure must say so
// then, not only at the owner's next append.
func TestFailedCheckpointCallsOnFailure(t *testing.T) {
	dir := t.TempDir()
	ffs := &faultFS{budget: -1}
	var mu sync.Mutex
	var failures []error
	j := openT(t, dir, &Options{FS: ffs, OnFailure: func(err error) {
		mu.Lock()
		failures = append(failures, err)
		mu.Unlock()
	}})
	defer j.Close()
	if err := j.Append([]byte("kept")); err != nil {
		t.Fatal(err)
	}
	ffs.mu.Lock()
	ffs.syncErr = syscall.EIO
	ffs.mu.Unlock()
	if _, err := j.Checkpoint(); !errors.Is(err, ErrFailed) {
		t.Fatalf("checkpoint with a failing fsync: %v", err)
	}
	mu.Lock()
	n := len(failures)
	mu.Unlock()
	if n != 1 {
		t.Fatalf("OnFailure called %d times after the failed checkpoint, want 1", n)
	}
	if err := j.Append([]byte("x")); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after a failed checkpoint: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(failures) != 1 {
		t.Fatalf("OnFailure called %d times in all, want once", len(failures))
	}
}

// TestWaitReturnsAfterOnFailure: a record in the batch that failed is answered only after
// OnFailure ran, even when the Wait starts after the writer has recorded the failure, so
// whoever gets the error also sees the owner's reaction to it.
func TestWaitReturnsAfterOnFailure(t *testing.T) {
	ffs := &faultFS{budget: -1}
	entered, release := make(chan struct{}), make(chan struct{})
	var reacted atomic.Bool
	j := openT(t, t.TempDir(), &Options{FS: ffs, OnFailure: func(error) {
		close(entered)
		<-release
		reacted.Store(true)
	}})
	defer j.Close()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // before Close, which waits for the writer, even when the test fails
	ffs.setBudget(0)
	seq, err := j.AppendAsync([]byte("does-not-fit"))
	if err != nil {
		t.Fatal(err)
	}
	<-entered // the failure is recorded; OnFailure runs
	type answer struct {
		err     error
		reacted bool
	}
	done := make(chan answer, 1)
	go func() {
		err := j.Wait(seq)
		done <- answer{err, reacted.Load()}
	}()
	select {
	case a := <-done:
		t.Fatalf("Wait returned while OnFailure was still running: %+v", a)
	case <-time.After(50 * time.Millisecond): // only a chance for a wrong early answer to show
	}
	unblock()
	a := <-done
	if !errors.Is(a.err, ErrNoSpace) || !a.reacted {
		t.Fatalf("Wait: %+v, want ErrNoSpace after OnFailure ran", a)
	}
}
