package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const writeOutChildEnv = "FAJOURNAL_WRITEOUT_CHILD_DIR"

// writeOutChild runs in a re-executed test binary: eight goroutines append lazily, call
// WriteOut and print the id of every record whose WriteOut has returned, while a
// compactor checkpoints and snapshots now and then. LazyDelay is an hour and nobody
// Waits, so only WriteOut (and a Checkpoint's flush) puts records into the file. The
// parent kills it with SIGKILL at a random moment.
func writeOutChild(dir string) {
	appendChild(dir, childSpec{
		opts: &Options{SegmentSize: 16 << 10, LazyDelay: time.Hour}, pad: "w", padBase: 5, padStep: 11, compactEvery: 5 * time.Millisecond,
		queue: (*Journal).AppendLazy,
		done:  func(j *Journal, _ Seq) error { return j.WriteOut() },
	})
}

// TestWriteOutSurvivesKill: a lazy record whose WriteOut returned is replayed after a
// SIGKILL, although it was never fsynced; and since the file only ever holds a prefix of
// the appends, each goroutine's records of a run replay as 0, 1, …, n without a gap.
// Without WriteOut nothing of a run would reach the file (LazyDelay is an hour) but what
// a compaction's Checkpoint flushed.
func TestWriteOutSurvivesKill(t *testing.T) {
	killAndReplay(t, writeOutChildEnv, 12, 1, 40, true, "written-out record")
}

// WriteOut puts queued lazy records into the file with a write and no fsync; with nothing
// queued it writes nothing and allocates nothing.
func TestWriteOutWritesWithoutFsync(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, &Options{LazyDelay: time.Hour})
	defer j.Close()
	if err := j.WriteOut(); err != nil {
		t.Fatalf("idle WriteOut: %v", err)
	}
	seq1, _ := j.AppendLazy([]byte("lazy-one"))
	seq2, _ := j.AppendLazy([]byte("lazy-two"))
	seg := filepath.Join(dir, fmt.Sprintf("%020d%s", 1, segmentExt))
	if data, _ := os.ReadFile(seg); bytes.Contains(data, []byte("lazy-one")) {
		t.Fatal("a lazy record is in the file before anything wrote it")
	}
	if err := j.WriteOut(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("lazy-one")) || !bytes.Contains(data, []byte("lazy-two")) {
		t.Fatalf("after WriteOut the segment holds %q", data)
	}
	st := j.Stats()
	if st.WriteOuts != 1 || st.Batches != 0 || j.Durable() >= seq1 {
		t.Fatalf("after WriteOut: %+v, durable %d: want one write-out, no fsync batch", st, j.Durable())
	}
	if err := j.WriteOut(); err != nil || j.Stats().WriteOuts != 1 {
		t.Fatalf("second WriteOut with nothing new: %v, %+v", err, j.Stats())
	}
	if allocs := testing.AllocsPerRun(100, func() { j.WriteOut() }); allocs != 0 {
		t.Fatalf("idle WriteOut allocates %v times", allocs)
	}
	// Durability is the writer's job, as before: Wait fsyncs what was written out.
	seq3, _ := j.AppendLazy([]byte("lazy-three"))
	if err := j.Wait(seq3); err != nil {
		t.Fatal(err)
	}
	if st := j.Stats(); st.Batches != 1 || st.Records != 3 || j.Durable() < seq2 {
		t.Fatalf("after Wait: %+v", st)
	}
	if data, _ := os.ReadFile(seg); bytes.Count(data, []byte("lazy-")) != 3 {
		t.Fatalf("records written twice or not at all: %q", data)
	}
}

// gateFS holds the next WriteAt after arm until released, and says when it is held.
type gateFS struct {
	OSFS
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

type gateFile struct {
	*os.File
	fs *gateFS
}

func (g *gateFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &gateFile{f, g}, nil
}

func (f *gateFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.armed.CompareAndSwap(true, false) {
		close(f.fs.entered)
		<-f.fs.release
	}
	return f.File.WriteAt(p, off)
}

// Callers of WriteOut that queue behind a write in progress share one write: while one
// WriteOut is held inside its write, records are appended and ten more callers arrive;
// once it is released, the first of them writes everything and the others find their
// records written.
func TestWriteOutCoalesces(t *testing.T) {
	gfs := &gateFS{entered: make(chan struct{}), release: make(chan struct{})}
	dir := t.TempDir()
	j := openT(t, dir, &Options{FS: gfs, LazyDelay: time.Hour})
	if _, err := j.AppendLazy([]byte("first")); err != nil {
		t.Fatal(err)
	}
	gfs.armed.Store(true)
	held := make(chan error, 1)
	go func() { held <- j.WriteOut() }()
	<-gfs.entered // the first WriteOut holds the file; its record is taken
	var want []string
	want = append(want, "first")
	for i := range 10 {
		rec := fmt.Sprintf("queued-%d", i)
		want = append(want, rec)
		if _, err := j.AppendLazy([]byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 10)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- j.WriteOut() }()
	}
	close(gfs.release)
	wg.Wait()
	close(errs)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := j.Stats().WriteOuts; n != 2 {
		t.Fatalf("%d writes for two rounds of records, want 2", n)
	}
	j.Close()
	j = openT(t, dir, nil)
	defer j.Close()
	if got := replayAll(t, j); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("replay %v, want %v", got, want)
	}
}

