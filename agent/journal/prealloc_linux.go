//go:build linux

package journal

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// preallocate reserves the blocks of f's first size bytes without changing the file's size
// (fallocate(2) with FALLOC_FL_KEEP_SIZE): appends then write into blocks the filesystem
// allocated already, so the fsync that follows has no block allocation or extent growth to
// journal, and a write(2) meanwhile does not wait for it (package doc, "Segment
// preallocation").
//
// It reports whether f now may hold blocks beyond its end, which sealing the segment
// releases. A file that is not an operating-system file (a test's file layer), a file on
// tmpfs (where the reservation would be memory, for no gain) or on a filesystem without
// fallocate (EOPNOTSUPP, ENOSYS) gives false and no error: the journal works as without
// preallocation. Any other error (ENOSPC, EIO) is returned with true, as
// part of the range may be reserved; it is advisory: the caller logs it and goes on.
func preallocate(f File, size int64) (bool, error) {
	sc, ok := f.(syscall.Conn)
	if !ok {
		return false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, nil
	}
	var ferr error
	memory := false
	err = rc.Control(func(fd uintptr) {
		// On tmpfs a reservation is memory, and there is no block allocation to journal.
		var st unix.Statfs_t
		if unix.Fstatfs(int(fd), &st) == nil && st.Type == unix.TMPFS_MAGIC {
			memory = true
			return
		}
		for {
			ferr = unix.Fallocate(int(fd), unix.FALLOC_FL_KEEP_SIZE, 0, size)
			if ferr != unix.EINTR {
				return
			}
		}
	})
	switch {
	case err != nil:
		return false, err
	case memory:
		return false, nil
	case ferr == nil:
		return true, nil
	case errors.Is(ferr, unix.EOPNOTSUPP), errors.Is(ferr, unix.ENOSYS):
		return false, nil
	}
	return true, ferr
}
