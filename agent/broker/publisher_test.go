package broker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A report published before the broker serves waits for it: routed earlier, it would
// reach no stored session (they are loaded by Start).
func TestPublisherWaitsUntilTheBrokerServes(t *testing.T) {
	b, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := b.Publisher()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Publish(ctx, "r", []byte("early")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish before Start = %v, want it to wait until ctx ends", err)
	}

	done := make(chan error, 1)
	go func() { done <- p.Publish(context.Background(), "r", []byte("waits")) }()
	select {
	case err := <-done:
		t.Fatalf("Publish returned %v before Start", err)
	case <-time.After(20 * time.Millisecond): // the publish is parked; Start releases it
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitFor):
		t.Fatal("Publish still waiting after Start")
	}
	if err := p.SyncSince(p.Mark()); err != nil {
		t.Fatalf("SyncSince without DataDir: %v", err)
	}
}
