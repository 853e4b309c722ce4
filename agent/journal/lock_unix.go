//go:build unix

package journal

import (
	"errors"
	"fmt"
	"os"

	"github.com/seed0e69bba5/faceagent/internal/dirlock"
)

// lockDir takes the directory's lock file (internal/dirlock): a second Open of the
// directory, in this process or another, is refused with ErrLocked.
func lockDir(path string) (*os.File, error) {
	f, err := dirlock.Lock(path)
	if errors.Is(err, dirlock.ErrLocked) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return f, nil
}

func unlockDir(f *os.File) error {
	// Closing the descriptor releases the flock.
	return f.Close()
}
