//go:build unix

package dirlock

import (
	"errors"
	"path/filepath"
	"testing"
)

// A second Lock of the same path is refused while the first file is open, in the same
// process too; closing the first releases it.
func TestLockIsExclusiveUntilClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "LOCK")
	f, err := Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := Lock(path); !errors.Is(err, ErrLocked) {
		if g != nil {
			g.Close()
		}
		t.Fatalf("second Lock: %v, want ErrLocked", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := Lock(path)
	if err != nil {
		t.Fatalf("Lock after Close: %v", err)
	}
	g.Close()
	if _, err := Lock(filepath.Join(t.TempDir(), "missing", "LOCK")); err == nil || errors.Is(err, ErrLocked) {
		t.Fatalf("Lock in a missing directory: %v", err)
	}
}
