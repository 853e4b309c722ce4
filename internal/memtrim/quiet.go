package memtrim

import (
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// minFree is the free, still resident heap below which a release is not worth a full
// collection.
const minFree = 256 << 10

// minGrowth is how much a slowly allocating process's heap must have grown since a release
// (with no collection since) for QuietRelease to collect again (watchGrowth).
const minGrowth = 64 << 10

// maxGrowthWait bounds the backoff of watchGrowth's checks while the heap grows by less
// than minGrowth between two of them.
const maxGrowthWait = 2 * time.Minute

// maxStackRounds bounds the extra collections a release runs while they still shrink
// goroutine stacks: a stack grown to 64 KiB needs five halvings to reach 2 KiB.
const maxStackRounds = 4

// Release describes one release by QuietRelease.
type Release struct {
	Free     uint64 // free heap still resident before the release
	Released uint64 // how much of the heap was returned to the kernel by it
	// Image is the address space of the binary's read-only segments advised away after
	// the heap (ReleaseImage): the code and data the burst touched (the intake's parser,
	// the journals' writers) are resident again only once used. ImageErr is ReleaseImage's
	// error, if any; the heap's release stands either way.
	Image    int64
	ImageErr error
}

// QuietRelease returns free heap to the kernel when the process goes quiet after
// allocating. Stop ends it.
type QuietRelease struct {
	after     time.Duration
	onRelease func(Release)

	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	growth  *time.Timer // watchGrowth's next check; nil when none is armed
}

// StartQuietRelease starts watching garbage collections: once after seconds pass without
// one following a collection, free heap is released (if there is at least 256 KiB of it)
// and onRelease, if not nil, is called.
func StartQuietRelease(after time.Duration, onRelease func(Release)) *QuietRelease {
	q := &QuietRelease{
		after:     after,
		onRelease: onRelease,
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
	if q.growth != nil {
		q.growth.Stop()
	}
}

// sentinel is collected by the next garbage collection; its cleanup is how QuietRelease
// learns that one happened. It holds a pointer so the tiny allocator cannot batch it with
// live objects.
type sentinel struct{ _ *byte }

func (q *QuietRelease) watch() {
	s := &sentinel{}
	runtime.AddCleanup(s, func(q *QuietRelease) { q.collected() }, q)
}

// collected runs after each garbage collection, on the runtime's cleanup goroutine. The
// collection a release runs arms the timer too; the release after it finds nothing free
// and does nothing, so a release does not set off another.
func (q *QuietRelease) collected() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return
	}
	q.watch()
	q.timer.Reset(q.after)
}

// release reads the heap with runtime.ReadMemStats, not runtime/metrics: that package's
// tables would add to the ARM binary (docs/benchmarks.md, "Binary size"), and this runs at
// most once per quiet spell.
func (q *QuietRelease) release() {
	q.mu.Lock()
	stopped := q.stopped
	q.mu.Unlock()
	if stopped {
		return
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	free, releasedBefore := m.HeapIdle-m.HeapReleased, m.HeapReleased
	if free < minFree {
		q.watchGrowth(m.HeapAlloc, m.NumGC, q.after)
		return
	}
	debug.FreeOSMemory()
	runtime.ReadMemStats(&m)
	// A collection halves a goroutine's stack at most once, so stacks a burst grew to 32
	// KiB need more rounds to come back to what their parked goroutines use. Stop as soon
	// as a round gains nothing: each is a full collection.
	for range maxStackRounds {
		before := m.StackInuse
		debug.FreeOSMemory()
		runtime.ReadMemStats(&m)
		if m.StackInuse >= before {
			break
		}
	}
	// The burst that left free heap also ran code that quiet work does not: drop the
	// image's pages too, as after start-up. They stay in the page cache; those the quiet
	// process uses fault back in (minor faults).
	image, imageErr := ReleaseImage()
	q.watchGrowth(m.HeapAlloc, m.NumGC, q.after)
	if q.onRelease != nil {
		var gained uint64
		if m.HeapReleased > releasedBefore {
			gained = m.HeapReleased - releasedBefore
		}
		q.onRelease(Release{Free: free, Released: gained, Image: image, ImageErr: imageErr})
	}
}

// watchGrowth looks at the heap again after wait, when a release has run (or found
// nothing to give back): if it has grown by minGrowth since (heapAlloc, after collection
// numGC) with no collection meanwhile, it collects and returns the free heap to the
// kernel (debug.FreeOSMemory; the collection arms the next release as any does). A
// process that keeps allocating a little (terminals' heartbeats) would otherwise not be
// collected for minutes, until its heap doubled, and its garbage would take fresh pages
// all that time, so resident memory would creep up (docs/benchmarks.md). While the heap
// grows by less, it looks again after twice the wait, up
// to maxGrowthWait; it stops when the heap has not grown at all, or a collection came
// first (that one arms the release), so an idle process is not woken again.
func (q *QuietRelease) watchGrowth(heapAlloc uint64, numGC uint32, wait time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return
	}
	if q.growth != nil {
		q.growth.Stop()
	}
	q.growth = time.AfterFunc(wait, func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		switch {
		case m.NumGC != numGC || m.HeapAlloc <= heapAlloc:
			// a collection came first (and armed the release), or nothing happened
		case m.HeapAlloc-heapAlloc >= minGrowth:
			// Collect and give back at once what that frees (garbage, and the stacks
			// it shrinks): the process is quiet enough, it has not been collected
			// for a whole wait.
			debug.FreeOSMemory()
		default:
			q.watchGrowth(heapAlloc, numGC, min(2*wait, maxGrowthWait))
		}
	})
}
