package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir) // never returns
	}
	if dir := os.Getenv(writeOutChildEnv); dir != "" {
		writeOutChild(dir) // never returns
	}
	if dir := os.Getenv(preallocChildEnv); dir != "" {
		preallocChild(dir) // never returns
	}
	if dir := os.Getenv(lockChildEnv); dir != "" {
		_, err := Open(dir, nil)
		if errors.Is(err, ErrLocked) {
			os.Exit(7)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func openT(t *testing.T, dir string, o *Options) *Journal {
	t.Helper()
	j, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return j
}

func replayAll(t *testing.T, j *Journal) []string {
	t.Helper()
	var out []string
	if err := j.Replay(func(p []byte) error { out = append(out, string(p)); return nil }); err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return out
}

func TestAppendReplayReopen(t *testing.T) {
	for _, pol := range []SyncPolicy{SyncAlways, SyncBatch, SyncNone} {
		t.Run(pol.String(), func(t *testing.T) {
			dir := t.TempDir()
			j := openT(t, dir, &Options{Sync: pol, SegmentSize: 256})
			var want []string
			for i := range 50 {
				rec := fmt.Sprintf("record-%03d", i)
				want = append(want, rec)
				if err := j.Append([]byte(rec)); err != nil {
					t.Fatal(err)
				}
			}
			if st := j.Stats(); st.Records != 50 || st.Segments < 3 {
				t.Fatalf("stats %+v: want 50 records over several 256-byte segments", st)
			}
			if err := j.Replay(func([]byte) error { return nil }); !errors.Is(err, ErrReplayAfterAppend) {
				t.Fatalf("Replay after append: %v", err)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			if err := j.Append([]byte("x")); !errors.Is(err, ErrClosed) {
				t.Fatalf("append after close: %v", err)
			}
			j = openT(t, dir, &Options{Sync: pol, SegmentSize: 256})
			defer j.Close()
			got := replayAll(t, j)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("replay:\n got %v\nwant %v", got, want)
			}
			if r := j.Recovery(); r.TornTail != "" || len(r.Lost) != 0 || r.Records != 50 {
				t.Fatalf("recovery of a clean journal: %+v", r)
			}
		})
	}
}

func TestGroupCommitConcurrent(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, nil)
	const producers, each = 32, 40
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := j.Append(fmt.Appendf(nil, "%02d/%03d", p, i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	st := j.Stats()
	if st.Records != producers*each {
		t.Fatalf("records %d", st.Records)
	}
	if st.Batches >= st.Records {
		t.Fatalf("no group commit: %d batches for %d records", st.Batches, st.Records)
	}
	j.Close()
	j = openT(t, dir, nil)
	defer j.Close()
	last := map[string]int{}
	for _, r := range replayAll(t, j) {
		var p, i int
		fmt.Sscanf(r, "%02d/%03d", &p, &i)
		k := fmt.Sprint(p)
		if prev, ok := last[k]; ok && i != prev+1 {
			t.Fatalf("producer %d: record %d after %d", p, i, prev)
		}
		last[k] = i
	}
	if len(last) != producers {
		t.Fatalf("%d producers in replay", len(last))
	}
}

func TestLockExcludesSecondOpen(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, nil)
	if _, err := Open(dir, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	j.Close()
	j2 := openT(t, dir, nil)
	j2.Close()
}

const lockChildEnv = "FAJOURNAL_LOCK_CHILD_DIR"

func TestLockExcludesAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, nil)
	child := func() int {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), lockChildEnv+"="+dir)
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	if code := child(); code != 7 {
		t.Fatalf("another process opened a locked journal (exit %d)", code)
	}
	j.Close()
	if code := child(); code != 0 {
		t.Fatalf("another process could not open the journal after Close (exit %d)", code)
	}
}

func TestRejectsBadRecords(t *testing.T) {
	j := openT(t, t.TempDir(), &Options{MaxRecordSize: 8})
	defer j.Close()
	if err := j.Append(nil); !errors.Is(err, ErrEmptyRecord) {
		t.Fatal(err)
	}
	if err := j.Append(make([]byte, 9)); !errors.Is(err, ErrTooLarge) {
		t.Fatal(err)
	}
}

