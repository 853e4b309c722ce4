package statestore

import (
	"container/heap"
	"time"
)

// expiryHeap is a min-heap of the entries with a PX deadline, ordered by
// expireAt. Each entry knows its index, so renewing or deleting a key is
// O(log n) and the heap never holds stale items: lease renewals every few
// seconds do not make it grow.
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expireAt < h[j].expireAt }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex = int32(i)
	h[j].heapIndex = int32(j)
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.heapIndex = int32(len(*h))
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.heapIndex = -1
	return e
}

func (h *expiryHeap) remove(e *entry) { heap.Remove(h, int(e.heapIndex)) }

// setExpiry gives e a deadline px milliseconds from now, or none when px is
// 0 (a SET without PX makes the key permanent). Called with s.mu held.
func (s *Store) setExpiry(e *entry, px int64) {
	if px == 0 {
		if e.heapIndex >= 0 {
			s.expiry.remove(e)
		}
		e.expireAt = 0
		return
	}
	e.expireAt = s.now() + px
	if e.heapIndex >= 0 {
		heap.Fix(&s.expiry, int(e.heapIndex))
	} else {
		heap.Push(&s.expiry, e)
	}
	if e.heapIndex == 0 { // the earliest deadline changed
		select {
		case s.wakeSweeper <- struct{}{}:
		default:
		}
	}
}

// sweepLoop is the one goroutine that removes expired keys: it sleeps until
// the earliest deadline in the heap (no goroutine per key, no scan per tick)
// and sends the DELETE notification of each key it removes (wire fact 12:
// lease waiters rely on it).
func (s *Store) sweepLoop() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := s.sweep()
		var fire <-chan time.Time
		if next != 0 {
			timer.Reset(untilDeadline(next, s.now()))
			fire = timer.C
		}
		select {
		case <-s.done:
			return
		case <-fire:
		case <-s.wakeSweeper:
		}
	}
}

// untilDeadline is the sweeper's sleep until the deadline next (Unix ms), at
// least a millisecond. It never overflows: a wrapped negative duration would
// make the sweeper wake every millisecond until the far deadline. maxPX keeps
// new deadlines in range; the clamp also covers a snapshot's.
func untilDeadline(next, now int64) time.Duration {
	ms := next - now
	if next < now { // also a wrapped subtraction
		ms = 0
	}
	return max(time.Duration(min(ms, maxPX))*time.Millisecond, time.Millisecond)
}

// sweep removes every expired key and returns the next deadline (0: none).
func (s *Store) sweep() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for len(s.expiry) > 0 {
		e := s.expiry[0]
		if e.expireAt > now {
			return e.expireAt
		}
		s.notifyDelete(e.key, s.remove(e))
	}
	return 0
}
