// Package memtrim gives memory the agent no longer uses back to the kernel, so that a
// gateway's resident set reflects what the agent needs now rather than its busiest moment.
//
// Two things are released:
//
//   - The pages of the executable that only start-up touched. ReleaseImage drops this
//     process's mappings of the read-only parts of its own binary (code, read-only data,
//     the function table); pages that are used again fault back in from the page cache at
//     the cost of a minor fault. Call it once, after start-up.
//   - Heap the runtime keeps after a burst. The Go runtime returns free heap to the kernel
//     slowly, and a burst (10,000 tasks arriving at once) leaves megabytes free but
//     resident. QuietRelease watches garbage collections; when none has happened for a
//     while after one did, the process has gone quiet, and it runs debug.FreeOSMemory,
//     again while that still shrinks goroutine stacks (a collection halves a stack at most
//     once, so a stack a burst grew to 32 KiB takes two or three to come back down).
//     It then drops the image's pages again (ReleaseImage): the burst faulted in code and
//     data that quiet work does not use (the intake's parser, the journals' writers), and
//     they would otherwise stay mapped until the process ends. With 64 terminals and
//     10,000 queued tasks that is about 1 MB of the steady resident set
//     (docs/benchmarks.md, "Steady RSS back under 15 MB").
//
// Tutorial:
//
//	released, err := memtrim.ReleaseImage() // when the agent is ready; QuietRelease repeats it
//	q := memtrim.StartQuietRelease(5*time.Second, func(r memtrim.Release) {
//		log.Debug("memory released", "bytes", r.Released)
//	})
//	defer q.Stop()
//
// QuietRelease has no ticker: it waits on garbage collections, which only happen when
// something allocates, so an idle agent is not woken (the runtime's own forced collection
// every two minutes arms it once, and the release is skipped when there is nothing to give
// back). After a release (or a skipped one) it looks at the heap once more: a process that
// goes on allocating a little, too little to be collected for minutes, is collected once
// its heap has grown by 64 KiB (and what that frees is given back); otherwise its garbage would
// take fresh pages until the heap doubled. It looks again, backing off up to two minutes,
// while the heap grows by less, and stops when it has not grown at all.
//
// Caveats: ReleaseImage is Linux-only (elsewhere it does nothing and reports 0). It
// reads /proc/self/smaps and leaves alone any read-only segment holding copy-on-write
// pages (RELRO data a PIE or cgo build relocated at start-up): dropping those would bring
// back unrelocated bytes. The pages
// it drops stay in the page cache, shared and clean, until the kernel needs the memory;
// what it changes is that they are no longer mapped by this process, so the kernel may
// reclaim them first and RSS counts only code in use. FreeOSMemory runs a full collection
// (milliseconds for a heap of this size); QuietRelease runs it at most five times per quiet
// spell, never under load.
package memtrim
