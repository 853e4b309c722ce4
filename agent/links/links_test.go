package links

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
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// fileCheckingLink is a device link that, when a command is handed to it, looks into the
// journal's segment files for a marker record: whether it was written before the send.
type fileCheckingLink struct {
	dir, marker string
	sends       int
	markerFound bool
	events      chan device.Event
}

func (l *fileCheckingLink) Send(_ context.Context, _ string, _ face.Command) error {
	l.sends++
	files, _ := filepath.Glob(filepath.Join(l.dir, "*.wal"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(l.marker)) {
			l.markerFound = true
		}
	}
	return nil
}

func (l *fileCheckingLink) Events() <-chan device.Event { return l.events }
func (l *fileCheckingLink) Close() error                { return nil }

func storedCommand(t *testing.T) outbox.Command {
	t.Helper()
	fc := face.Command{MessageID: "m-1", Op: face.AddPerson, Person: face.Person{ID: "p1", Name: "P"}}
	payload, err := fc.AppendMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	return outbox.Command{MessageID: "m-1", DeviceID: "d1", Payload: payload, Try: 1}
}

// A command goes to its link only after the journal's queued records (here a lazy one,
// which the journal alone would keep in memory for an hour) are in the file.
func TestSendWritesTheJournalOutFirst(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, &journal.Options{LazyDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	link := &fileCheckingLink{dir: dir, marker: "finish-of-the-previous-command"}
	l := &Links{byDevice: map[string]device.Link{"d1": link}}
	l.SetJournal(j)
	if _, err := j.AppendLazy([]byte(link.marker)); err != nil {
		t.Fatal(err)
	}
	if err := l.Send(context.Background(), "d1", storedCommand(t)); err != nil {
		t.Fatal(err)
	}
	if link.sends != 1 || !link.markerFound {
		t.Fatalf("%d sends; queued record in the file at the send: %v", link.sends, link.markerFound)
	}
	if st := j.Stats(); st.WriteOuts != 1 || st.Batches != 0 {
		t.Fatalf("journal after the send: %+v, want one write-out and no fsync", st)
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

// A failed write-out keeps the command off the wire and fails the send.
func TestSendRefusedWhenTheJournalCannotWrite(t *testing.T) {
	dir := t.TempDir()
	ffs := &failingFS{}
	j, err := journal.Open(dir, &journal.Options{LazyDelay: time.Hour, FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	link := &fileCheckingLink{dir: dir, marker: "x"}
	l := &Links{byDevice: map[string]device.Link{"d1": link}}
	l.SetJournal(j)
	j.AppendLazy([]byte("send-record"))
	ffs.armed.Store(true)
	err = l.Send(context.Background(), "d1", storedCommand(t))
	if !errors.Is(err, journal.ErrFailed) || link.sends != 0 {
		t.Fatalf("Send with a failing journal: %v after %d link sends, want journal.ErrFailed and none", err, link.sends)
	}
}

// Links.deliver takes a terminal's ack on the delivering goroutine (the terminal's
// connection reader) once the pumps have started, and leaves heartbeats to Events and the pump:
// handled on the reader, a heartbeat grew its stack past 8 KiB after every collection
// (test/e2e's TestHeartbeatsKeepReaderStacksSmall measures the readers).
func TestDeliverTakesAcksLeavesHeartbeatsToThePump(t *testing.T) {
	l := &Links{}
	var handled []device.EventKind
	ack := device.Event{Kind: device.Ack, DeviceID: "d1", Ack: face.Ack{MessageID: "m-1"}}
	hb := device.Event{Kind: device.Heartbeat, DeviceID: "d1", Heartbeat: face.Heartbeat{DeviceID: "d1"}}
	if l.deliver(ack) || l.deliver(hb) {
		t.Fatal("deliver took an event before the pumps started")
	}
	direct := func(ev device.Event) { handled = append(handled, ev.Kind) }
	l.direct.Store(&direct)
	if !l.deliver(ack) {
		t.Error("an ack was not taken")
	}
	if l.deliver(hb) {
		t.Error("a heartbeat was taken on the delivering goroutine")
	}
	if len(handled) != 1 || handled[0] != device.Ack {
		t.Errorf("handled directly: %v, want the ack only", handled)
	}
}
