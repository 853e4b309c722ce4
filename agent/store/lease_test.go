package store

import (
	"errors"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
)

func TestLeaseThroughMosquitto(t *testing.T) {
	m, _ := mosquittoStore(t)
	testLease(t, m.URL)
}

func testLease(t *testing.T, url string) {
	ctx := ctxT(t)
	c1 := connect(t, url, func(o *Options) { o.ClientID = "holder-1" })
	c2 := connect(t, url, func(o *Options) { o.ClientID = "holder-2" })
	observer := connect(t, url, nil)

	obs, err := observer.ObserveLease(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	// Renewals every 500ms: short enough to see several, long enough that a loaded machine
	// does not miss the 1.5s TTL.
	l1, err := c1.TryAcquire(ctx, "leader", &LeaseOptions{TTL: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	acquired := l1.Token()
	if _, err := c2.TryAcquire(ctx, "leader", nil); !errors.Is(err, ErrLeaseHeld) || !errors.Is(err, ErrNotApplied) {
		t.Fatalf("second TryAcquire: %v, want ErrLeaseHeld", err)
	}
	holder, version, err := c2.LeaseHolder(ctx, "leader")
	// A renewal may have happened since: the version is the acquisition's or a later one.
	if err != nil || holder != "holder-1" || hlc.Compare(version, acquired) < 0 {
		t.Fatalf("holder %q %v %v; acquired with %v", holder, version, err, acquired)
	}
	// Renewal: the observer sees the acquisition and two renewals, each with a newer version,
	// and the lease is still held after more than a TTL.
	var last hlc.Timestamp
	for i := range 3 {
		n := next(t, obs)
		if n.Op != OpSet || string(n.Value) != "holder-1" || hlc.Compare(n.Version, last) <= 0 {
			t.Fatalf("notification %d: %+v", i, n)
		}
		last = n.Version
	}
	if err := l1.Err(); err != nil {
		t.Fatalf("lease lost while renewing: %v", err)
	}
	// Edit writes with the fencing token.
	v, err := l1.Edit(ctx, "protected", func(old []byte, found bool) ([]byte, error) {
		if found {
			t.Errorf("protected exists: %q", old)
		}
		return []byte("1"), nil
	})
	if err != nil || v.IsZero() {
		t.Fatalf("Edit: %v %v", v, err)
	}
	if _, err := c2.Set(ctx, "protected", []byte("intruder"), nil); !errors.Is(err, ErrFencingTokenRequired) {
		t.Fatalf("unfenced write to a protected key: %v", err)
	}
	if _, err := l1.Edit(ctx, "protected", func(old []byte, found bool) ([]byte, error) {
		return append(old, '+'), nil
	}); err != nil {
		t.Fatal(err)
	}
	if e, _ := c2.Get(ctx, "protected"); string(e.Value) != "1+" {
		t.Fatalf("protected = %q", e.Value)
	}

	// Release frees it for the next holder, which Acquire was waiting for.
	got := make(chan *Lease, 1)
	go func() {
		l, err := c2.Acquire(ctx, "leader", &LeaseOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l1.Err(), ErrLeaseReleased) {
		t.Fatalf("after Release: %v", l1.Err())
	}
	l2 := <-got
	if l2 == nil {
		t.FailNow()
	}
	if hlc.Compare(l2.Token(), l1.Token()) <= 0 {
		t.Errorf("successor's token %v not after %v", l2.Token(), l1.Token())
	}
	// Losing is signalled at once, long before the 10s TTL: someone deletes the key.
	start := time.Now()
	if _, err := observer.Del(ctx, "leader", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l2.Lost():
		if !errors.Is(l2.Err(), ErrLeaseLost) {
			t.Fatalf("Err %v", l2.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("loss not signalled")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("loss signalled after %v", d)
	}
	if _, err := l2.Edit(ctx, "protected", func([]byte, bool) ([]byte, error) { return nil, nil }); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Edit after loss: %v", err)
	}
	_ = l2.Release(ctx)
}

func TestLeaseTakeoverWhenHolderStopsRenewing(t *testing.T) {
	m, _ := mosquittoStore(t)
	testTakeover(t, m.URL)
}

func testTakeover(t *testing.T, url string) {
	ctx := ctxT(t)
	c1 := connect(t, url, func(o *Options) { o.ClientID = "dies" })
	c2 := connect(t, url, func(o *Options) { o.ClientID = "standby" })
	l1, err := c1.TryAcquire(ctx, "leader", &LeaseOptions{TTL: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease, 1)
	go func() {
		l, err := c2.Acquire(ctx, "leader", &LeaseOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	// The holder's process goes away without releasing: renewals stop.
	c1.Close()
	select {
	case <-l1.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("dead holder's lease not marked lost")
	}
	l2 := <-got
	if l2 == nil {
		t.FailNow()
	}
	if h, _, err := c2.LeaseHolder(ctx, "leader"); err != nil || h != "standby" {
		t.Fatalf("holder %q %v", h, err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFencingScenario is the protocol document's Client1/Client2 example: Client1's lock
// expires, Client2 takes it and writes; Client1's late write with its old token is refused.
func TestFencingScenarioThroughMosquitto(t *testing.T) {
	m, _ := mosquittoStore(t)
	testFencingScenario(t, m.URL)
}

func testFencingScenario(t *testing.T, url string) {
	ctx := ctxT(t)
	c1 := connect(t, url, func(o *Options) { o.ClientID = "Client1" })
	c2 := connect(t, url, func(o *Options) { o.ClientID = "Client2" })
	w, err := c2.KeyNotify(ctx, "LockName")
	if err != nil {
		t.Fatal(err)
	}
	t1, err := c1.Set(ctx, "LockName", []byte("Client1"), &SetOptions{Condition: NotExistsOrEqual, Expiry: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Set(ctx, "LockName", []byte("Client2"), &SetOptions{Condition: NotExistsOrEqual, Expiry: 10 * time.Second}); !errors.Is(err, ErrNotApplied) {
		t.Fatalf("Client2 while Client1 holds: %v", err)
	}
	if _, err := c1.Set(ctx, "ProtectedKey", []byte("by 1"), &SetOptions{FencingToken: t1}); err != nil {
		t.Fatal(err)
	}
	for n := next(t, w); n.Op != OpDelete; n = next(t, w) {
	} // Client1 stops renewing; the lock expires
	t2, err := c2.Set(ctx, "LockName", []byte("Client2"), &SetOptions{Condition: NotExistsOrEqual, Expiry: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Set(ctx, "ProtectedKey", []byte("by 2"), &SetOptions{FencingToken: t2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Set(ctx, "ProtectedKey", []byte("late 1"), &SetOptions{FencingToken: t1}); !errors.Is(err, ErrFencingTokenLowerVersion) {
		t.Fatalf("Client1's stale write: %v, want ErrFencingTokenLowerVersion", err)
	}
	if _, err := c1.Del(ctx, "ProtectedKey", &DelOptions{FencingToken: t1}); !errors.Is(err, ErrFencingTokenLowerVersion) {
		t.Fatalf("Client1's stale delete: %v", err)
	}
	if e, err := c1.Get(ctx, "ProtectedKey"); err != nil || string(e.Value) != "by 2" {
		t.Fatalf("ProtectedKey = %q %v", e.Value, err)
	}
}

// TestLeaseLostWhenOffline: with the broker gone, renewals fail; the lease is declared lost
// when its TTL has run out since the last successful renewal, not later.
func TestLeaseLostWhenOffline(t *testing.T) {
	m, _ := mosquittoStore(t)
	c := connect(t, m.URL, nil)
	ttl := 500 * time.Millisecond
	l, err := c.TryAcquire(ctxT(t), "offline", &LeaseOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	m.Stop()
	stopped := time.Now()
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("lease still held with the broker gone")
	}
	if d := time.Since(stopped); d > ttl+2*time.Second {
		t.Errorf("lost %v after the broker went away; TTL %v", d, ttl)
	}
	if !errors.Is(l.Err(), ErrLeaseLost) {
		t.Errorf("Err %v", l.Err())
	}
	_ = l.Release(ctxT(t))
}
