package whitelist

import (
	"hash/maphash"
	"slices"
	"strings"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// The in-memory desired state, shared by the live store and replay: records interned by
// content, terminals' lists as sequences of interned chunks of record references. Nothing
// here does I/O or takes a lock; the Store calls it under its mutex.

// excluded marks a member whose record the terminal refused: it stays in the list (so that
// a later Set or Include can bring it back, and a snapshot keeps the fact) but is not in
// the desired list, its count or its digest.
const excluded = 1 << 31

// chunkMask makes a member a chunk boundary when the seeded hash of its id has these bits
// clear: chunks of 64 members on average.
const chunkMask = 63

// recMeta is an interned record. A free slot has data "".
type recMeta struct {
	data  string   // the record's full form (appendFields): immutable
	rev   face.Rev // its revision
	users uint32   // chunks that refer to it
	next  uint32   // the next record with the same rev, index+1 (0: none)
}

// chunk is an immutable run of members in id order, shared by every terminal whose list
// has the same run (users of them). Its end is where the list's content says: after a
// member whose id is a boundary, or at the list's end, so equal lists are cut into equal
// chunks whatever their history.
type chunk struct {
	refs  []uint32 // record indexes, | excluded
	sum   uint64
	users int32
	next  *chunk // the next chunk with the same sum
}

// terminal is one terminal's list.
type terminal struct {
	chunks  []*chunk
	members int         // members, excluded ones included
	count   int         // members not excluded: the desired list's length
	digest  face.Digest // over the members not excluded
	whole   bool        // a Replace set the whole list
}

type state struct {
	seed    maphash.Seed
	mask    uint64 // chunkMask; tests make chunks small
	recs    []recMeta
	free    []uint32
	live    int                 // records in use
	byRev   map[face.Rev]uint32 // rev → the first record with it, index+1
	chunks  map[uint64]*chunk
	nchunks int
	terms   map[string]*terminal
	serials map[string]string // device → the serial it reported last (serial.go)
	fresh   []uint32          // records interned by the update under way
	scratch []uint32
	enc     []byte
	sets    sets // SetWhitelist tasks (sets.go)
}

func newState() *state {
	return &state{seed: maphash.MakeSeed(), mask: chunkMask, byRev: map[face.Rev]uint32{}, chunks: map[uint64]*chunk{},
		terms: map[string]*terminal{}, serials: map[string]string{}, sets: newSets()}
}

func (st *state) id(ref uint32) string { return fieldsID(st.recs[ref&^excluded].data) }

func (st *state) boundary(ref uint32) bool {
	return maphash.String(st.seed, st.id(ref))&st.mask == 0
}

// lookup returns the interned record with content data (and rev), if any, and how many
// records share its rev.
func (st *state) lookup(data []byte, rev face.Rev) (idx uint32, ok bool, sameRev int) {
	for i := st.byRev[rev]; i != 0; i = st.recs[i-1].next {
		sameRev++
		if st.recs[i-1].data == string(data) { // no copy: a comparison
			idx, ok = i-1, true
		}
	}
	return idx, ok, sameRev
}

// intern returns the index of the record with content data, adding it if it is new. A new
// record has no users until a chunk refers to it; endUpdate frees it if none does.
func (st *state) intern(data string, rev face.Rev) uint32 {
	if idx, ok, _ := st.lookup([]byte(data), rev); ok {
		return idx
	}
	var idx uint32
	if n := len(st.free); n > 0 {
		idx, st.free = st.free[n-1], st.free[:n-1]
	} else {
		idx = uint32(len(st.recs))
		st.recs = append(st.recs, recMeta{})
	}
	st.recs[idx] = recMeta{data: data, rev: rev, next: st.byRev[rev]}
	st.byRev[rev] = idx + 1
	st.live++
	st.fresh = append(st.fresh, idx)
	return idx
}

// byRevOnly returns the one record with rev, if exactly one has it.
func (st *state) byRevOnly(rev face.Rev) (uint32, bool) {
	i := st.byRev[rev]
	if i == 0 || st.recs[i-1].next != 0 {
		return 0, false
	}
	return i - 1, true
}

func (st *state) freeRecord(idx uint32) {
	rev := st.recs[idx].rev
	// Unlink idx from its rev chain.
	if head := st.byRev[rev]; head == idx+1 {
		if nx := st.recs[idx].next; nx != 0 {
			st.byRev[rev] = nx
		} else {
			delete(st.byRev, rev)
		}
	} else {
		for i := head; i != 0; i = st.recs[i-1].next {
			if st.recs[i-1].next == idx+1 {
				st.recs[i-1].next = st.recs[idx].next
				break
			}
		}
	}
	st.recs[idx] = recMeta{}
	st.free = append(st.free, idx)
	st.live--
}

// endUpdate frees the records an update interned that no chunk took up.
func (st *state) endUpdate() {
	for _, idx := range st.fresh {
		if r := &st.recs[idx]; r.data != "" && r.users == 0 {
			st.freeRecord(idx)
		}
	}
	st.fresh = st.fresh[:0]
}

func (st *state) sum(refs []uint32) uint64 {
	h := maphash.Comparable(st.seed, len(refs))
	for _, r := range refs {
		h = (h ^ uint64(r)) * 0x9e3779b97f4a7c15
		h ^= h >> 29
	}
	return h
}

// takeChunk returns the interned chunk holding refs (copied if new), with one more user.
func (st *state) takeChunk(refs []uint32) *chunk {
	s := st.sum(refs)
	for c := st.chunks[s]; c != nil; c = c.next {
		if slices.Equal(c.refs, refs) {
			c.users++
			return c
		}
	}
	c := &chunk{refs: slices.Clone(refs), sum: s, users: 1, next: st.chunks[s]}
	st.chunks[s] = c
	st.nchunks++
	for _, r := range refs {
		st.recs[r&^excluded].users++
	}
	return c
}

func (st *state) dropChunk(c *chunk) {
	if c.users--; c.users > 0 {
		return
	}
	if head := st.chunks[c.sum]; head == c {
		if c.next != nil {
			st.chunks[c.sum] = c.next
		} else {
			delete(st.chunks, c.sum)
		}
	} else {
		for p := head; p != nil; p = p.next {
			if p.next == c {
				p.next = c.next
				break
			}
		}
	}
	st.nchunks--
	for _, r := range c.refs {
		idx := r &^ excluded
		if st.recs[idx].users--; st.recs[idx].users == 0 {
			st.freeRecord(idx)
		}
	}
}

// recut replaces t.chunks[lo:hi] by the chunks of members (in id order), cut after every
// boundary. The new chunks are taken before the old ones are dropped, so records in both
// stay interned.
func (st *state) recut(t *terminal, lo, hi int, members []uint32) {
	var cut []*chunk
	start := 0
	for i, r := range members {
		if st.boundary(r) {
			cut = append(cut, st.takeChunk(members[start:i+1]))
			start = i + 1
		}
	}
	if start < len(members) {
		cut = append(cut, st.takeChunk(members[start:]))
	}
	for _, c := range t.chunks[lo:hi] {
		st.dropChunk(c)
	}
	t.chunks = slices.Replace(t.chunks, lo, hi, cut...)
}

// find locates id in t: the chunk and position where it is or would be inserted.
func (st *state) find(t *terminal, id string) (ci, i int, found bool) {
	ci, _ = slices.BinarySearchFunc(t.chunks, id, func(c *chunk, id string) int {
		return strings.Compare(st.id(c.refs[len(c.refs)-1]), id)
	})
	if ci == len(t.chunks) {
		if ci == 0 {
			return 0, 0, false
		}
		return ci - 1, len(t.chunks[ci-1].refs), false
	}
	i, found = slices.BinarySearchFunc(t.chunks[ci].refs, id, func(r uint32, id string) int {
		return strings.Compare(st.id(r), id)
	})
	return ci, i, found
}

// member returns the member of t with id.
func (st *state) member(t *terminal, id string) (uint32, bool) {
	if t == nil {
		return 0, false
	}
	ci, i, found := st.find(t, id)
	if !found {
		return 0, false
	}
	return t.chunks[ci].refs[i], true
}

// put sets (ref != 0 or ok) or deletes (del) the member id of t, touching one chunk (two
// when a deleted boundary joins its chunk to the next).
func (st *state) put(t *terminal, id string, ref uint32, del bool) {
	ci, i, found := st.find(t, id)
	if del && !found {
		return
	}
	var old []uint32
	if ci < len(t.chunks) {
		old = t.chunks[ci].refs
	}
	m := append(st.scratch[:0], old[:i]...)
	hi := min(ci+1, len(t.chunks))
	switch {
	case del:
		m = append(m, old[i+1:]...)
		if i == len(old)-1 && hi < len(t.chunks) {
			m = append(m, t.chunks[hi].refs...)
			hi++
		}
	case found:
		m = append(append(m, ref), old[i+1:]...)
	default:
		m = append(append(m, ref), old[i:]...)
	}
	st.recut(t, ci, hi, m)
	st.scratch = m[:0]
}

// op is a resolved operation of an update.
type op struct {
	kind byte
	id   string
	ref  uint32   // opSet: the interned record
	rev  face.Rev // opExclude, opInclude
	// short: the journal names the record by its rev (opSetRef), as the store held it
	// before the update and no other record has that rev.
	short bool
}

// apply applies an update of one terminal. An update with many operations (a Replace) is
// merged with the list in one pass, its operations in strictly increasing id order; the
// digest follows every change by Toggle.
func (st *state) apply(dev string, whole bool, ops []op) {
	t := st.terms[dev]
	if len(ops) == 1 && ops[0].kind == opForget {
		if t != nil {
			for _, c := range t.chunks {
				st.dropChunk(c)
			}
			delete(st.terms, dev)
		}
		return
	}
	if t == nil {
		t = &terminal{}
		// A copy: dev may share the memory of a whole parsed task message (agent/wire).
		st.terms[strings.Clone(dev)] = t
	}
	if whole {
		t.whole = true
	}
	if len(ops) <= 4 {
		for _, o := range ops {
			old, had := st.member(t, o.id)
			if nw, keep, changed := st.change(t, o, old, had); changed {
				st.put(t, o.id, nw, !keep)
			}
		}
		return
	}
	// Merge the sorted operations with the list.
	out := make([]uint32, 0, t.members+len(ops))
	k := 0
	for _, c := range t.chunks {
		for _, r := range c.refs {
			id := st.id(r)
			for ; k < len(ops) && ops[k].id < id; k++ {
				if nw, keep, _ := st.change(t, ops[k], 0, false); keep {
					out = append(out, nw)
				}
			}
			if k < len(ops) && ops[k].id == id {
				if nw, keep, _ := st.change(t, ops[k], r, true); keep {
					out = append(out, nw)
				}
				k++
				continue
			}
			out = append(out, r)
		}
	}
	for ; k < len(ops); k++ {
		if nw, keep, _ := st.change(t, ops[k], 0, false); keep {
			out = append(out, nw)
		}
	}
	st.recut(t, 0, len(t.chunks), out)
}

// change works out what o does to the member old (had: there is one) and keeps t's
// counts and digest: the new member, whether there is one, and whether anything changed.
func (st *state) change(t *terminal, o op, old uint32, had bool) (nw uint32, keep, changed bool) {
	in := func(ref uint32) { // ref joins the desired list
		t.count++
		t.digest.Toggle(o.id, st.recs[ref].rev)
	}
	out := func(ref uint32) { // ref leaves it
		if ref&excluded == 0 {
			t.count--
			t.digest.Toggle(o.id, st.recs[ref].rev)
		}
	}
	switch o.kind {
	case opSet:
		if had && old == o.ref {
			return old, true, false
		}
		if had {
			out(old)
		} else {
			t.members++
		}
		in(o.ref)
		return o.ref, true, true
	case opDelete:
		if had {
			out(old)
			t.members--
		}
		return 0, false, had
	case opExclude:
		if had && old&excluded == 0 && st.recs[old].rev == o.rev {
			out(old)
			return old | excluded, true, true
		}
	case opInclude:
		if had && old&excluded != 0 && st.recs[old&^excluded].rev == o.rev {
			in(old &^ excluded)
			return old &^ excluded, true, true
		}
	}
	return old, had, false
}
