package statestore

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// TestFailedSnapshotIsWrittenAgain: a snapshot write that fails (a full disk, a directory
// gone for a moment) is tried again by itself until it succeeds. Waiting for the next
// change of a persistent key instead would hold the answer DoDurable holds and the
// notifications of the change until then, which for the few configuration keys
// persistence is for may be days away (or Close).
func TestFailedSnapshotIsWrittenAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	s, err := New(&Options{SnapshotPath: filepath.Join(dir, "statestore.snap"), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := &recorder{ch: make(chan note, 16)}
	if r := do(s, &Request{Payload: cmd("KEYNOTIFY", "cfg"), Watcher: w}); r.reply != "+OK\r\n" {
		t.Fatalf("KEYNOTIFY: %q", r.reply)
	}
	if err := os.RemoveAll(dir); err != nil { // every write fails until it is back
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	req := setReq(hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "c"}.String(), "cfg", "v")
	req.Persist = true
	if _, _, wait := s.DoDurable(req, nil, func(_ []byte, _ hlc.Timestamp, err error) { answered <- err }); !wait {
		t.Fatal("a persistent change was answered before its snapshot")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "snapshot write failed") {
		if time.Now().After(deadline) {
			t.Fatal("the snapshot write did not fail")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-answered:
		t.Fatalf("answered while no snapshot can be written: %v", err)
	default:
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("answered with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot written once the directory was back, and the change not answered")
	}
	select {
	case n := <-w.ch:
		if n.key != "cfg" {
			t.Fatalf("notified of %q", n.key)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the change was not notified")
	}
	if _, err := os.Stat(filepath.Join(dir, "statestore.snap")); err != nil {
		t.Fatal(err)
	}
}

// TestWaitingForASnapshotStaysWithinMaxBytes: while snapshot writes fail, the answers
// DoDurable holds back and the notifications waiting for the snapshot count against
// MaxBytes, and changes beyond it are refused: held outside the bound, one notification and
// one answer per change would pile up without end.
func TestWaitingForASnapshotStaysWithinMaxBytes(t *testing.T) {
	const maxBytes = 64 << 10
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := New(&Options{SnapshotPath: filepath.Join(dir, "statestore.snap"), MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := &recorder{}
	if r := do(s, &Request{Payload: cmd("KEYNOTIFY", "cfg"), Watcher: w}); r.reply != "+OK\r\n" {
		t.Fatalf("KEYNOTIFY: %q", r.reply)
	}
	if err := os.RemoveAll(dir); err != nil { // every snapshot write fails until it is back
		t.Fatal(err)
	}
	value := strings.Repeat("v", 1024)
	answers := make(chan error, 1000)
	waiting, refused := 0, 0
	for i := range 1000 {
		req := setReq(hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "c"}.String(), "cfg", value)
		req.Persist = i%2 == 0
		req.WaitBytes = 100 // the caller's address of the answer
		out, _, wait := s.DoDurable(req, nil, func(_ []byte, _ hlc.Timestamp, err error) { answers <- err })
		switch {
		case wait:
			waiting++
		case string(out) == "-ERR "+ErrTextQuota+"\r\n":
			refused++
		}
		if b := s.Bytes(); b > maxBytes {
			t.Fatalf("after %d changes the store counts %d bytes, bound %d", i+1, b, maxBytes)
		}
	}
	s.mu.Lock()
	var held int64
	for _, d := range s.deferred {
		held += int64(len(d.key) + len(d.value))
	}
	for _, wt := range s.waiters {
		held += int64(len(wt.reply))
	}
	s.mu.Unlock()
	if held > maxBytes || refused == 0 {
		t.Fatalf("%d bytes of notifications and answers wait for the snapshot, bound %d (%d changes refused)", held, maxBytes, refused)
	}

	// Once snapshots are written again, everything waiting goes and the store counts the key.
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for range waiting {
		select {
		case err := <-answers:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the answers waiting were not given once the snapshot was written")
		}
	}
	if b, want := s.Bytes(), entryCost(len("cfg"), len(value), nil)+registrationCost(len("cfg")); b != want {
		t.Fatalf("the store counts %d bytes once nothing waits, want %d", b, want)
	}
}
