package broker

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"weak"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// TestAnswerWaitingForASnapshotDoesNotKeepItsConnection: the answer to a persistent change
// waits for its snapshot, which may take hours on a full disk; its requester is
// disconnected unacknowledged after WriteTimeout and comes back on a new connection. The
// answer must not keep the connection that left: before, the answer's callback and the
// count of answers due held its client (its queues and buffers) until the snapshot was
// written, one more for every retry of every requester. The answer still reaches the
// session once the snapshot is written.
func TestAnswerWaitingForASnapshotDoesNotKeepItsConnection(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, Options{DataDir: dir, WriteTimeout: 300 * time.Millisecond})
	// Every snapshot write fails while the name of its temporary file is a directory's.
	tmp := filepath.Join(dir, SnapshotFile+".tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	c := dial(t, b.Addr(), "keeper", dialOptions{sessionExpiry: 3600})
	first := func() weak.Pointer[mqtt.Client] {
		cl, ok := b.Server().Clients.Get("keeper")
		if !ok {
			t.Fatal("no client")
		}
		return weak.Make(cl)
	}()
	if _, _, err := c.publish(cmd("SET", "cfg", "v"), req{persist: true, timeout: 2 * time.Second}); err == nil {
		t.Fatal("a persistent change acknowledged while no snapshot can be written")
	}
	c.close()
	keep := false
	again := dial(t, b.Addr(), "keeper", dialOptions{sessionExpiry: 3600, cleanStart: &keep, noSubscribe: true})

	deadline := time.Now().Add(waitFor)
	for {
		b.service.answers.mu.Lock()
		counts := len(b.service.answers.pending)
		b.service.answers.mu.Unlock()
		runtime.GC()
		if counts == 0 && first.Value() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the connection that left is still held (%d counts of answers due, client collected: %v)",
				counts, first.Value() == nil)
		}
		time.Sleep(10 * time.Millisecond)
	}

	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	p := again.next() // the answer, on the response topic of the resumed session
	if p.Topic != again.responseTopic || string(p.Payload) != "+OK\r\n" {
		t.Fatalf("got %q on %s, want the answer +OK on %s", p.Payload, p.Topic, again.responseTopic)
	}
}
