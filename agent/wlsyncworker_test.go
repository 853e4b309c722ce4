package agent

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// holdFS is the operating system's file layer with an fsync that can be held: while held,
// every file Sync waits until release (the journal's writer stalls as on a slow disk).
type holdFS struct {
	journal.OSFS
	held    atomic.Bool
	entered chan struct{} // capacity 1: a Sync began waiting
	release chan struct{} // closed: held Syncs return
}

func newHoldFS() *holdFS {
	return &holdFS{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (h *holdFS) OpenFile(name string, flag int, perm os.FileMode) (journal.File, error) {
	f, err := h.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return holdFile{File: f, h: h}, nil
}

type holdFile struct {
	journal.File
	h *holdFS
}

func (f holdFile) Sync() error {
	if f.h.held.Load() {
		nudge(f.h.entered)
		<-f.h.release
	}
	return f.File.Sync()
}

// sentLog records the commands an outbox sends, per device, and signals each.
type sentLog struct {
	mu   sync.Mutex
	sent map[string][]string // device → message ids, in send order
	ev   chan struct{}
}

func (s *sentLog) Send(_ context.Context, dev string, cmd outbox.Command) error {
	s.mu.Lock()
	s.sent[dev] = append(s.sent[dev], cmd.MessageID)
	s.mu.Unlock()
	nudge(s.ev)
	return nil
}

func (s *sentLog) has(dev, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.sent[dev] {
		if x == id {
			return true
		}
	}
	return false
}

// openHeldOutbox opens an outbox over a holdFS with terminals a and b (available at once).
func openHeldOutbox(t *testing.T) (*outbox.Outbox, *holdFS, *sentLog) {
	t.Helper()
	fs := newHoldFS()
	sent := &sentLog{sent: map[string][]string{}, ev: make(chan struct{}, 1)}
	ob, err := outbox.Open(t.TempDir(), sent, &outbox.Options{
		Journal: journal.Options{Sync: journal.SyncAlways, FS: fs},
		Devices: map[string]outbox.DeviceConfig{"a": {NoHeartbeat: true}, "b": {NoHeartbeat: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ob.LinkUp("a")
	ob.LinkUp("b")
	return ob, fs, sent
}

// A terminal's repair never holds another terminal's acks behind the disk: while the
// journal's fsync is held, the goroutine that delivers events queues terminal b's
// correction and goes on to deliver terminal a's ack at once, and a's next task is sent;
// b's correction is stored and sent once the disk answers.
func TestCorrectionDoesNotHoldOtherTerminalsAcks(t *testing.T) {
	ob, fs, sent := openHeldOutbox(t)
	ws := &whitelistSync{ob: ob}
	ws.startWorker(32, func(wire.SyncReport) {})
	defer func() {
		if fs.held.Swap(false) {
			close(fs.release)
		}
		ws.work.stop()
		ob.Close()
	}()
	for _, id := range []string{"a1", "a2"} {
		if err := ob.Enqueue(outbox.Task{MessageID: id, TaskID: id, DeviceID: "a", Op: "AddPerson", PersonID: id, Payload: []byte{0x80}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a1 sent", func() bool { return sent.has("a", "a1") }, sent.ev)

	fs.held.Store(true)
	delivered := make(chan struct{})
	go func() { // the goroutine that delivers every terminal's events
		defer close(delivered)
		if err := ws.Correct("b", face.Command{MessageID: "Sync-b-1", Op: face.AddPerson, Person: face.Person{ID: "p1"}}); err != nil {
			t.Errorf("Correct: %v", err)
		}
		ob.AckMessage("a", face.Ack{MessageID: "a1"})
	}()
	select {
	case <-fs.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("b's correction never reached the journal's fsync")
	}
	select {
	case <-delivered:
	case <-time.After(20 * time.Second):
		t.Fatal("delivering a's ack waited for the fsync of b's correction")
	}
	waitFor(t, "a2 sent while the fsync is held", func() bool { return sent.has("a", "a2") }, sent.ev)
	if sent.has("b", "Sync-b-1") {
		t.Fatal("b's correction was sent before it was in the journal")
	}
	fs.held.Store(false)
	close(fs.release)
	waitFor(t, "b's correction sent once stored", func() bool { return sent.has("b", "Sync-b-1") }, sent.ev)
}

// The worker's bound: while the disk stalls, corrections past it are refused at once
// (the reconciliation fails and backs off) and reports are journalled on the caller's
// goroutine; what was queued is carried out in order once the disk answers, reports and
// corrections each in the order made.
func TestSyncWorkerBound(t *testing.T) {
	ob, fs, sent := openHeldOutbox(t)
	var mu sync.Mutex
	var reports []string
	var refused []string
	ws := &whitelistSync{ob: ob}
	rep := func(r wire.SyncReport) {
		mu.Lock()
		reports = append(reports, r.DeviceID+" "+string(r.Status))
		mu.Unlock()
	}
	ws.startWorker(8, rep)
	ws.work.done = func(dev, id string, err error) {
		mu.Lock()
		refused = append(refused, id)
		mu.Unlock()
	}
	defer func() {
		ws.work.stop()
		ob.Close()
	}()
	fs.held.Store(true)
	// The first correction is taken by the worker, which then waits in the fsync.
	if err := ws.Correct("b", face.Command{MessageID: "Sync-0", Op: face.AddPerson, Person: face.Person{ID: "p0"}}); err != nil {
		t.Fatal(err)
	}
	<-fs.entered
	ws.work.report(wire.SyncReport{DeviceID: "b", Status: wire.SyncStarted})
	for i := 1; i < 8; i++ {
		if err := ws.Correct("b", face.Command{MessageID: "Sync-" + string(rune('0'+i)), Op: face.AddPerson,
			Person: face.Person{ID: "p" + string(rune('0'+i))}}); err != nil {
			t.Fatalf("correction %d: %v", i, err)
		}
	}
	err := ws.Correct("b", face.Command{MessageID: "Sync-9", Op: face.AddPerson, Person: face.Person{ID: "p9"}})
	if !errors.Is(err, errSyncQueueFull) {
		t.Fatalf("correction past the bound: %v, want %v", err, errSyncQueueFull)
	}
	ws.work.report(wire.SyncReport{DeviceID: "b", Status: wire.SyncFailed}) // past the bound: at once
	mu.Lock()
	if len(reports) != 1 || reports[0] != "b failed" {
		t.Errorf("reports while full: %v, want the one past the bound", reports)
	}
	mu.Unlock()
	fs.held.Store(false)
	close(fs.release)
	waitFor(t, "the queued corrections sent", func() bool { return sent.has("b", "Sync-0") }, sent.ev)
	for i := 1; i < 8; i++ {
		// One in flight: the next goes once the terminal acked the one before.
		id := "Sync-" + string(rune('0'+i-1))
		ob.AckMessage("b", face.Ack{MessageID: id})
		next := "Sync-" + string(rune('0'+i))
		waitFor(t, next+" sent", func() bool { return sent.has("b", next) }, sent.ev)
	}
	sent.mu.Lock()
	got := sent.sent["b"]
	sent.mu.Unlock()
	for i, id := range got {
		if want := "Sync-" + string(rune('0'+i)); id != want {
			t.Fatalf("b was sent %v, want Sync-0..Sync-7 in order", got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reports) != 2 || reports[1] != "b started" {
		t.Errorf("reports: %v, want the queued started after the one past the bound", reports)
	}
	if len(refused) != 0 {
		t.Errorf("refused after queueing: %v", refused)
	}
}
