//go:build unix

package faces

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock on path (dir/LOCK): a second Open of the directory, in
// this process or another, is refused; the kernel drops the lock when the process dies.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("faces: lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("faces: lock %s: %w", path, err)
	}
	return f, nil
}
