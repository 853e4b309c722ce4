package testutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// SmallFS mounts a tmpfs of size bytes on a new temporary directory and returns the
// directory; it is unmounted when t ends. A real filesystem that fills up: a write past its
// size fails with ENOSPC, as on a gateway's full flash. It needs root and a mount(2) the
// sandbox allows; without them t is skipped, saying why.
func SmallFS(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a size-limited filesystem needs root to mount a tmpfs; not root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("a size-limited filesystem needs mount(2) of a tmpfs, refused here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// FillFS writes a file in dir until the filesystem is full (ENOSPC) and returns a function
// that deletes it, freeing the space again.
func FillFS(t testing.TB, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for size := len(chunk); size > 0; {
		if _, err := f.Write(chunk[:size]); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				f.Close()
				t.Fatalf("filling %s: %v", dir, err)
			}
			size /= 2 // the last blocks, down to a byte
		}
	}
	if err := f.Close(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(path); err != nil {
			t.Errorf("freeing %s: %v", dir, err)
		}
	}
}

// FreeBytes is the space left on dir's filesystem.
func FreeBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
