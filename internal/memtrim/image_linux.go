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
// and shared segments are never touched, and neither is a read-only segment holding
// anonymous (copy-on-write) pages: for a private file mapping MADV_DONTNEED discards
// changes, and a read-only segment can have them — RELRO data (a PIE or cgo build) that
// the dynamic loader relocated before it made it read-only, code a debugger patched.
// Dropping relocated RELRO pages brings back the file's unrelocated bytes, and the
// process crashes at its next use of a type descriptor or GOT entry.
func ReleaseImage() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("memtrim: %w", err)
	}
	f, err := os.Open("/proc/self/smaps")
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

// readOnlySegments parses /proc/self/smaps (per mapping a header line as in
// /proc/self/maps, "start-end perms offset dev inode path", then "Key: value" lines) and
// returns the mappings of path that are neither writable nor shared and whose
// "Anonymous:" line says 0: a mapping without that line is left alone too.
func readOnlySegments(r io.Reader, path string) ([]segment, error) {
	var out []segment
	var cand segment
	candidate, clean := false, false
	flush := func() {
		if candidate && clean {
			out = append(out, cand)
		}
		candidate, clean = false, false
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if strings.HasSuffix(fields[0], ":") { // an attribute of the mapping above
			if candidate && fields[0] == "Anonymous:" {
				clean = len(fields) >= 2 && fields[1] == "0"
			}
			continue
		}
		flush()
		if len(fields) < 6 || strings.Join(fields[5:], " ") != path {
			continue
		}
		perms := fields[1]
		if len(perms) != 4 || perms[1] != '-' || perms[3] != 'p' {
			continue // writable, or shared
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("memtrim: /proc/self/smaps: bad range %q", fields[0])
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("memtrim: /proc/self/smaps: bad range %q", fields[0])
		}
		cand, candidate = segment{uintptr(start), uintptr(end)}, true
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("memtrim: /proc/self/smaps: %w", err)
	}
	flush()
	return out, nil
}
