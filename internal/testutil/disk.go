package testutil

import (
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
