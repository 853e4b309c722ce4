package faces

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestSweeperSweepsAtStartAndAfterChanges: the sweeper sweeps once at start and once per
// burst of changes, a Delay after the first of them, and sweeps nothing while InUse fails.
func TestSweeperSweepsAtStartAndAfterChanges(t *testing.T) {
	s := open(t, t.TempDir(), Options{Logger: quietLogger()})
	a, sa := face(40, 100)
	b, sb := face(41, 100)
	for _, f := range []struct {
		d   []byte
		sum Sum
	}{{a, sa}, {b, sb}} {
		if err := s.Put(f.sum, 100, bytes.NewReader(f.d)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	inUse := map[Sum]bool{sa: true}
	var fail error
	calls := make(chan struct{}, 16)
	w := NewSweeper(s, SweeperOptions{Delay: 50 * time.Millisecond, Logger: quietLogger(), InUse: func() (func(Sum) bool, error) {
		mu.Lock()
		defer mu.Unlock()
		calls <- struct{}{}
		if fail != nil {
			return nil, fail
		}
		set := map[Sum]bool{}
		for k, v := range inUse {
			set[k] = v
		}
		return func(x Sum) bool { return set[x] }, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); w.Wait() }()
	w.Start(ctx)
	wait := func(what string) {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("no sweep %s", what)
		}
	}
	wait("at start")
	waitFor(t, func() bool { return !s.Has(sb) }, "the unreferenced face removed at start")
	if !s.Has(sa) {
		t.Fatal("the referenced face was removed")
	}
	// A burst of changes: one sweep.
	mu.Lock()
	fail = errors.New("journal failed")
	mu.Unlock()
	start := time.Now()
	for range 5 {
		w.Changed()
	}
	wait("after changes")
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("swept %s after the change, before its Delay", d)
	}
	select {
	case <-calls:
		t.Fatal("a burst of changes swept twice")
	case <-time.After(200 * time.Millisecond):
	}
	if !s.Has(sa) {
		t.Fatal("a sweep whose reading failed removed a face")
	}
	// Referenced no more: the next change's sweep removes it.
	mu.Lock()
	fail, inUse = nil, map[Sum]bool{}
	mu.Unlock()
	w.Changed()
	wait("after the last change")
	waitFor(t, func() bool { return !s.Has(sa) }, "the face no longer referred to removed")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