// Many goroutines append (lazily and durably), write out and wait at once, with a tiny
// segment size (a rotation every few records) and compactions: every WriteOut that
// returned nil covers its caller's record, nothing is written twice, and the replay holds
// each goroutine's records in order. Run under -race.
func TestWriteOutConcurrent(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, &Options{SegmentSize: 512, LazyDelay: time.Millisecond, Sync: SyncBatch, BatchWindow: 100 * time.Microsecond})
	const goroutines, each = 16, 150
	var (
		mu      sync.RWMutex // orders appends against the checkpoint
		liveMu  sync.Mutex
		live    [][]byte
		wg      sync.WaitGroup
		calls   atomic.Int64
		stopped = make(chan struct{})
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				rec := fmt.Appendf(nil, "%02d/%03d", g, i)
				mu.RLock()
				var seq Seq
				var err error
				if i%10 == 0 {
					seq, err = j.AppendAsync(rec)
				} else {
					seq, err = j.AppendLazy(rec)
				}
				liveMu.Lock()
				live = append(live, rec)
				liveMu.Unlock()
				mu.RUnlock()
				if err != nil {
					t.Error(err)
					return
				}
				switch {
				case i%10 == 0:
					err = j.Wait(seq)
				default:
					calls.Add(1)
					err = j.WriteOut()
					if err == nil && Seq(j.written.Load()) < seq {
						err = fmt.Errorf("WriteOut returned before record %d was written (written %d)", seq, j.written.Load())
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	compactions := 0
	go func() { wg.Wait(); close(stopped) }()
	for done := false; !done; {
		select {
		case <-stopped:
			done = true
		default:
		}
		mu.Lock()
		cp, err := j.Checkpoint()
		liveMu.Lock()
		state := append([][]byte(nil), live...)
		liveMu.Unlock()
		mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if err := j.WriteSnapshot(cp, func(emit func([]byte) error) error {
			for _, r := range state {
				if err := emit(r); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		compactions++
	}
	st := j.Stats()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if st.WriteOuts == 0 || int64(st.WriteOuts) > calls.Load() {
		t.Fatalf("%d write-outs for %d calls", st.WriteOuts, calls.Load())
	}
	j = openT(t, dir, nil)
	defer j.Close()
	got := replayAll(t, j)
	if len(got) != goroutines*each {
		t.Fatalf("replayed %d records, want %d", len(got), goroutines*each)
	}
	next := map[string]int{}
	for _, r := range got {
		g, i, _ := strings.Cut(r, "/")
		n, _ := strconv.Atoi(i)
		if n != next[g] {
			t.Fatalf("record %s after %s/%03d", r, g, next[g]-1)
		}
		next[g] = n + 1
	}
	t.Logf("%d records, %d WriteOut calls, %d writes by WriteOut, %d fsync batches, %d compactions", len(got), calls.Load(), st.WriteOuts, st.Batches, compactions)
}

// A failed write-out (disk full) is returned to the caller, cut off the file, reported
// once through OnFailure (on the writer goroutine) before a Wait for the lost record
// returns, and makes the journal refuse appends; what was written before stays readable.
func TestWriteOutFailure(t *testing.T) {
	dir := t.TempDir()
	ffs := &faultFS{budget: -1}
	var failures atomic.Int32
	j := openT(t, dir, &Options{FS: ffs, LazyDelay: time.Hour, OnFailure: func(error) { failures.Add(1) }})
	j.AppendLazy([]byte("kept"))
	if err := j.WriteOut(); err != nil {
		t.Fatal(err)
	}
	ffs.setBudget(5)
	seq, _ := j.AppendLazy([]byte("does-not-fit"))
	if err := j.WriteOut(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("WriteOut on a full disk: %v", err)
	}
	if err := j.Wait(seq); !errors.Is(err, ErrNoSpace) || failures.Load() != 1 {
		t.Fatalf("Wait for the lost record: %v after %d OnFailure calls, want ErrNoSpace after 1", err, failures.Load())
	}
	if err := j.WriteOut(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("WriteOut after the failure: %v", err)
	}
	if _, err := j.AppendLazy([]byte("later")); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append after the failure: %v", err)
	}
	j.Close()
	if n := failures.Load(); n != 1 {
		t.Fatalf("OnFailure called %d times, want 1", n)
	}
	ffs.setBudget(-1)
	j = openT(t, dir, nil)
	defer j.Close()
	if got := replayAll(t, j); len(got) != 1 || got[0] != "kept" {
		t.Fatalf("replay after the failure: %q", got)
	}
	if r := j.Recovery(); r.TornTail != "" {
		t.Fatalf("the failed write was not cut back: %+v", r)
	}
}

// After Close, WriteOut with something still queued says ErrClosed (Close wrote it).
func TestWriteOutAfterClose(t *testing.T) {
	j := openT(t, t.TempDir(), &Options{LazyDelay: time.Hour})
	j.AppendLazy([]byte("x"))
	j.mu.Lock()
	j.closed = true // as Close does first, before the writer's last flush
	j.mu.Unlock()
	if err := j.WriteOut(); !errors.Is(err, ErrClosed) {
		t.Fatalf("WriteOut while closing: %v", err)
	}
	j.mu.Lock()
	j.closed = false
	j.mu.Unlock()
	j.Close()
	if err := j.WriteOut(); err != nil {
		t.Fatalf("WriteOut after Close wrote everything: %v", err)
	}
}
