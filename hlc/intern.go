package hlc

import (
	"hash/maphash"
	"math/rand/v2"
	"sync/atomic"
)

// The node id intern table lets Parse return a string Node without allocating in steady state.
//
// A peer's node id repeats on every request (a client's id, "StateStore" on every response), so
// a small cache of recently parsed ids turns almost every Parse into a hash and a compare. The
// table is fixed: internSlots slots of one string each, ids longer than internMaxLen bytes are
// never cached, so it holds at most 256 × 64 bytes of text however many distinct ids arrive.
// A miss allocates the string (as string(b) would) and evicts whatever shared its slot; with
// more live peers than slots, Parse degrades to one allocation per call, never to unbounded
// memory. Slots are atomic pointers: lookups take no lock, and a lost race only costs an
// allocation. The hash seed is random per process, so peers cannot aim ids at one slot.
const (
	internSlots  = 256 // power of two
	internMaxLen = 64
)

var (
	internSeed  = maphash.MakeSeed()
	internTable [internSlots]atomic.Pointer[string]
)

// internNode returns string(b), from the table when it holds it.
func internNode(b []byte) string {
	if len(b) > internMaxLen {
		return string(b)
	}
	h := maphash.Bytes(internSeed, b)
	// Two candidate slots (bits from both halves of the hash) so that two busy ids which
	// collide on one slot do not evict each other on every call.
	i, j := h&(internSlots-1), (h>>32)&(internSlots-1)
	pi := internTable[i].Load()
	if pi != nil && *pi == string(b) { // the compiler compares without converting
		return *pi
	}
	pj := internTable[j].Load()
	if pj != nil && *pj == string(b) {
		return *pj
	}
	s := string(b)
	switch {
	case pi == nil:
		internTable[i].Store(&s)
	case pj == nil:
		internTable[j].Store(&s)
	case rand.Uint32()&1 == 0:
		// Both taken: evict one at random. With a fixed choice (a hash bit), two busy ids
		// whose chosen slots coincide evict each other on every call forever; a global
		// alternation still locks step with a fixed calling order (three hot ids parsed in
		// turn flip it every round; TestInternChurn). A random choice lets colliding ids
		// settle into slots the others do not want.
		internTable[i].Store(&s)
	default:
		internTable[j].Store(&s)
	}
	return s
}
