package outbox

import "unsafe"

// The ids of the items in the table (item.blob: message id, task id and person id, one
// after another), and their last errors (table.errs), are cut from chunks of
// blobChunkSize bytes rather than allocated one by one. A queued task's ids are ~50 bytes,
// which the allocator rounds up to 64; allocated one by one during an intake burst, between
// the agent's short-lived objects of the same size class, they would leave the spans that
// hold them partly empty once those are collected (heap fragmentation), and each would be
// one more object for the GC. From chunks, ids take their own length in a few large objects.
//
// A chunk is never written where a blob was cut from it, only past its end, and never
// reused: the strings that item.id and friends return point into it and stay valid as long
// as anything holds them (the GC keeps the chunk). Once the blobs of items that left the
// table (dead) outnumber a quarter of those of the items in it (live) and blobMinDead, the
// live ones are copied into fresh chunks (compactBlobs) and the old chunks are left to the
// GC. The chunks hold at most 1.25 times the live ids plus blobMinDead, and a copy moves at
// most 4 bytes for each that died since the previous one, so its cost (under the outbox's
// lock; BenchmarkBlobCompaction, docs/benchmarks.md) is shared among the ~live/4 commands
// that finished since the previous one. A quarter rather than a half keeps the dead bytes
// of an intake burst's superseded commands from lingering in the chunks.
const (
	blobChunkSize = 8 << 10
	blobOwnSize   = 256      // a blob this long or longer gets an allocation of its own
	blobMinDead   = 32 << 10 // dead bytes below which the chunks are never compacted
)

// blobArena cuts blobs from chunks.
type blobArena struct {
	chunk []byte // being filled: len is used, cap its size
	live  int    // bytes of the chunks' blobs whose items are in the table
	dead  int    // bytes of the chunks' blobs whose items left since the last compaction
}

// alloc returns n bytes to fill: the item's blob. a may be nil (tests): an allocation of
// their own.
func (a *blobArena) alloc(n int) []byte {
	if n == 0 {
		return nil
	}
	if a == nil || n >= blobOwnSize {
		return make([]byte, n)
	}
	if cap(a.chunk)-len(a.chunk) < n {
		a.chunk = make([]byte, 0, blobChunkSize)
	}
	used := len(a.chunk)
	a.chunk = a.chunk[:used+n]
	a.live += n
	return a.chunk[used : used+n : used+n]
}

// newItem copies id, task and person into a blob: they may alias a replay buffer, which
// the journal reuses for the next segment.
func newItem(a *blobArena, id, task, person string) *item {
	b := a.alloc(len(id) + len(task) + len(person))
	n := copy(b, id)
	n += copy(b[n:], task)
	copy(b[n:], person)
	return &item{
		blob:  unsafe.SliceData(b),
		idLen: uint16(len(id)), taskLen: uint16(len(task)), personLen: uint16(len(person)),
	}
}

// blobLen is the length of it's blob.
func (it *item) blobLen() int { return int(it.idLen) + int(it.taskLen) + int(it.personLen) }

// clone returns a copy of s cut from the chunks (one of its own when long).
func (a *blobArena) clone(s string) string {
	b := a.alloc(len(s))
	if len(b) == 0 {
		return ""
	}
	copy(b, s)
	return unsafe.String(&b[0], len(b))
}

// left accounts for n bytes from alloc that are no longer used.
func (a *blobArena) left(n int) {
	if n > 0 && n < blobOwnSize {
		a.live -= n
		a.dead += n
	}
}

// maybeCompactBlobs compacts the chunks when their dead bytes call for it.
func (t *table) maybeCompactBlobs() {
	if a := &t.blobs; a.dead >= blobMinDead && a.dead > a.live/4 {
		t.compactBlobs()
	}
}

// compactBlobs copies the blobs and errors of the items in the table into fresh chunks.
func (t *table) compactBlobs() {
	a := &t.blobs
	*a = blobArena{}
	for _, it := range t.items.slots { // not all(): that cuts each key from its blob
		if it != nil {
			it.blob = unsafe.StringData(a.clone(unsafe.String(it.blob, it.blobLen())))
		}
	}
	for it, e := range t.errs {
		t.errs[it] = a.clone(e)
	}
}
