package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// emitAll is a Reset or WriteSnapshot callback that emits recs.
func emitAll(recs ...string) func(emit func([]byte) error) error {
	return func(emit func([]byte) error) error {
		for _, r := range recs {
			if err := emit([]byte(r)); err != nil {
				return err
			}
		}
		return nil
	}
}

// dirBytes is the size of the journal's files in dir (LOCK left out).
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if e.Name() == "LOCK" {
			continue
		}
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		n += info.Size()
	}
	return n
}

// TestResetAfterDiskFull: a journal that refuses appends after a full disk takes them again
// once Reset wrote the owner's state, without Close and Open; the record that failed stays
// failed (Wait says so), is not in the log, and what replays after a reopen is the state
// given to Reset and what came after.
func TestResetAfterDiskFull(t *testing.T) {
	dir := t.TempDir()
	ffs := &faultFS{budget: -1}
	j := openT(t, dir, &Options{FS: ffs, SegmentSize: 256})
	for i := range 20 {
		if err := j.Append(fmt.Appendf(nil, "old-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	ffs.setBudget(5)
	seq, err := j.AppendAsync([]byte("does-not-fit"))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Wait(seq); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append on a full disk: %v", err)
	}
	if err := j.Reset(emitAll("state-a", "state-b")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Reset with the disk still full: %v", err)
	}
	if err := j.Append([]byte("x")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append after a failed Reset: %v", err)
	}
	if names := fileNames(t, dir); slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, tempExt) }) {
		t.Fatalf("a failed Reset left %v", names)
	}

	ffs.setBudget(-1) // space freed
	if err := j.Reset(emitAll("state-a", "state-b")); err != nil {
		t.Fatal(err)
	}
	if err := j.Append([]byte("after")); err != nil {
		t.Fatalf("append after Reset: %v", err)
	}
	if err := j.Wait(seq); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Wait for the record that failed, after Reset: %v, want ErrNoSpace", err)
	}
	if err := j.WriteOut(); err != nil {
		t.Fatalf("WriteOut after Reset: %v", err)
	}
	st := j.Stats()
	if st.Resets != 1 || st.Segments != 1 {
		t.Fatalf("stats after Reset: %+v", st)
	}
	if got := dirBytes(t, dir); st.FileBytes != got {
		t.Fatalf("Stats.FileBytes %d, files %d", st.FileBytes, got)
	}
	if names := fileNames(t, dir); len(names) != 3 { // LOCK, the snapshot, one segment
		t.Fatalf("files after Reset: %v", names)
	}
	j.Close()
	j = openT(t, dir, nil)
	defer j.Close()
	if got, want := replayAll(t, j), []string{"state-a", "state-b", "after"}; !slices.Equal(got, want) {
		t.Fatalf("replayed %v, want %v", got, want)
	}
}

// TestResetAfterFailedFsync: after a failed fsync the records written but not confirmed may
// or may not be in the file (the kernel's view is unknown); Reset does not read them, and
// they are gone from the log for good.
func TestResetAfterFailedFsync(t *testing.T) {
	dir := t.TempDir()
	ffs := &faultFS{budget: -1}
	j := openT(t, dir, &Options{FS: ffs})
	if err := j.Append([]byte("confirmed")); err != nil {
		t.Fatal(err)
	}
	ffs.mu.Lock()
	ffs.syncErr = syscall.EIO
	ffs.mu.Unlock()
	if err := j.Append([]byte("unconfirmed")); !errors.Is(err, ErrFailed) {
		t.Fatalf("append with a failing fsync: %v", err)
	}
	if err := j.Reset(emitAll("state")); !errors.Is(err, ErrFailed) {
		t.Fatalf("Reset while fsync fails: %v", err)
	}
	ffs.mu.Lock()
	ffs.syncErr = nil
	ffs.mu.Unlock()
	if err := j.Reset(emitAll("state")); err != nil {
		t.Fatal(err)
	}
	if err := j.Append([]byte("next")); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j = openT(t, dir, nil)
	defer j.Close()
	if got, want := replayAll(t, j), []string{"state", "next"}; !slices.Equal(got, want) {
		t.Fatalf("replayed %v, want %v", got, want)
	}
}

