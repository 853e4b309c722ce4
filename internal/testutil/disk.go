package testutil

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// DirDiskBytes is what the files in dir (not its subdirectories) occupy on disk: their
// allocated blocks, blocks preallocated past a file's end included (du, not ls). A file that
// goes while it counts (compacted meanwhile) counts as gone; a dir that cannot be read fails
// t.
func DirDiskBytes(t testing.TB, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, e.Name()), &st); err == nil {
			n += st.Blocks * 512
		}
	}
	return n
}

// DirFileBytes sums the sizes of the regular files under dir, subdirectories included (ls,
// not du): 0 when dir does not exist yet, and files that vanish while it walks (a running
// broker's compaction) count as gone.
func DirFileBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	})
	return n
}
