package journal

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

var errDead = errors.New("crashFS: the process is dead")

// crashFS stops the world after a number of changing operations: from then on every
// write, fsync, truncate, rename, remove and create fails without effect, as if the process
// had been killed between two steps (what it wrote before stays, as in the page cache).
type crashFS struct {
	OSFS
	mu    sync.Mutex
	ops   int
	limit int // changing operations allowed; < 0: unlimited
}

type crashFile struct {
	*os.File
	fs *crashFS
}

// step counts one changing operation and says whether it may happen.
func (c *crashFS) step() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.limit >= 0 && c.ops >= c.limit {
		return false
	}
	c.ops++
	return true
}

func (c *crashFS) dieAfter(n int) {
	c.mu.Lock()
	c.ops, c.limit = 0, n
	c.mu.Unlock()
}

func (c *crashFS) died() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.limit >= 0 && c.ops >= c.limit
}

func (c *crashFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if flag&(os.O_CREATE|os.O_TRUNC) != 0 && !c.step() {
		return nil, errDead
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &crashFile{f, c}, nil
}

func (c *crashFS) Rename(o, n string) error {
	if !c.step() {
		return errDead
	}
	return os.Rename(o, n)
}

func (c *crashFS) Remove(name string) error {
	if !c.step() {
		return errDead
	}
	return os.Remove(name)
}

func (c *crashFS) SyncDir(dir string) error {
	if !c.step() {
		return errDead
	}
	return c.OSFS.SyncDir(dir)
}

func (f *crashFile) WriteAt(p []byte, off int64) (int, error) {
	if !f.fs.step() {
		return 0, errDead
	}
	return f.File.WriteAt(p, off)
}

func (f *crashFile) Sync() error {
	if !f.fs.step() {
		return errDead
	}
	return f.File.Sync()
}

func (f *crashFile) Truncate(n int64) error {
	if !f.fs.step() {
		return errDead
	}
	return f.File.Truncate(n)
}

// Compaction is crash-safe at every step: killed after any number of its file operations
// (temp file, writes, fsync, rename, directory fsync, deletions), the directory replays to
// exactly the same records, with neither a loss nor a duplicate, and takes appends again.
func TestCompactionCrashAtEveryStep(t *testing.T) {
	opts := func(fs FS) *Options { return &Options{SegmentSize: 200, FS: fs} }
	for step := 0; ; step++ {
		dir := t.TempDir()
		var want []string
		j := openT(t, dir, opts(nil))
		appendN := func(n int) {
			for range n {
				r := fmt.Sprintf("record-%03d", len(want))
				if err := j.Append([]byte(r)); err != nil {
					t.Fatal(err)
				}
				want = append(want, r)
			}
		}
		snapshot := func(j *Journal, cp Checkpoint) error {
			return j.WriteSnapshot(cp, func(emit func([]byte) error) error {
				for _, r := range want {
					if err := emit([]byte(r)); err != nil {
						return err
					}
				}
				return nil
			})
		}
		appendN(30) // several segments, then an older snapshot for the next one to replace
		cp, err := j.Checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		if err := snapshot(j, cp); err != nil {
			t.Fatal(err)
		}
		appendN(30)
		j.Close()

		cfs := &crashFS{limit: -1}
		j = openT(t, dir, opts(cfs))
		if cp, err = j.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		cfs.dieAfter(step)
		err = snapshot(j, cp)
		completed := !cfs.died()
		if completed && err != nil {
			t.Fatalf("step %d: snapshot without a crash: %v", step, err)
		}
		j.Close() // the dead process's close: errors are expected

		j = openT(t, dir, nil)
		if got := replayAll(t, j); !slices.Equal(got, want) {
			t.Fatalf("killed after %d file operations of a compaction: replay has %d records, want %d\n%v",
				step, len(got), len(want), got)
		}
		if err := j.Append([]byte("after")); err != nil {
			t.Fatalf("step %d: append after recovery: %v", step, err)
		}
		j.Close()
		j = openT(t, dir, nil)
		if got := replayAll(t, j); len(got) != len(want)+1 || got[len(got)-1] != "after" {
			t.Fatalf("step %d: replay after a post-recovery append: %v", step, got)
		}
		j.Close()
		if completed {
			if step < 5 {
				t.Fatalf("the compaction took only %d file operations", step)
			}
			return
		}
	}
}

// gatedFS holds fsyncs while its gate is closed and tells when one is waiting.
type gatedFS struct {
	OSFS
	mu      sync.Mutex
	gate    chan struct{}
	waiting chan struct{}
}

type gatedFile struct {
	*os.File
	fs *gatedFS
}

func (g *gatedFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &gatedFile{f, g}, nil
}

func (g *gatedFS) hold() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
	return g.gate
}

func (f *gatedFile) Sync() error {
	f.fs.mu.Lock()
	gate := f.fs.gate
	f.fs.mu.Unlock()
	if gate != nil {
		f.fs.waiting <- struct{}{}
		<-gate
	}
	return f.File.Sync()
}

// Group commit wakes exactly the appends an fsync covered: one queued during that fsync
// waits for the next one, and nobody is told "durable" before their own fsync ends.
func TestFsyncWakesOnlyItsOwnBatch(t *testing.T) {
	g := &gatedFS{waiting: make(chan struct{})}
	j := openT(t, t.TempDir(), &Options{FS: g})
	defer j.Close()
	waitFor := func(what string) {
		select {
		case <-g.waiting:
		case <-time.After(5 * time.Second):
			t.Fatalf("no fsync for %s", what)
		}
	}
	first := g.hold()
	seqA, err := j.AppendAsync([]byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor("a") // a's batch is in its fsync
	seqB, err := j.AppendAsync([]byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go func() { doneA <- j.Wait(seqA) }()
	go func() { doneB <- j.Wait(seqB) }()
	second := g.hold() // b's fsync will be held too
	close(first)
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	waitFor("b") // b's batch reached its own fsync: a's did not cover it
	select {
	case err := <-doneB:
		t.Fatalf("b's Wait returned (%v) before b's fsync ended", err)
	default:
	}
	if d := j.Durable(); d != seqA {
		t.Fatalf("Durable() = %d during b's fsync, want %d", d, seqA)
	}
	g.mu.Lock()
	g.gate = nil
	g.mu.Unlock()
	close(second)
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
}
