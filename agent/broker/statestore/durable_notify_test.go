package statestore

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
)

// TestPersistentChangeNotifiedAfterFsync: the notification of a change of a
// persistent key goes out only once the snapshot holding it is on disk, so no
// client acts on a change a crash would undo. Changes of volatile keys are
// not held back, and later changes of the same key queue behind it.
func TestPersistentChangeNotifiedAfterFsync(t *testing.T) {
	s, err := New(&Options{SnapshotPath: filepath.Join(t.TempDir(), "statestore.snap")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	writing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.mu.Lock()
	s.testHookWrite = func() { once.Do(func() { close(writing); <-release }) }
	s.mu.Unlock()
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()

	w := &recorder{ch: make(chan note, 16)}
	for _, k := range []string{"cfg", "vol"} {
		if r := do(s, &Request{Payload: cmd("KEYNOTIFY", k), Watcher: w}); r.reply != "+OK\r\n" {
			t.Fatalf("KEYNOTIFY: %q", r.reply)
		}
	}
	now := hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "c"}.String()
	persist := setReq(now, "cfg", "a")
	persist.Persist = true
	if r := do(s, persist); r.reply != "+OK\r\n" {
		t.Fatalf("SET: %q", r.reply)
	}
	select {
	case <-writing: // the snapshot holding cfg=a is being written, not yet on disk
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot write started")
	}
	if got := w.all(); len(got) != 0 {
		t.Fatalf("notified before the snapshot is on disk: %+v", got)
	}
	// A volatile key is not held back.
	do(s, setReq(now, "vol", "x"))
	if got := <-w.ch; got.key != "vol" {
		t.Fatalf("first notification %+v, want vol", got)
	}
	// cfg made volatile (a change of the persistent set: waits for the next
	// snapshot), then changed again (volatile, but it queues behind).
	do(s, setReq(now, "cfg", "b"))
	do(s, setReq(now, "cfg", "c"))
	if got := w.all(); len(got) != 1 {
		t.Fatalf("cfg notified while its first change is not on disk: %+v", got[1:])
	}
	releaseOnce()
	var last hlc.Timestamp
	for _, want := range []string{"a", "b", "c"} {
		select {
		case got := <-w.ch:
			if got.key != "cfg" || !strings.HasSuffix(got.payload, "\r\n"+want+"\r\n") {
				t.Fatalf("got %s %q, want cfg=%s", got.key, got.payload, want)
			}
			if hlc.Compare(got.version, last) <= 0 {
				t.Fatalf("version %v after %v", got.version, last)
			}
			last = got.version
		case <-time.After(10 * time.Second):
			t.Fatalf("cfg=%s not notified after the snapshot", want)
		}
	}
	// With nothing waiting, changes of a volatile key go out at once again.
	do(s, setReq(now, "cfg", "d"))
	if got := w.all(); len(got) != 5 {
		t.Fatalf("%d notifications, want 5", len(got))
	}
}

// TestPersistentDeleteNotifiedAfterFsync: the same holds for DEL of a
// persistent key, and a watcher gone before the snapshot lands gets nothing.
func TestPersistentDeleteNotifiedAfterFsync(t *testing.T) {
	s, err := New(&Options{SnapshotPath: filepath.Join(t.TempDir(), "statestore.snap")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "c"}.String()
	persist := setReq(now, "lease", "me")
	persist.Persist = true
	do(s, persist)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	writing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.mu.Lock()
	s.testHookWrite = func() { once.Do(func() { close(writing); <-release }) }
	s.mu.Unlock()
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()

	stays, leaves := &recorder{ch: make(chan note, 4)}, &recorder{}
	for _, w := range []Watcher{stays, leaves} {
		do(s, &Request{Payload: cmd("KEYNOTIFY", "lease"), Watcher: w})
	}
	if r := do(s, &Request{Payload: cmd("DEL", "lease")}); r.reply != ":1\r\n" {
		t.Fatalf("DEL: %q", r.reply)
	}
	select {
	case <-writing:
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot write started")
	}
	if n := len(stays.all()); n != 0 {
		t.Fatal("DELETE notified before the snapshot without the key is on disk")
	}
	s.Unwatch(leaves)
	releaseOnce()
	select {
	case got := <-stays.ch:
		if got.payload != "*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n" {
			t.Fatalf("got %q", got.payload)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DELETE not notified after the snapshot")
	}
	if n := len(leaves.all()); n != 0 {
		t.Fatalf("a watcher gone before the snapshot got %d notifications", n)
	}
}
