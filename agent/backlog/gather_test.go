package backlog

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gatherRig runs run with a drain that takes everything added so far.
type gatherRig struct {
	ready   chan struct{}
	mu      sync.Mutex
	pending int
	drained chan int // each drain's count
	stop    func()
}

func startGatherRig(t *testing.T, g Gathering) *gatherRig {
	t.Helper()
	r := &gatherRig{ready: make(chan struct{}, 1), drained: make(chan int, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx, r.ready, g, func(context.Context) (bool, int, error) {
			r.mu.Lock()
			n := r.pending
			r.pending = 0
			r.mu.Unlock()
			r.drained <- n
			return false, n, nil
		}, func(error, time.Duration) {})
	}()
	r.stop = func() { cancel(); <-done }
	t.Cleanup(r.stop)
	return r
}

func (r *gatherRig) add() {
	r.mu.Lock()
	r.pending++
	r.mu.Unlock()
	poke(r.ready)
}

func (r *gatherRig) nextDrain(t *testing.T) int {
	t.Helper()
	select {
	case n := <-r.drained:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no drain within 10 s")
		return 0
	}
}

// nextNonEmptyDrain skips rounds that found nothing: a poke left in ready by an add
// whose messages an earlier round already took starts one more.
func (r *gatherRig) nextNonEmptyDrain(t *testing.T) int {
	t.Helper()
	for {
		if n := r.nextDrain(t); n != 0 {
			return n
		}
	}
}

// TestGatheringEndsWhenSettled: with an hour to gather, messages added meanwhile wait;
// once settled turns true, the next question drains them all in one round.
func TestGatheringEndsWhenSettled(t *testing.T) {
	var settled atomic.Bool
	r := startGatherRig(t, Gathering{Wait: time.Hour, Settled: settled.Load})
	for range 5 {
		r.add()
	}
	select {
	case n := <-r.drained:
		t.Fatalf("drained %d while gathering and not settled", n)
	default:
	}
	// The sixth is pending before settled turns true: a round the publisher starts from
	// then on (at this poke, an earlier one, or its recheck) takes all six.
	r.mu.Lock()
	r.pending++
	r.mu.Unlock()
	settled.Store(true)
	poke(r.ready)
	if n := r.nextDrain(t); n != 6 {
		t.Fatalf("drained %d, want the 6 added", n)
	}
	// Settled at the poke: no gathering at all.
	r.add()
	if n := r.nextNonEmptyDrain(t); n != 1 {
		t.Fatalf("drained %d, want 1", n)
	}
}

// TestGatheringWaitsItsTime: without settled, a gathering ends when its wait has passed,
// with what came meanwhile.
func TestGatheringWaitsItsTime(t *testing.T) {
	r := startGatherRig(t, Gathering{Wait: 20 * time.Millisecond})
	r.add()
	r.add()
	if n := r.nextDrain(t); n < 1 || n > 2 {
		t.Fatalf("drained %d, want 1 or 2", n)
	}
}

// TestGatheringStopsWithContext: a publisher gathering for an hour returns when its
// context ends.
func TestGatheringStopsWithContext(t *testing.T) {
	r := startGatherRig(t, Gathering{Wait: time.Hour, Settled: func() bool { return false }})
	r.add()
	r.stop() // returns only once run did
}
