package broker

import (
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// committerWaiters counts the goroutines parked in committer.wait.
func committerWaiters() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), ".(*committer).wait(")
}

// Two connections of one client id, as in a session takeover: the old connection's read
// loop may still be flushing its acknowledgements (WaitBeforeAck) while the new one's
// message is routed. The old one's wait must not take the new one's record away from it:
// the new connection's PUBACK waits for that record's commit too.
func TestWaitBeforeAckSharedByConnectionsOfOneID(t *testing.T) {
	c := openTestCommitter(t, t.TempDir())
	h := &sessionStore{commit: c, log: slog.New(slog.DiscardHandler)}
	key := inflightKey("office", 1)
	seq, err := c.enqueue(write{key: key, value: []byte("message")}) // the committer is not started yet
	if err != nil {
		t.Fatal(err)
	}
	h.waitBeforeAck("office", seq) // routed from the new connection
	old, next := &mqtt.Client{ID: "office"}, &mqtt.Client{ID: "office"}

	oldDone := make(chan struct{})
	go func() { h.WaitBeforeAck(old); close(oldDone) }()
	eventually(t, "the old connection waiting for the commit", func() bool { return committerWaiters() == 1 })

	nextDone := make(chan struct{})
	go func() { h.WaitBeforeAck(next); close(nextDone) }()
	deadline := time.After(waitFor)
	for committerWaiters() < 2 {
		select {
		case <-nextDone:
			t.Fatal("the new connection's WaitBeforeAck returned before its message's record was committed")
		case <-deadline:
			t.Fatal("the new connection's WaitBeforeAck neither waits nor returns")
		case <-time.After(10 * time.Millisecond): // polling the goroutines' stacks
		}
	}
	c.start()
	<-oldDone
	<-nextDone
	if !c.onDiskHas(key) {
		t.Fatal("the record is not committed")
	}
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
}
