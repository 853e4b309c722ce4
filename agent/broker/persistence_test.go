package broker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
)

// TestRestartKeepsSessionsAndPersistentKeys: with a DataDir, keys written
// with aio-persistence and a client's session (its subscription and the QoS 1
// message queued while it was away) survive a broker restart; other keys do
// not.
func TestRestartKeepsSessionsAndPersistentKeys(t *testing.T) {
	dir := t.TempDir()
	b1, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Start(); err != nil {
		t.Fatal(err)
	}
	backOffice := dial(t, b1.Addr(), "back-office", dialOptions{sessionExpiry: 3600, subscribe: []string{"faceagent/gw-01/results"}})
	backOffice.close()

	kv := dial(t, b1.Addr(), "kv", dialOptions{})
	kept := kv.do(cmd("SET", "faceagent/gw-01/config", "retry=2s"), req{persist: true})
	// The reply came only once the key was on disk: read the snapshot now,
	// while the broker runs.
	onDisk, err := statestore.New(&statestore.Options{SnapshotPath: filepath.Join(dir, SnapshotFile)})
	if err != nil {
		t.Fatal(err)
	}
	if n := onDisk.Len(); n != 1 {
		t.Fatalf("snapshot holds %d keys when the SET was answered", n)
	}
	_ = onDisk.Close()
	kv.do(cmd("SET", "volatile", "x"), req{})
	kv.close()
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}

	b2 := startBroker(t, Options{AllowAnonymous: true, DataDir: dir})
	agent := dial(t, b2.Addr(), "agent", dialOptions{noSubscribe: true})
	ctx := context.Background()
	if _, err := agent.c.Publish(ctx, &paho.Publish{QoS: 1, Topic: "faceagent/gw-01/results", Payload: []byte(`{"taskId":"t-1"}`)}); err != nil {
		t.Fatal(err)
	}
	f := false
	back := dial(t, b2.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600, noSubscribe: true})
	if m := back.next(); m.Topic != "faceagent/gw-01/results" || string(m.Payload) != `{"taskId":"t-1"}` {
		t.Fatalf("queued result: %q on %q", m.Payload, m.Topic)
	}

	kv2 := dial(t, b2.Addr(), "kv", dialOptions{})
	g := kv2.do(cmd("GET", "faceagent/gw-01/config"), req{})
	if string(g.Payload) != "$8\r\nretry=2s\r\n" || g.Properties.User.Get("__ts") != kept.Properties.User.Get("__ts") {
		t.Fatalf("persistent key after restart: %q version %q (was %q)", g.Payload, g.Properties.User.Get("__ts"), kept.Properties.User.Get("__ts"))
	}
	if p := kv2.do(cmd("GET", "volatile"), req{}); string(p.Payload) != "$-1\r\n" {
		t.Fatalf("volatile key survived: %q", p.Payload)
	}
}

// TestCorruptSnapshotStopsStartup: a damaged snapshot is an error, not an
// empty store, and the failed New releases the sessions database.
func TestCorruptSnapshotStopsStartup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, SnapshotFile)
	if err := os.WriteFile(path, []byte("FASTORE1 not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(&Options{AllowAnonymous: true, DataDir: dir}); !errors.Is(err, statestore.ErrCorruptSnapshot) {
		t.Fatalf("New = %v, want ErrCorruptSnapshot", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	b, err := New(&Options{AllowAnonymous: true, DataDir: dir})
	if err != nil {
		t.Fatalf("after removing the snapshot: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRunServesUntilCancelled(t *testing.T) {
	b, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx, ready) }()
	<-ready
	c := dial(t, b.Addr(), "run", dialOptions{})
	if p := c.do(cmd("GET", "k"), req{}); string(p.Payload) != "$-1\r\n" {
		t.Fatalf("GET: %q", p.Payload)
	}
	c.close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
