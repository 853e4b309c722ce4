//go:build unix

package dirlock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrLocked is Lock's error when another open file description holds the lock.
var ErrLocked = errors.New("dirlock: held by another Open")

// Lock creates path if needed and takes an exclusive flock on it without waiting. The
// returned file holds the lock until it is closed.
func Lock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrLocked
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
