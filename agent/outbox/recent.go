package outbox

import "hash/maphash"

// recentCap is part of the table's definition (replay must forget the same ids), so it is
// a constant, not an option.
const recentCap = 8192

// recentIDs remembers the ids of the last recentCap messages that left the table (dedupe).
// A ring holds them in the order they came; a hash set of ring positions finds them. The
// set is an open-addressing table like itemIndex (tags, 3/4 full, backward-shift
// deletion), whose entry is a 16-bit ring position: with the ring full, 16,384 slots of 3
// bytes, where a map[string]struct{} took ~47 bytes an id (~380 KB for 8,192). The ids'
// bytes are cut from chunks like the items' (blobs.go): remembered as messages leave, which
// during an intake burst (the superseded ones) put them, one allocation each, among the
// burst's short-lived ids of the same size class, and the spans they kept were mostly
// empty. The ring forgets them in the order they came, so a chunk is left to the GC once
// its last id was forgotten: they need no compaction (the arena's counts are not used).
type recentIDs struct {
	ring  []string // ring[pos] is the oldest once the ring is full
	pos   int
	slots []uint16 // 0: empty, else ring position + 1
	tags  []uint8  // as itemIndex's
	n     int
	bytes blobArena
}

// The positions must fit the slots.
var _ [0xffff - recentCap]struct{}

func (r *recentIDs) has(id string) bool {
	i, _ := r.find(id)
	return i >= 0
}

// find returns id's slot, or -1, and the hash of id.
func (r *recentIDs) find(id string) (int, uint64) {
	h := maphash.String(indexSeed, id)
	if r.n == 0 {
		return -1, h
	}
	mask := len(r.slots) - 1
	tag := tagOf(h)
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch r.tags[i] {
		case 0:
			return -1, h
		case tag:
			if r.ring[r.slots[i]-1] == id {
				return i, h
			}
		}
	}
}

// add remembers id, forgetting the oldest id when the ring is full.
func (r *recentIDs) add(id string) {
	i, h := r.find(id)
	if i >= 0 {
		return
	}
	id = r.bytes.clone(id) // do not pin a message's blob (or a replay buffer)
	var p int
	if len(r.ring) < recentCap {
		p = len(r.ring)
		r.ring = append(r.ring, id)
		if (r.n+1)*4 > len(r.slots)*3 {
			r.resize(max(8, len(r.slots)*2))
		}
	} else {
		p = r.pos
		r.del(p)
		r.ring[p] = id
		r.pos = (p + 1) % recentCap
	}
	r.insert(p, h)
}

// insert adds ring position p, whose id hashes to h.
func (r *recentIDs) insert(p int, h uint64) {
	mask := len(r.slots) - 1
	i := int(h) & mask
	for r.tags[i] != 0 {
		i = (i + 1) & mask
	}
	r.slots[i], r.tags[i] = uint16(p+1), tagOf(h)
	r.n++
}

// del removes ring position p from the set.
func (r *recentIDs) del(p int) {
	i, _ := r.find(r.ring[p])
	if i < 0 {
		return
	}
	mask := len(r.slots) - 1
	for j := (i + 1) & mask; r.tags[j] != 0; j = (j + 1) & mask {
		h := int(maphash.String(indexSeed, r.ring[r.slots[j]-1])) & mask
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			r.slots[i], r.tags[i] = r.slots[j], r.tags[j]
			i = j
		}
	}
	r.slots[i], r.tags[i] = 0, 0
	r.n--
}

func (r *recentIDs) resize(size int) {
	old := r.slots
	r.slots, r.tags, r.n = make([]uint16, size), make([]uint8, size), 0
	for _, s := range old {
		if s != 0 {
			r.insert(int(s-1), maphash.String(indexSeed, r.ring[s-1]))
		}
	}
}

// list lists the remembered ids, oldest first.
func (r *recentIDs) list() []string {
	out := make([]string, 0, len(r.ring))
	out = append(out, r.ring[r.pos:]...)
	return append(out, r.ring[:r.pos]...)
}
