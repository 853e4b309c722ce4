package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
)

func TestWatchDeliversSetAndDelete(t *testing.T) {
	m, _ := mosquittoStore(t)
	watcher := connect(t, m.URL, nil)
	writer := connect(t, m.URL, nil)
	ctx := ctxT(t)
	w1, err := watcher.KeyNotify(ctx, "cfg")
	if err != nil {
		t.Fatal(err)
	}
	w2, err := watcher.KeyNotify(ctx, "cfg") // a second Watch shares the registration
	if err != nil {
		t.Fatal(err)
	}
	v, err := writer.Set(ctx, "cfg", []byte("a=1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []*Watch{w1, w2} {
		n := next(t, w)
		if n.Op != OpSet || string(n.Value) != "a=1" || n.Resync || n.Key != "cfg" {
			t.Fatalf("got %+v", n)
		}
		if hlc.Compare(n.Version, v) != 0 {
			t.Errorf("notification version %v, SET returned %v", n.Version, v)
		}
	}
	if err := w1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Del(ctx, "cfg", nil); err != nil {
		t.Fatal(err)
	}
	if n := next(t, w2); n.Op != OpDelete {
		t.Fatalf("got %+v, want DELETE", n)
	}
	if err := w2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The last Stop sent KEYNOTIFY STOP: a second STOP finds nothing.
	if err := watcher.KeyNotifyStop(ctx, "cfg"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second STOP: %v", err)
	}
}

// TestBrokerRestart: requests in flight fail fast, the client reconnects, watches resume, and
// a change made while the client was away is delivered.
func TestBrokerRestart(t *testing.T) {
	m, r := mosquittoStore(t)
	// The responder reconnects to the restarted broker too, and may subscribe after the client
	// resent KEYNOTIFY. mosquitto then answers PUBACK 0x10 and the client retries at once
	// (ErrNoResponder) rather than wait out its request timeout, which under load would
	// eat the test's deadline.
	c := connect(t, m.URL, nil)
	ctx := ctxT(t)
	if _, err := c.Set(ctx, "watched", []byte("before"), nil); err != nil {
		t.Fatal(err)
	}
	w, err := c.KeyNotify(ctx, "watched")
	if err != nil {
		t.Fatal(err)
	}

	// A request the store holds is in flight when the broker goes away.
	r.SetHold(true)
	inflight := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), "watched")
		inflight <- err
	}()
	select {
	case <-r.Held():
	case <-time.After(10 * time.Second):
		t.Fatal("request did not reach the responder")
	}
	m.Stop()
	select {
	case err := <-inflight:
		// ErrConnectionLost comes only from the link's end, not from the request's timeout
		// (ErrTimeout): no clock is needed to tell that it failed fast.
		if !errors.Is(err, ErrConnectionLost) || !Retryable(err) {
			t.Fatalf("in-flight request: %v, want ErrConnectionLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("in-flight request did not fail when the link dropped")
	}
	if _, err := c.Get(ctx, "watched"); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("request while down: %v, want ErrNotConnected", err)
	}

	// While the client is away, another client changes the key.
	r.SetHold(false)
	r.SetDirect("watched", "changed while away")
	m.Restart()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	n := nextWithin(t, w, 20*time.Second)
	if n.Op != OpSet || string(n.Value) != "changed while away" || !n.Resync {
		t.Fatalf("after reconnect: %+v, want a Resync SET", n)
	}
	// The watch is registered again: a new change arrives as a real notification.
	other := connect(t, m.URL, nil)
	if _, err := other.Set(ctx, "watched", []byte("after"), nil); err != nil {
		t.Fatal(err)
	}
	if n := next(t, w); n.Op != OpSet || string(n.Value) != "after" || n.Resync {
		t.Fatalf("after re-registration: %+v", n)
	}
	if _, err := c.Get(ctx, "watched"); err != nil {
		t.Fatalf("request after reconnect: %v", err)
	}
}
