package memtrim

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// minFree is the free, still resident heap below which a release is not worth a full
// collection.
const minFree = 256 << 10

// Release describes one release by QuietRelease.
type Release struct {
	Free     uint64 // free heap still resident before the release
	Released uint64 // how much of the heap was returned to the kernel by it
}

// QuietRelease returns free heap to the kernel when the process goes quiet after
// allocating. Stop ends it.
type QuietRelease struct {
	after     time.Duration
	onRelease func(Release)

	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	// ownCycle is the GC count right after the last release: the collection that
	// FreeOSMemory runs must not arm the timer again.
	ownCycle uint64
	samples  []metrics.Sample
}

// StartQuietRelease starts watching garbage collections: once after seconds pass without
// one following a collection, free heap is released (if there is at least 256 KiB of it)
// and onRelease, if not nil, is called.
func StartQuietRelease(after time.Duration, onRelease func(Release)) *QuietRelease {
	q := &QuietRelease{
		after:     after,
		onRelease: onRelease,
		samples: []metrics.Sample{
			{Name: "/gc/cycles/total:gc-cycles"},
			{Name: "/memory/classes/heap/free:bytes"},
			{Name: "/memory/classes/heap/released:bytes"},
		},
	}
	q.timer = time.AfterFunc(time.Hour, q.release)
	q.timer.Stop()
	q.watch()
	return q
}

// Stop ends the watch; a release already running finishes.
func (q *QuietRelease) Stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	q.timer.Stop()
}

// sentinel is collected by the next garbage collection; its cleanup is how QuietRelease
// learns that one happened. It holds a pointer so the tiny allocator cannot batch it with
// live objects.
type sentinel struct{ _ *byte }

func (q *QuietRelease) watch() {
	s := &sentinel{}
	runtime.AddCleanup(s, func(q *QuietRelease) { q.collected() }, q)
}

// collected runs after each garbage collection, on the runtime's cleanup goroutine.
func (q *QuietRelease) collected() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return
	}
	q.watch()
	metrics.Read(q.samples[:1])
	if q.samples[0].Value.Uint64() > q.ownCycle {
		q.timer.Reset(q.after)
	}
}

func (q *QuietRelease) release() {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		return
	}
	metrics.Read(q.samples)
	free, releasedBefore := q.samples[1].Value.Uint64(), q.samples[2].Value.Uint64()
	if free < minFree {
		q.mu.Unlock()
		return
	}
	// The collection FreeOSMemory runs is the next one at the earliest; its cleanup may run
	// before FreeOSMemory returns.
	q.ownCycle = q.samples[0].Value.Uint64() + 1
	q.mu.Unlock()

	debug.FreeOSMemory()

	q.mu.Lock()
	metrics.Read(q.samples)
	q.ownCycle = q.samples[0].Value.Uint64()
	releasedAfter := q.samples[2].Value.Uint64()
	q.mu.Unlock()
	if q.onRelease != nil {
		var gained uint64
		if releasedAfter > releasedBefore {
			gained = releasedAfter - releasedBefore
		}
		q.onRelease(Release{Free: free, Released: gained})
	}
}
