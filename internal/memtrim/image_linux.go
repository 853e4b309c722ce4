package memtrim

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ReleaseImage drops this process's mappings of the read-only segments of its own
// executable (MADV_DONTNEED). It returns the bytes of address space advised. Writable
// segments are never touched: for a private file mapping MADV_DONTNEED would discard
// their changes.
func ReleaseImage() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("memtrim: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("memtrim: %w", err)
	}
	defer f.Close()
	segments, err := readOnlySegments(f, exe)
	if err != nil {
		return 0, err
	}
	var advised int64
	for _, s := range segments {
		// The raw system call: these addresses are not Go memory, so no slice may cover them.
		_, _, errno := unix.Syscall(unix.SYS_MADVISE, s.start, s.end-s.start, unix.MADV_DONTNEED)
		if errno != 0 {
			return advised, fmt.Errorf("memtrim: madvise %#x-%#x: %w", s.start, s.end, errno)
		}
		advised += int64(s.end - s.start)
	}
	return advised, nil
}

type segment struct{ start, end uintptr }

// readOnlySegments parses /proc/self/maps lines ("start-end perms offset dev inode path")
// and returns the mappings of path that are neither writable nor shared.
func readOnlySegments(r io.Reader, path string) ([]segment, error) {
	var out []segment
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.Join(fields[5:], " ") != path {
			continue
		}
		perms := fields[1]
		if len(perms) != 4 || perms[1] != '-' || perms[3] != 'p' {
			continue // writable, or shared
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("memtrim: /proc/self/maps: bad range %q", fields[0])
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("memtrim: /proc/self/maps: bad range %q", fields[0])
		}
		out = append(out, segment{uintptr(start), uintptr(end)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("memtrim: /proc/self/maps: %w", err)
	}
	return out, nil
}
