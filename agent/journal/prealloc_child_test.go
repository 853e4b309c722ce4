package journal

import "time"

const preallocChildEnv = "FAJOURNAL_PREALLOC_CHILD_DIR"

// preallocChildSegment is the crash child's SegmentSize: small, so that it rotates by
// filling segments as well as by its compactions' checkpoints.
const preallocChildSegment = 16 << 10

// preallocChild runs in a re-executed test binary: eight goroutines Append (durably) and
// print the id of every record whose Append returned, while a compactor checkpoints and
// snapshots every 30 ms. Segments are preallocated (the default). The parent SIGKILLs it.
func preallocChild(dir string) {
	appendChild(dir, childSpec{
		opts: &Options{SegmentSize: preallocChildSegment}, pad: "p", padBase: 20, padStep: 37, compactEvery: 30 * time.Millisecond,
		queue: (*Journal).AppendAsync,
		done:  (*Journal).Wait,
	})
}
