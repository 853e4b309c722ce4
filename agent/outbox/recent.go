package outbox

import "hash/maphash"

// recentCap is part of the table's definition (replay must forget the same ids), so it is
// a constant, not an option.
const recentCap = 8192

// recentIDs remembers the ids of the last recentCap messages that left the table (dedupe).
// A ring holds them in the order they came; a hash set of ring positions finds them: an
// open-addressing table with tags like itemIndex's, whose entry is a 16-bit ring position.
// With the ring full that is 16,384 slots of 3 bytes, 6 bytes an id, a fraction of what a
// map[string]struct{} costs an id. A forgotten id leaves a tombstone (the ring forgets one
// id for each it takes, so deletions are as frequent as insertions); the set is rebuilt
// from the ring, half full, once entries and tombstones fill 3/4 of it.
//
// The ids' bytes are cut from chunks like the items' (blobs.go): they are remembered as
// messages leave, which during an intake burst (the superseded ones) would put them, one
// allocation each, among the burst's short-lived ids of the same size class, in spans left
// mostly empty. The ring forgets them in the order they came, so a chunk is left to the GC
// once its last id was forgotten: they need no compaction (the arena's counts are unused).
type recentIDs struct {
	ring  []string // ring[pos] is the oldest once the ring is full
	pos   int
	slots []uint16 // ring position + 1; 0 in an empty slot or a tombstone
	tags  []uint8  // 0: empty, tombstone, else tagOf the id's hash
	used  int      // slots not empty: entries and tombstones
	bytes blobArena
}

const tombstone = 1 // a tag no id has: tagOf sets the top bit

// The positions must fit the slots.
var _ [0xffff - recentCap]struct{}

func (r *recentIDs) has(id string) bool {
	i, _ := r.find(id)
	return i >= 0
}

// find returns id's slot, or -1, and the hash of id.
func (r *recentIDs) find(id string) (int, uint64) {
	h := maphash.String(indexSeed, id)
	if len(r.slots) == 0 {
		return -1, h
	}
	mask := len(r.slots) - 1
	tag := tagOf(h)
	for i := int(h) & mask; r.tags[i] != 0; i = (i + 1) & mask {
		if r.tags[i] == tag && r.ring[r.slots[i]-1] == id {
			return i, h
		}
	}
	return -1, h
}

// add remembers id, forgetting the oldest id when the ring is full.
func (r *recentIDs) add(id string) {
	i, h := r.find(id)
	if i >= 0 {
		return
	}
	id = r.bytes.clone(id) // do not pin a message's blob (or a replay buffer)
	p := len(r.ring)
	if p < recentCap {
		r.ring = append(r.ring, id)
	} else {
		p = r.pos
		old, _ := r.find(r.ring[p])
		r.slots[old], r.tags[old] = 0, tombstone
		r.ring[p] = id
		r.pos = (p + 1) % recentCap
	}
	if (r.used+1)*4 > len(r.slots)*3 {
		r.rebuild()
	} else {
		r.insert(p, h)
	}
}

// insert files ring position p, whose id (not in the set) hashes to h, in the first empty
// slot or tombstone of its probe sequence.
func (r *recentIDs) insert(p int, h uint64) {
	mask := len(r.slots) - 1
	i := int(h) & mask
	for r.tags[i] > tombstone {
		i = (i + 1) & mask
	}
	if r.tags[i] == 0 {
		r.used++
	}
	r.slots[i], r.tags[i] = uint16(p+1), tagOf(h)
}

// rebuild files the whole ring in a set at most half full, without tombstones.
func (r *recentIDs) rebuild() {
	size := 8
	for len(r.ring)*2 > size {
		size *= 2
	}
	r.slots, r.tags, r.used = make([]uint16, size), make([]uint8, size), 0
	for p, id := range r.ring {
		r.insert(p, maphash.String(indexSeed, id))
	}
}

// list lists the remembered ids, oldest first.
func (r *recentIDs) list() []string {
	out := make([]string, 0, len(r.ring))
	out = append(out, r.ring[r.pos:]...)
	return append(out, r.ring[:r.pos]...)
}
