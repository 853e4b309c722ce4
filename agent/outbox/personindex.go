package outbox

import "hash/maphash"

// personIndex maps a person id to that person's latest Scheduled item on one device (the
// coalescing index). It is an open-addressing hash set of items keyed by their own
// person(): an entry costs one pointer slot, where a map[string]schedEntry cost a string
// key, a two-word value and the map's overhead (~80 bytes a queued task, measured with
// BenchmarkMemoryPerTask). Linear probing; deletion shifts later entries back, so there are
// no tombstones; the table doubles above 3/4 full and halves below 1/8.
type personIndex struct {
	slots []*item // len 0 or a power of two
	n     int
}

var personSeed = maphash.MakeSeed()

func (x *personIndex) home(person string) int {
	return int(maphash.String(personSeed, person) & uint64(len(x.slots)-1))
}

// get returns the entry for person, or nil.
func (x *personIndex) get(person string) *item {
	if x.n == 0 {
		return nil
	}
	mask := len(x.slots) - 1
	for i := x.home(person); ; i = (i + 1) & mask {
		it := x.slots[i]
		if it == nil {
			return nil
		}
		if it.person() == person {
			return it
		}
	}
}

// put makes it the entry for its person, replacing the one there.
func (x *personIndex) put(it *item) {
	if (x.n+1)*4 > len(x.slots)*3 {
		x.resize(max(8, len(x.slots)*2))
	}
	mask := len(x.slots) - 1
	p := it.person()
	for i := x.home(p); ; i = (i + 1) & mask {
		cur := x.slots[i]
		if cur == nil {
			x.slots[i] = it
			x.n++
			return
		}
		if cur.person() == p {
			x.slots[i] = it
			return
		}
	}
}

// del removes person's entry, if any.
func (x *personIndex) del(person string) {
	if x.n == 0 {
		return
	}
	mask := len(x.slots) - 1
	i := x.home(person)
	for ; ; i = (i + 1) & mask {
		it := x.slots[i]
		if it == nil {
			return
		}
		if it.person() == person {
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
		h := x.home(it.person())
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			x.slots[i] = it
			i = j
		}
	}
	x.slots[i] = nil
	x.n--
	switch {
	case x.n == 0:
		x.slots = nil // let a drained device's table go
	case len(x.slots) > 8 && x.n*8 < len(x.slots):
		x.resize(len(x.slots) / 2)
	}
}

func (x *personIndex) resize(size int) {
	old := x.slots
	x.slots, x.n = make([]*item, size), 0
	for _, it := range old {
		if it != nil {
			x.put(it)
		}
	}
}

// each calls fn for every entry, in no particular order.
func (x *personIndex) each(fn func(*item)) {
	for _, it := range x.slots {
		if it != nil {
			fn(it)
		}
	}
}
