package kv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/kv"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/hlc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testStore is the contract both adapters keep, run against a store whose values are
// bounded to 64 bytes and where fenced has been written with a fencing token by a
// client.
func testStore(t *testing.T, s kv.Store, fenced string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, found, err := s.Get(ctx, "kv/missing"); found || err != nil {
		t.Fatalf("Get of a missing key: found %v, %v", found, err)
	}
	changed, stop, err := s.Watch(ctx, "kv/k")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := s.Set(ctx, "kv/k", []byte("one"), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("no signal after a Set of the watched key")
	}
	if v, found, err := s.Get(ctx, "kv/k"); !found || err != nil || string(v) != "one" {
		t.Fatalf("Get = %q %v %v", v, found, err)
	}

	// Refusals are *store.ServerError, matching agent/store's sentinels.
	err = s.Set(ctx, "kv/big", make([]byte, 65), 0)
	var serr *store.ServerError
	if !errors.Is(err, store.ErrQuotaExceeded) || !errors.As(err, &serr) || serr.Text != store.ErrQuotaExceeded.Text {
		t.Fatalf("a value over the bound: %v, want %v", err, store.ErrQuotaExceeded)
	}
	if err := s.Set(ctx, fenced, []byte("v"), 0); !errors.Is(err, store.ErrFencingTokenRequired) {
		t.Fatalf("a write of a fenced key: %v, want %v", err, store.ErrFencingTokenRequired)
	}

	// Expiry: the key goes, and the watch says so.
	if err := s.Set(ctx, "kv/k", []byte("two"), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("the key did not expire")
		}
		if _, found, err := s.Get(ctx, "kv/k"); err != nil {
			t.Fatal(err)
		} else if !found {
			break
		}
	}
}

// fence writes key with a fencing token, as a client holding a lease on it would.
func fence(t *testing.T, url, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc, err := store.Connect(ctx, &store.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	token := hlc.Timestamp{Wall: time.Now().UnixMilli(), Node: "holder"}
	if _, err := sc.Set(ctx, key, []byte("held"), &store.SetOptions{FencingToken: token}); err != nil {
		t.Fatal(err)
	}
}

func startBroker(t *testing.T, reserved ...string) *broker.Broker {
	t.Helper()
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true, MaxValueSize: 64,
		ReservedKeyPrefixes: reserved})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestEngine(t *testing.T) {
	b := startBroker(t, "kv/own/")
	fence(t, "mqtt://"+b.Addr(), "kv/fenced")
	clock := hlc.NewClock("agent")
	e := kv.Engine{Store: b.Store(), Clock: clock}
	testStore(t, e, "kv/fenced")

	// The engine writes as the owner of the reserved keys; the clock follows the store.
	ctx := context.Background()
	if err := e.Set(ctx, "kv/own/state", []byte("v"), 0); err != nil {
		t.Fatalf("the owner's write of a reserved key: %v", err)
	}
	_, version, err := b.Store().Get("kv/own/state")
	if err != nil {
		t.Fatal(err)
	}
	if hlc.Compare(clock.Last(), version) < 0 {
		t.Fatalf("the clock (%v) did not observe the version %v", clock.Last(), version)
	}
	// A stopped watch is no registration any more.
	_, stop, err := e.Watch(ctx, "kv/w")
	if err != nil {
		t.Fatal(err)
	}
	before := b.Store().Stats().Registrations
	stop()
	if n := b.Store().Stats().Registrations; n != before-1 {
		t.Fatalf("registrations %d after stop, want %d", n, before-1)
	}
}

func TestClient(t *testing.T) {
	b := startBroker(t)
	url := "mqtt://" + b.Addr()
	fence(t, url, "kv/fenced")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc, err := store.Connect(ctx, &store.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	testStore(t, kv.Client{C: sc}, "kv/fenced")
}
