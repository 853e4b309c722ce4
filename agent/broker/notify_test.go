package broker

import (
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/hlc"
)

// TestNotifyQueueOverflowDisconnects: a watcher that falls notifyQueueLen
// behind is disconnected instead of silently missing changes, and Notify
// never blocks the store while that happens.
func TestNotifyQueueOverflowDisconnects(t *testing.T) {
	b, err := New(&Options{AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl := b.Server().NewClient(nil, "test", "slow", false)
	cl.Properties.ProtocolVersion = 5
	n := newNotifier(b.service, cl) // not running: nothing drains the queue
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i <= notifyQueueLen; i++ {
			n.Notify("k", statestore.OpSet, []byte("v"), hlc.Timestamp{Wall: 1, Node: "n"})
		}
	}()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("Notify blocked on a full queue")
	}
	if n.Len() != 0 {
		t.Fatalf("an overflowed queue keeps %d notifications", n.Len())
	}
	b.service.wg.Add(1)
	n.run() // finds the overflow: disconnects, returns
	if !cl.Closed() {
		t.Fatal("overflowing client still connected")
	}
	if cause := cl.StopCause(); cause != CodeNotifyOverflow {
		t.Fatalf("stop cause %v", cause)
	}
}
