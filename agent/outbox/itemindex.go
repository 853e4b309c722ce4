package outbox

import (
	"hash/maphash"
	"iter"
)

// itemIndex is an open-addressing hash set of items keyed by a string each item carries
// (key: its id, or its person): an entry costs one pointer slot and a tag byte, the key
// being the item's own. It holds the table's items by id and each device's coalescing
// index by person, in less memory a queued task than a map[string]*item and a per-device
// map[string]schedEntry (BenchmarkMemoryPerTask, docs/benchmarks.md). Linear probing;
// deletion shifts later entries back, so there are no tombstones.
//
// Each slot has a tag: 0 when empty, else 7 bits of its key's hash with the top bit set. A
// probe compares tags and looks at an item (a pointer to follow, its key to cut from the
// blob, a string comparison) only when they match, so long probe runs cost a byte each:
// the table fills to 3/4 before it doubles (without tags, 3/4 would make misses slow, and
// 1/2 would take up to four slots an entry).
// It halves below 1/8 full, never below 8 slots. Not safe for put or del while iterating.
type itemIndex struct {
	slots []*item // len 0 or a power of two
	tags  []uint8 // len(slots): 0 empty, else tagOf the entry's key hash
	n     int
	key   func(*item) string
}

func byID() itemIndex     { return itemIndex{key: (*item).id} }
func byPerson() itemIndex { return itemIndex{key: (*item).person} }

var indexSeed = maphash.MakeSeed()

// tagOf is a slot's tag for hash h: bits the home slot does not use (the top 7, for any
// table below 2^57 slots), never 0.
func tagOf(h uint64) uint8 { return uint8(h>>57) | 0x80 }

// len is the number of entries.
func (x *itemIndex) len() int { return x.n }

// find returns key's slot, or -1, and the hash of key.
func (x *itemIndex) find(key string) (int, uint64) {
	h := maphash.String(indexSeed, key)
	if x.n == 0 {
		return -1, h
	}
	mask := len(x.slots) - 1
	tag := tagOf(h)
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch x.tags[i] {
		case 0:
			return -1, h
		case tag:
			if x.key(x.slots[i]) == key {
				return i, h
			}
		}
	}
}

// get returns the entry for key, or nil.
func (x *itemIndex) get(key string) *item {
	if i, _ := x.find(key); i >= 0 {
		return x.slots[i]
	}
	return nil
}

// put makes it the entry for its key, replacing the one there.
func (x *itemIndex) put(it *item) {
	i, h := x.find(x.key(it))
	if i >= 0 {
		x.slots[i] = it
		return
	}
	if (x.n+1)*4 > len(x.slots)*3 {
		x.resize(max(8, len(x.slots)*2))
	}
	x.insert(it, h)
}

// insert adds it, whose key (hashing to h) is not in the index, to an index with room.
func (x *itemIndex) insert(it *item, h uint64) {
	mask := len(x.slots) - 1
	i := int(h) & mask
	for x.tags[i] != 0 {
		i = (i + 1) & mask
	}
	x.slots[i], x.tags[i] = it, tagOf(h)
	x.n++
}

// del removes key's entry, if any.
func (x *itemIndex) del(key string) {
	i, _ := x.find(key)
	if i < 0 {
		return
	}
	// Backward-shift deletion: move up every later entry of the run whose home is not in
	// (i, j], so that no lookup meets an empty slot before its key.
	mask := len(x.slots) - 1
	for j := (i + 1) & mask; x.tags[j] != 0; j = (j + 1) & mask {
		h := int(maphash.String(indexSeed, x.key(x.slots[j]))) & mask
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			x.slots[i], x.tags[i] = x.slots[j], x.tags[j]
			i = j
		}
	}
	x.slots[i], x.tags[i] = nil, 0
	x.n--
	if len(x.slots) > 8 && x.n*8 < len(x.slots) {
		// Shrink, but keep 8 slots: a device whose only queued command leaves would
		// otherwise allocate them again for its next one.
		x.resize(len(x.slots) / 2)
	}
}

func (x *itemIndex) resize(size int) {
	old := x.slots
	x.slots, x.tags, x.n = make([]*item, size), make([]uint8, size), 0
	for _, it := range old {
		if it != nil {
			x.insert(it, maphash.String(indexSeed, x.key(it)))
		}
	}
}

// all yields every entry with its key, in no particular order.
func (x *itemIndex) all() iter.Seq2[string, *item] {
	return func(yield func(string, *item) bool) {
		for _, it := range x.slots {
			if it != nil && !yield(x.key(it), it) {
				return
			}
		}
	}
}