func TestSnapshotCompaction(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, &Options{SegmentSize: 200})
	for i := range 40 {
		j.Append(fmt.Appendf(nil, "old-%d", i))
	}
	cp, err := j.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	j.Append([]byte("after-checkpoint"))
	err = j.WriteSnapshot(cp, func(emit func([]byte) error) error {
		return emit([]byte("state"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := j.Stats(); st.Segments != 1 || st.Snapshots != 1 {
		t.Fatalf("after compaction: %+v", st)
	}
	j.Append([]byte("tail"))
	j.Close()
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(names) != 3 { // LOCK, one snapshot, one segment
		t.Fatalf("files after compaction: %v", names)
	}
	j = openT(t, dir, nil)
	defer j.Close()
	if got := fmt.Sprint(replayAll(t, j)); got != "[state after-checkpoint tail]" {
		t.Fatalf("replay after compaction: %s", got)
	}
}

func TestCrashBetweenSnapshotRenameAndDelete(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, nil)
	j.Append([]byte("a"))
	cp, _ := j.Checkpoint()
	j.Append([]byte("b"))
	j.Close()
	// Leave an unfinished temp snapshot, as a crash during WriteSnapshot would.
	os.WriteFile(filepath.Join(dir, fmt.Sprintf("%020d.snap.tmp", cp.Segment)), []byte("partial"), 0o644)
	j = openT(t, dir, nil)
	if got := fmt.Sprint(replayAll(t, j)); got != "[a b]" {
		t.Fatalf("replay: %s", got)
	}
	j.Close()
	if m, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(m) != 0 {
		t.Fatalf("temp snapshot not removed: %v", m)
	}
}

func segFiles(t *testing.T, dir string) []string {
	m, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no segments in %s: %v", dir, err)
	}
	return m
}

func TestTornTailIsCut(t *testing.T) {
	for _, cut := range []int{1, 5, frameHeaderSize, frameHeaderSize + 3} {
		dir := t.TempDir()
		j := openT(t, dir, nil)
		for i := range 10 {
			j.Append(fmt.Appendf(nil, "rec-%d", i))
		}
		j.Close()
		seg := segFiles(t, dir)[0]
		data, _ := os.ReadFile(seg)
		// Append a partial frame: what a crash in the middle of a write leaves.
		partial := appendFrame(nil, []byte("never-acked"))[:cut]
		os.WriteFile(seg, append(data, partial...), 0o644)

		j = openT(t, dir, nil)
		got := replayAll(t, j)
		r := j.Recovery()
		if len(got) != 10 || r.TornTail != seg || r.TornBytes != int64(cut) || r.TornOffset != int64(len(data)) {
			t.Fatalf("cut %d: %d records, recovery %+v", cut, len(got), r)
		}
		j.Append([]byte("next"))
		j.Close()
		j = openT(t, dir, nil)
		if got := replayAll(t, j); len(got) != 11 || got[10] != "next" {
			t.Fatalf("append after torn tail: %v", got)
		}
		j.Close()
	}
}

func TestZeroFilledTailIsTorn(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, nil)
	j.Append([]byte("kept"))
	j.Close()
	seg := segFiles(t, dir)[0]
	f, _ := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	f.Write(make([]byte, 4096))
	f.Close()
	j = openT(t, dir, nil)
	defer j.Close()
	if got := replayAll(t, j); fmt.Sprint(got) != "[kept]" || j.Recovery().TornBytes != 4096 {
		t.Fatalf("got %v, recovery %+v", got, j.Recovery())
	}
}

func TestFlippedBitNamesFileAndOffset(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, nil)
	var offsets []int64
	off := int64(fileHeaderSize)
	for i := range 10 {
		rec := fmt.Appendf(nil, "record-%d", i)
		offsets = append(offsets, off)
		off += int64(frameHeaderSize + len(rec))
		j.Append(rec)
	}
	j.Close()
	seg := segFiles(t, dir)[0]
	data, _ := os.ReadFile(seg)
	for _, pos := range []int64{offsets[3] + 1, offsets[3] + frameHeaderSize + 2, offsets[3] + 6} {
		bad := bytes.Clone(data)
		bad[pos] ^= 0x10
		os.WriteFile(seg, bad, 0o644)
		_, err := Open(dir, nil)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.File != seg || ce.Offset != offsets[3] {
			t.Fatalf("flip at %d: err %v, want CorruptError at %s:%d", pos, err, seg, offsets[3])
		}
		// The explicit option skips it and says what was lost.
		j, err := Open(dir, &Options{SkipCorrupt: true})
		if err != nil {
			t.Fatal(err)
		}
		got := replayAll(t, j)
		r := j.Recovery()
		j.Close()
		if len(got) != 9 || len(r.Lost) != 1 || r.Lost[0].Offset != offsets[3] || r.Lost[0].Bytes != offsets[4]-offsets[3] {
			t.Fatalf("skip: %d records, lost %+v", len(got), r.Lost)
		}
	}
	// Damage in the last record is a torn tail, not corruption: it was never acknowledged.
	bad := bytes.Clone(data)
	bad[len(bad)-1] ^= 1
	os.WriteFile(seg, bad, 0o644)
	j = openT(t, dir, nil)
	if got := replayAll(t, j); len(got) != 9 {
		t.Fatalf("torn last record: %d records", len(got))
	}
	j.Close()
}