// TestResetFailingNewSegment: a Reset whose snapshot is in place but whose new segment
// cannot be created makes the journal refuse appends and tells OnFailure once; a later
// Reset starts over.
func TestResetFailingNewSegment(t *testing.T) {
	dir := t.TempDir()
	ffs := &faultFS{budget: -1}
	var failures atomic.Int32
	j := openT(t, dir, &Options{FS: ffs, OnFailure: func(error) { failures.Add(1) }})
	defer func() { j.Close() }()
	if err := j.Reset(emitAll("state")); err != nil {
		t.Fatal(err)
	}
	var snapSize int64
	for _, n := range fileNames(t, dir) {
		if strings.HasSuffix(n, snapshotExt) {
			info, err := os.Stat(filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			snapSize = info.Size()
		}
	}
	if snapSize == 0 {
		t.Fatalf("no snapshot after Reset: %v", fileNames(t, dir))
	}
	ffs.setBudget(snapSize) // the same snapshot fits, the new segment's header does not
	if err := j.Reset(emitAll("state")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Reset whose new segment does not fit: %v", err)
	}
	if n := failures.Load(); n != 1 {
		t.Fatalf("OnFailure called %d times after the failed Reset, want 1", n)
	}
	if err := j.Append([]byte("x")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append after a Reset whose new segment failed: %v", err)
	}

	ffs.setBudget(-1)
	if err := j.Reset(emitAll("state")); err != nil {
		t.Fatal(err)
	}
	if err := j.Append([]byte("next")); err != nil {
		t.Fatal(err)
	}
	if n := failures.Load(); n != 1 {
		t.Fatalf("OnFailure called %d times in all, want once", n)
	}
	j.Close()
	j = openT(t, dir, nil)
	if got, want := replayAll(t, j), []string{"state", "next"}; !slices.Equal(got, want) {
		t.Fatalf("replayed %v, want %v", got, want)
	}
}

// TestResetHealthyJournal: Reset of a journal that works replaces its content, like a
// snapshot of everything, and appends go on.
func TestResetHealthyJournal(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, &Options{SegmentSize: 128})
	for i := range 30 {
		if err := j.Append(fmt.Appendf(nil, "r%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Reset(emitAll("only")); err != nil {
		t.Fatal(err)
	}
	if err := j.Append([]byte("then")); err != nil {
		t.Fatal(err)
	}
	if got := dirBytes(t, dir); j.Stats().FileBytes != got {
		t.Fatalf("Stats.FileBytes %d, files %d", j.Stats().FileBytes, got)
	}
	j.Close()
	j = openT(t, dir, nil)
	defer j.Close()
	if got, want := replayAll(t, j), []string{"only", "then"}; !slices.Equal(got, want) {
		t.Fatalf("replayed %v, want %v", got, want)
	}
}

// TestFileBytesFollowsTheFiles: Stats.FileBytes is the size of the journal's files through
// appends, rotations, a snapshot and a reopen.
func TestFileBytesFollowsTheFiles(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, &Options{SegmentSize: 200})
	check := func(when string) {
		t.Helper()
		if got, want := j.Stats().FileBytes, dirBytes(t, dir); got != want {
			t.Fatalf("%s: Stats.FileBytes %d, files %d", when, got, want)
		}
	}
	check("empty")
	for i := range 40 {
		if err := j.Append(fmt.Appendf(nil, "record-%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	check("after appends and rotations")
	cp, err := j.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if err := j.WriteSnapshot(cp, emitAll("live-1", "live-2")); err != nil {
		t.Fatal(err)
	}
	check("after a snapshot")
	j.Append([]byte("more"))
	j.Close()
	j = openT(t, dir, &Options{SegmentSize: 200})
	defer j.Close()
	check("after reopening")
}

func fileNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
