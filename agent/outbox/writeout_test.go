package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// walContains reports whether one of dir's journal segments holds b.
func walContains(dir string, b []byte) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil && bytes.Contains(data, b) {
			return true
		}
	}
	return false
}

// A command leaves only once every record the journal has queued is in its file: here a
// lazy one, which the journal alone would keep in memory for an hour. A kill of the
// process right after the send keeps it.
func TestSendFollowsTheJournalWriteOut(t *testing.T) {
	e := newEnv(t, Options{Journal: journal.Options{Sync: journal.SyncNone, LazyDelay: time.Hour}})
	e.enqueue("m1", "d", "p1")
	marker := []byte("a-lazy-record-queued-before-the-send")
	found := make(chan bool, 1)
	e.o.sender = SenderFunc(func(context.Context, string, Command) error {
		found <- walContains(e.dir, marker)
		return nil
	})
	if _, err := e.o.j.AppendLazy(marker); err != nil {
		t.Fatal(err)
	}
	if walContains(e.dir, marker) {
		t.Fatal("the lazy record is in the file before any send: the test proves nothing")
	}
	e.o.Heartbeat("d")
	select {
	case ok := <-found:
		if !ok {
			t.Fatal("the command left before the journal's queued records were in its file")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no send")
	}
	if st := e.o.JournalStats(); st.WriteOuts == 0 {
		t.Fatalf("journal after the send: %+v, want a write-out", st)
	}
}

// failingFS fails every write once armed, like a disk that went away.
type failingFS struct {
	journal.OSFS
	armed atomic.Bool
}

type failingFile struct {
	*os.File
	fs *failingFS
}

func (f *failingFS) OpenFile(name string, flag int, perm os.FileMode) (journal.File, error) {
	file, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &failingFile{file, f}, nil
}

func (f *failingFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.armed.Load() {
		return 0, fmt.Errorf("write %s: input/output error", f.Name())
	}
	return f.File.WriteAt(p, off)
}

// A failed write-out keeps the command off the wire.
func TestNoSendWhenTheJournalCannotWrite(t *testing.T) {
	ffs := &failingFS{}
	e := newEnvSender(t, Options{Journal: journal.Options{Sync: journal.SyncNone, LazyDelay: time.Hour, FS: ffs}}, true)
	e.enqueue("m1", "d", "p1")
	ffs.armed.Store(true)
	e.o.Heartbeat("d") // a non-blocking sender: the send is tried before Heartbeat returns
	if got := e.snd.sentSoFar(); len(got) != 0 {
		t.Fatalf("sent %+v with a journal that cannot write", got)
	}
	if err := e.o.Err(); !errors.Is(err, journal.ErrFailed) {
		t.Fatalf("outbox Err = %v, want the journal's failure", err)
	}
}
