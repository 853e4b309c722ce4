package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker"
)

// TestLinkDropFailsRequestsWaitingForSubscription: a request made while the client waits for
// its SUBACK fails at once with ErrConnectionLost (and ErrNotConnected: it was never sent)
// when that connection drops, rather than wait for a later connection, bounded only by its
// timeout. After the broker restarts, the client gets ready and serves requests again.
func TestLinkDropFailsRequestsWaitingForSubscription(t *testing.T) {
	hook, released, b, url := startHoldingSubscribe(t)
	// A long request timeout: failing by the timeout would fail the test's own deadline.
	c, err := New(&Options{URL: url, Timeout: time.Minute, ReconnectMin: 20 * time.Millisecond,
		ReconnectMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	waiting := make(chan struct{}, 1)
	c.mu.Lock()
	c.testRegisterWait = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()

	select {
	case <-hook.entered: // the SUBSCRIBE is held: no SUBACK
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not subscribe")
	}
	result := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), "k")
		result <- err
	}()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not wait for the subscription")
	}

	// The broker goes away under the waiting request.
	cl, ok := b.Server().Clients.Get(c.ClientID())
	if !ok {
		t.Fatal("client not known to the broker")
	}
	_ = b.Server().DisconnectClient(cl, packets.ErrServerShuttingDown)
	select {
	case err := <-result:
		if !errors.Is(err, ErrConnectionLost) || !errors.Is(err, ErrNotConnected) || !Retryable(err) {
			t.Fatalf("request waiting for the SUBACK: %v, want ErrConnectionLost and ErrNotConnected", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request still waits after its connection dropped")
	}
	released()
	addr := b.Addr()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// Restarted on the same address, the store serves the client again.
	startEmbedded(t, addr, "", nil)
	if err := c.WaitReady(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Set(ctxT(t), "k", []byte("v"), nil); err != nil {
		t.Fatalf("request after the restart: %v", err)
	}
}

// TestRequestWaitingForSubscriptionHonoursContext: the wait for the SUBACK is bounded by the
// request's context and by its timeout.
func TestRequestWaitingForSubscriptionHonoursContext(t *testing.T) {
	hook, _, _, url := startHoldingSubscribe(t)
	c, err := New(&Options{URL: url, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	select {
	case <-hook.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not subscribe")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Get(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: %v", err)
	}
	if _, err := c.Del(context.Background(), "k", &DelOptions{Timeout: 50 * time.Millisecond}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("request with a 50ms timeout: %v", err)
	}
}

// TestCloseFailsRequestsWaitingForSubscription: Close ends a request waiting for the SUBACK
// with ErrClosed instead of leaving it to its timeout.
func TestCloseFailsRequestsWaitingForSubscription(t *testing.T) {
	hook, _, _, url := startHoldingSubscribe(t)
	c, err := New(&Options{URL: url, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 1)
	c.mu.Lock()
	c.testRegisterWait = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()
	select {
	case <-hook.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not subscribe")
	}
	result := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), "k")
		result <- err
	}()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not wait for the subscription")
	}
	c.Close()
	select {
	case err := <-result:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("request waiting for the SUBACK at Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request still waits after Close")
	}
}

// startHoldingSubscribe starts the embedded broker with a hook that holds the first
// SUBSCRIBE until released is called (at the latest when the test ends: the cleanup is
// registered after the broker's Close, so it runs before it).
func startHoldingSubscribe(t *testing.T) (hook *holdFirstSubscribe, released func(), b *broker.Broker, url string) {
	t.Helper()
	hook = &holdFirstSubscribe{entered: make(chan struct{}), release: make(chan struct{})}
	released = sync.OnceFunc(func() { close(hook.release) })
	b, url = startEmbedded(t, "", "", func(b *broker.Broker) {
		if err := b.AddHook(hook, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(released)
	return hook, released, b, url
}
