//go:build linux

package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// fileSpace returns a file's size and the bytes of disk allocated to it (st_blocks).
func fileSpace(t *testing.T, path string) (size, allocated int64) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Size, st.Blocks * 512
}

// requirePreallocation skips the test where dir's filesystem has no fallocate.
func requirePreallocation(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, 1<<20); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
			t.Skipf("no fallocate on %s: %v", dir, err)
		}
		t.Fatal(err)
	}
}

// roundUpBlock rounds n up to whole 4 KiB blocks, what a file of n bytes may occupy.
func roundUpBlock(n int64) int64 { return (n + 4095) &^ 4095 }

// A preallocated segment reserves SegmentSize of disk but its size stays what was written,
// after Append (write and fsync) and after WriteOut (write only); sealing it (a checkpoint
// rotates) and Close release the blocks past its end; reopening reserves them again and
// recovers every record with no torn tail. The files are byte for byte those of a journal
// without preallocation that got the same appends.
func TestPreallocatedSegmentSizeIsWhatWasWritten(t *testing.T) {
	const segSize = 1 << 20
	run := func(dir string, opts *Options, check bool) {
		j := openT(t, dir, opts)
		seg1, seg2 := j.segPath(1), j.segPath(2)
		want := int64(fileHeaderSize)
		expect := func(path string, preallocated bool) {
			t.Helper()
			size, alloc := fileSpace(t, path)
			if !check {
				return
			}
			if size != want {
				t.Fatalf("%s: size %d, want %d (the bytes written)", filepath.Base(path), size, want)
			}
			if preallocated && alloc < segSize {
				t.Fatalf("%s: %d bytes allocated, want the segment's %d preallocated", filepath.Base(path), alloc, segSize)
			}
			if !preallocated && alloc > roundUpBlock(size) {
				t.Fatalf("%s: %d bytes allocated for %d written: preallocated blocks not released", filepath.Base(path), alloc, size)
			}
		}
		expect(seg1, true)
		for i := range 50 {
			rec := fmt.Appendf(nil, "durable-%d-%s", i, strings.Repeat("d", i*7))
			if err := j.Append(rec); err != nil {
				t.Fatal(err)
			}
			want += int64(frameHeaderSize + len(rec))
		}
		expect(seg1, true)
		rec := []byte("written-out, not fsynced")
		if _, err := j.AppendLazy(rec); err != nil {
			t.Fatal(err)
		}
		if err := j.WriteOut(); err != nil {
			t.Fatal(err)
		}
		want += int64(frameHeaderSize + len(rec))
		expect(seg1, true)
		if _, err := j.Checkpoint(); err != nil { // seals segment 1
			t.Fatal(err)
		}
		expect(seg1, false)
		want = fileHeaderSize
		expect(seg2, true)
		for i := range 10 {
			rec := fmt.Appendf(nil, "second-%d", i)
			if err := j.Append(rec); err != nil {
				t.Fatal(err)
			}
			want += int64(frameHeaderSize + len(rec))
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		expect(seg2, false)

		j = openT(t, dir, opts)
		defer j.Close()
		if got := replayAll(t, j); len(got) != 61 || got[0] != "durable-0-" || got[60] != "second-9" {
			t.Fatalf("after reopen replayed %d records: %q…", len(got), got[:min(len(got), 3)])
		}
		if r := j.Recovery(); r.TornTail != "" || r.Segments != 2 || r.Records != 61 {
			t.Fatalf("after reopen: %+v", r)
		}
		expect(seg2, true)
	}
	on, off := t.TempDir(), t.TempDir()
	requirePreallocation(t, on)
	run(on, &Options{SegmentSize: segSize}, true)
	run(off, &Options{SegmentSize: segSize, noPreallocate: true}, false)
	for _, name := range []string{"00000000000000000001.wal", "00000000000000000002.wal"} {
		a, err := os.ReadFile(filepath.Join(on, name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(off, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("%s differs with preallocation (%d bytes) and without (%d bytes)", name, len(a), len(b))
		}
	}
}

// A child appending durably into preallocated segments is SIGKILLed six times. After each
// kill the newest segment still has its blocks reserved past its end (unless the kill came
// in the middle of a rotation, which may happen a few times but not in nearly every kill),
// every sealed one has none, and the journal recovers exactly as a copy of the directory without preallocated
// blocks does (same Recovery, same records), keeping every acknowledged append.
func TestPreallocatedSegmentSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	requirePreallocation(t, dir)
	done := map[string]bool{}
	const kills = 6
	inRotation := 0 // kills that found the newest segment sealed, its next not yet created
	defer func() {
		if inRotation > kills-2 {
			t.Errorf("%d of %d kills found the newest segment without preallocated blocks: want them reserved while it is open", inRotation, kills)
		}
	}()
	for iter := range kills {
		testutil.CrashChild(t, []string{preallocChildEnv + "=" + dir, "FAJOURNAL_CRASH_ITER=" + strconv.Itoa(iter)},
			10*time.Second, time.Duration(40+iter*25)*time.Millisecond, func(id string) { done[id] = true })

		twin := t.TempDir()
		names, err := OSFS{}.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var segs []string
		for _, name := range names {
			if name == "LOCK" {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(twin, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(name, segmentExt) {
				segs = append(segs, name) // ReadDir sorts: the newest last
			}
		}
		if len(segs) == 0 {
			t.Fatalf("iteration %d: no segment in %v", iter, names)
		}
		newest := filepath.Join(dir, segs[len(segs)-1])
		size, alloc := fileSpace(t, newest)
		if alloc < preallocChildSegment || size >= alloc {
			// Only a rotation releases the open segment's reservation: the kill came
			// after it sealed the newest segment and before it created the next.
			t.Logf("iteration %d: newest segment %s: size %d, %d allocated: killed in a rotation", iter, segs[len(segs)-1], size, alloc)
			inRotation++
		}
		for _, name := range segs[:len(segs)-1] {
			if size, alloc := fileSpace(t, filepath.Join(dir, name)); alloc > roundUpBlock(size) {
				t.Fatalf("iteration %d: sealed segment %s: %d allocated for %d bytes", iter, name, alloc, size)
			}
		}

		reopen := func(d string, opts *Options) (Recovery, []string) {
			j := openT(t, d, opts)
			defer j.Close()
			r := j.Recovery()
			r.Snapshot, r.TornTail = filepath.Base(r.Snapshot), filepath.Base(r.TornTail)
			return r, replayAll(t, j)
		}
		gotR, got := reopen(dir, &Options{SegmentSize: preallocChildSegment})
		wantR, want := reopen(twin, &Options{SegmentSize: preallocChildSegment, noPreallocate: true})
		if !reflect.DeepEqual(gotR, wantR) {
			t.Fatalf("iteration %d: recovery with preallocated blocks %+v, without %+v", iter, gotR, wantR)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("iteration %d: %d records replayed with preallocated blocks, %d without", iter, len(got), len(want))
		}
		found := map[string]bool{}
		for _, rec := range got {
			f := strings.SplitN(rec, "/", 4)
			found[f[0]+"/"+f[1]+"/"+f[2]] = true
		}
		for id := range done {
			if !found[id] {
				t.Fatalf("iteration %d: acknowledged append %s lost", iter, id)
			}
		}
		// Recovery cut nothing but a torn tail, and Close released the reserved blocks.
		after, afterAlloc := fileSpace(t, newest)
		wantSize := size - gotR.TornBytes
		if size < fileHeaderSize { // killed before the header: recovery writes it again
			wantSize = fileHeaderSize
		}
		if after != wantSize || afterAlloc > roundUpBlock(after) {
			t.Fatalf("iteration %d: after reopen and Close the newest segment has %d bytes (%d allocated), want %d", iter, after, afterAlloc, wantSize)
		}
		t.Logf("kill %d: newest segment %d bytes of %d allocated, %d segments, %d records, torn %d bytes",
			iter, size, alloc, len(segs), len(got), gotR.TornBytes)
	}
}

// On tmpfs a reservation would be memory held for nothing: the journal leaves it alone, and
// the segment occupies only what was written.
func TestNoPreallocationOnTmpfs(t *testing.T) {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Skip("no tmpfs at /dev/shm")
	}
	dir, err := os.MkdirTemp("/dev/shm", "journal-prealloc-")
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(dir)
	j := openT(t, dir, &Options{SegmentSize: 8 << 20})
	defer j.Close()
	if err := j.Append([]byte("on tmpfs")); err != nil {
		t.Fatal(err)
	}
	size, alloc := fileSpace(t, j.segPath(1))
	if alloc > roundUpBlock(size) {
		t.Fatalf("segment on tmpfs: %d bytes allocated for %d written", alloc, size)
	}
}
