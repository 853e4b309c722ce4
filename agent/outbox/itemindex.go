package outbox

import (
	"hash/maphash"
	"iter"
)

// itemIndex is an open-addressing hash set of items keyed by a string each item carries
// (key: its id, or its person): an entry costs one pointer slot, the key being the item's
// own. It holds the table's items by id and each device's coalescing index by person;
// replacing the map[string]*item and the per-device map[string]schedEntry with it took
// BenchmarkMemoryPerTask from 268 to 190 bytes a queued task beyond its payload. Linear
// probing; deletion shifts later entries back, so there are no tombstones. The table
// doubles above 1/2 full (short probes: at 3/4, misses made replay 25 % slower) and halves
// below 1/8, never below 8 slots. Not safe for put or del while iterating.
type itemIndex struct {
	slots []*item // len 0 or a power of two
	n     int
	key   func(*item) string
}

func byID() itemIndex     { return itemIndex{key: (*item).id} }
func byPerson() itemIndex { return itemIndex{key: (*item).person} }

var indexSeed = maphash.MakeSeed()

func (x *itemIndex) home(key string) int {
	return int(maphash.String(indexSeed, key) & uint64(len(x.slots)-1))
}

// len is the number of entries.
func (x *itemIndex) len() int { return x.n }

// get returns the entry for key, or nil.
func (x *itemIndex) get(key string) *item {
	if x.n == 0 {
		return nil
	}
	mask := len(x.slots) - 1
	for i := x.home(key); ; i = (i + 1) & mask {
		it := x.slots[i]
		if it == nil {
			return nil
		}
		if x.key(it) == key {
			return it
		}
	}
}

// put makes it the entry for its key, replacing the one there.
func (x *itemIndex) put(it *item) {
	if (x.n+1)*2 > len(x.slots) {
		x.resize(max(8, len(x.slots)*2))
	}
	mask := len(x.slots) - 1
	k := x.key(it)
	for i := x.home(k); ; i = (i + 1) & mask {
		cur := x.slots[i]
		if cur == nil {
			x.slots[i] = it
			x.n++
			return
		}
		if x.key(cur) == k {
			x.slots[i] = it
			return
		}
	}
}

// del removes key's entry, if any.
func (x *itemIndex) del(key string) {
	if x.n == 0 {
		return
	}
	mask := len(x.slots) - 1
	i := x.home(key)
	for ; ; i = (i + 1) & mask {
		it := x.slots[i]
		if it == nil {
			return
		}
		if x.key(it) == key {
			break
		}
	}
	// Backward-shift deletion: move up every later entry of the run whose home is not in
	// (i, j], so that no lookup meets an empty slot before its key.
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		it := x.slots[j]
		if it == nil {
			break
		}
		h := x.home(x.key(it))
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			x.slots[i] = it
			i = j
		}
	}
	x.slots[i] = nil
	x.n--
	if len(x.slots) > 8 && x.n*8 < len(x.slots) {
		// Shrink, but keep 8 slots: a device whose only queued command leaves would
		// otherwise allocate them again for its next one.
		x.resize(len(x.slots) / 2)
	}
}

func (x *itemIndex) resize(size int) {
	old := x.slots
	x.slots, x.n = make([]*item, size), 0
	for _, it := range old {
		if it != nil {
			x.put(it)
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
