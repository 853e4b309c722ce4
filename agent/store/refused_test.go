package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
)

// TestRefusedSubscriptionFailsAtOnce: when the broker refuses the response topic's
// subscription the connection can never serve a request. Connect (WaitReady) and the
// requests already waiting for the SUBACK fail at once with the refusal, rather than wait
// out their whole deadline and report a timeout.
func TestRefusedSubscriptionFailsAtOnce(t *testing.T) {
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true,
		Anonymous: &broker.Rules{Subscribe: []string{}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Connect(ctx, &Options{URL: "mqtt://" + b.Addr()})
	if err == nil {
		c.Close()
		t.Fatal("Connect succeeded without a response topic subscription")
	}
	if ctx.Err() != nil || !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Connect: %v (deadline passed: %v), want ErrNotConnected with the refusal", err, ctx.Err())
	}
}
