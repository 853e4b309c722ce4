package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// dirSyncFS fails the next directory fsync once armed, as a disk that fails one write.
type dirSyncFS struct {
	OSFS
	mu   sync.Mutex
	fail bool
}

var errDirSync = errors.New("directory fsync failed")

func (f *dirSyncFS) SyncDir(dir string) error {
	f.mu.Lock()
	fail := f.fail
	f.fail = false
	f.mu.Unlock()
	if fail {
		return errDirSync
	}
	return f.OSFS.SyncDir(dir)
}

// TestSnapshotNotKnownDurableIsNotLeftBehind: a snapshot renamed into place whose
// directory fsync then failed is not recorded (the segments it would replace stay); it
// must not stay either: later compactions delete only the files the journal knows of, so
// left behind, the snapshot (the live records' size) would stay on disk, outside
// Stats.FileBytes, until the next Open.
func TestSnapshotNotKnownDurableIsNotLeftBehind(t *testing.T) {
	dir := t.TempDir()
	fsys := &dirSyncFS{}
	j := openT(t, dir, &Options{FS: fsys})
	defer j.Close()
	appendSome := func(from int) {
		for i := range 5 {
			if err := j.Append(fmt.Appendf(nil, "record-%d", from+i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	snapshot := func(fail bool) error {
		cp, err := j.Checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		fsys.mu.Lock()
		fsys.fail = fail
		fsys.mu.Unlock()
		return j.WriteSnapshot(cp, func(emit func([]byte) error) error { return emit([]byte("state")) })
	}
	appendSome(0)
	if err := snapshot(true); !errors.Is(err, ErrFailed) {
		t.Fatalf("WriteSnapshot with a failing directory fsync: %v", err)
	}
	appendSome(5)
	if err := snapshot(false); err != nil {
		t.Fatal(err)
	}
	snaps, err := filepath.Glob(filepath.Join(dir, "*"+snapshotExt))
	if err != nil {
		t.Fatal(err)
	}
	var onDisk int64
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			onDisk += fi.Size()
		}
	}
	if len(snaps) != 1 || onDisk != j.Stats().FileBytes {
		t.Fatalf("snapshots on disk %v, %d bytes in the directory, FileBytes %d; want one snapshot and the bytes counted",
			snaps, onDisk, j.Stats().FileBytes)
	}
}