func TestCorruptOlderSegmentIsAnError(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, &Options{SegmentSize: 100})
	for i := range 20 {
		j.Append(fmt.Appendf(nil, "record-%d", i))
	}
	j.Close()
	segs := segFiles(t, dir)
	data, _ := os.ReadFile(segs[0])
	// Damage the end of a sealed segment: no valid frame follows in that file, but it is not
	// the tail of the log, so it must not be cut silently.
	data[len(data)-2] ^= 0xff
	os.WriteFile(segs[0], data, 0o644)
	_, err := Open(dir, nil)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.File != segs[0] {
		t.Fatalf("err %v", err)
	}
}

func TestBadHeaderAndMissingSegment(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, &Options{SegmentSize: 64})
	for i := range 12 {
		j.Append(fmt.Appendf(nil, "record-%d", i))
	}
	j.Close()
	segs := segFiles(t, dir)
	if len(segs) < 3 {
		t.Fatalf("want 3+ segments, got %d", len(segs))
	}
	data, _ := os.ReadFile(segs[0])
	data[0] = 'X'
	os.WriteFile(segs[0], data, 0o644)
	if _, err := Open(dir, nil); !errors.Is(err, ErrBadFormat) {
		t.Fatalf("bad magic: %v", err)
	}
	os.Remove(segs[1])
	if _, err := Open(dir, nil); err == nil {
		t.Fatal("missing segment accepted")
	}
}

func TestLazyAppendsRideWithTheNextWait(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, &Options{LazyDelay: time.Hour})
	var last Seq
	for i := range 10 {
		seq, err := j.AppendLazy(fmt.Appendf(nil, "lazy-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		last = seq
	}
	if st := j.Stats(); st.Batches != 0 {
		t.Fatalf("lazy records written at once: %+v", st)
	}
	if err := j.Wait(last); err != nil { // a waiter hurries them
		t.Fatal(err)
	}
	if st := j.Stats(); st.Batches != 1 || st.Records != 10 {
		t.Fatalf("after Wait: %+v", st)
	}
	seq, _ := j.AppendLazy([]byte("rides-along"))
	if err := j.Append([]byte("durable")); err != nil {
		t.Fatal(err)
	}
	if j.Durable() < seq {
		t.Fatal("a lazy record queued before a durable one was not written with it")
	}
	j.AppendLazy([]byte("flushed-by-close"))
	j.Close()
	j = openT(t, dir, nil)
	defer j.Close()
	if got := replayAll(t, j); len(got) != 13 || got[12] != "flushed-by-close" {
		t.Fatalf("replay: %v", got)
	}
}

func TestLazyDelayFlushes(t *testing.T) {
	j := openT(t, t.TempDir(), &Options{LazyDelay: time.Millisecond})
	defer j.Close()
	seq, _ := j.AppendLazy([]byte("x"))
	// Wait would hurry it; watch the durable mark instead, bounded by a generous deadline.
	deadline := time.Now().Add(10 * time.Second)
	for j.Durable() < seq {
		if time.Now().After(deadline) {
			t.Fatal("lazy record never written")
		}
		runtime.Gosched()
	}
}

// A crash after the snapshot's rename but before the old segments were deleted leaves them
// behind: they are covered by the snapshot, ignored and removed.
func TestLeftoverSegmentsAfterSnapshotAreIgnored(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, nil)
	j.Append([]byte("old"))
	old, _ := os.ReadFile(filepath.Join(dir, "00000000000000000001.wal"))
	cp, _ := j.Checkpoint()
	j.Append([]byte("new"))
	if err := j.WriteSnapshot(cp, func(emit func([]byte) error) error { return emit([]byte("state")) }); err != nil {
		t.Fatal(err)
	}
	j.Close()
	os.WriteFile(filepath.Join(dir, "00000000000000000001.wal"), old, 0o644) // the leftover
	j = openT(t, dir, nil)
	defer j.Close()
	if got := fmt.Sprint(replayAll(t, j)); got != "[state new]" {
		t.Fatalf("replay: %s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "00000000000000000001.wal")); !os.IsNotExist(err) {
		t.Fatalf("leftover segment not removed: %v", err)
	}
}
