package broker

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/eclipse/paho.golang/paho"
)

// TestRestoredSessionReceivesNewMessages: a back office that resumes its persistent
// session after a broker restart keeps receiving what is published after it came back,
// not only what was queued while it was away.
func TestRestoredSessionReceivesNewMessages(t *testing.T) {
	dir := t.TempDir()
	b1, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Start(); err != nil {
		t.Fatal(err)
	}
	dial(t, b1.Addr(), "back-office", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"faceagent/gw-01/results"}}).close()
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}

	expectResumedSessionReceivesNew(t, dir, 0)
}

// TestRestoredSessionAfterCrash: the sessions database as a crash leaves it (copied while
// the broker runs, with QoS 1 messages possibly still in flight) restores a session that
// receives again what was in flight and then everything new.
func TestRestoredSessionAfterCrash(t *testing.T) {
	dir := t.TempDir()
	b1, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Start(); err != nil {
		t.Fatal(err)
	}
	bo := dial(t, b1.Addr(), "back-office", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"faceagent/gw-01/results"}})
	pub := dial(t, b1.Addr(), "agent", dialOptions{noSubscribe: true})
	for i := range 50 {
		if _, err := pub.c.Publish(context.Background(), &paho.Publish{QoS: 1, Topic: "faceagent/gw-01/results", Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 {
		bo.next()
	}
	crashed := crashCopy(t, dir)
	b1.Close()

	expectResumedSessionReceivesNew(t, crashed, 50)
}

// expectResumedSessionReceivesNew starts a broker on dataDir, resumes the back office's
// session and checks that it receives two new results. Before each it may first get
// again messages that were in flight: duplicates with a one-byte payload below
// sentBefore (none when sentBefore is 0); anything else fails the test.
func expectResumedSessionReceivesNew(t *testing.T, dataDir string, sentBefore int) {
	t.Helper()
	b2 := startBroker(t, Options{AllowAnonymous: true, DataDir: dataDir})
	f := false
	back := dial(t, b2.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600, noSubscribe: true})
	agent := dial(t, b2.Addr(), "agent", dialOptions{noSubscribe: true})
	for _, payload := range []string{`{"taskId":"t-1"}`, `{"taskId":"t-2"}`} {
		if _, err := agent.c.Publish(context.Background(), &paho.Publish{QoS: 1, Topic: "faceagent/gw-01/results", Payload: []byte(payload)}); err != nil {
			t.Fatal(err)
		}
		for {
			m := back.next()
			if string(m.Payload) == payload {
				break
			}
			if len(m.Payload) != 1 || int(m.Payload[0]) >= sentBefore || !m.Duplicate() {
				t.Fatalf("resumed session got %q (dup %v), want %q", m.Payload, m.Duplicate(), payload)
			}
		}
	}
}

// crashCopy copies the sessions journal of a running broker in dir, as a crash would leave
// it (every commit is fsynced before it counts), into a new directory.
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	crashed := t.TempDir()
	src, dst := filepath.Join(dir, SessionsDir), filepath.Join(crashed, SessionsDir)
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	files, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(filepath.Join(src, f.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a segment compacted away meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f.Name()), raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return crashed
}
