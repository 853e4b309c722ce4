package outbox

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// Items leave the table until their dead ids call for a compaction of the chunks: the ids
// of the items still in it stay right (the indexes find them, the table replays to the
// same state), an id taken before the compaction still reads the same, and the chunks
// hold no more than the bound of blobs.go.
func TestBlobCompaction(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), MaxQueued: 10_000, MaxQueuedPerDevice: 10_000})
	const n = 2000 // 2,000 dead ids of ~40 bytes: past blobMinDead
	id := func(round, i int) string { return fmt.Sprintf("AddPerson-%d-149452706753844%04d-%d", i, i, round) }
	for i := range n {
		e.enqueue(id(0, i), fmt.Sprint("d", i%3), fmt.Sprint("p", i))
	}
	e.o.mu.Lock()
	held := e.o.t.items.get(id(0, 7)).id() // points into a chunk about to be left behind
	e.o.mu.Unlock()
	// A later command for each person supersedes the first (never sent: the devices are
	// offline); reporting the superseded results takes them out of the table.
	for i := range n {
		e.enqueue(id(1, i), fmt.Sprint("d", i%3), fmt.Sprint("p", i))
	}
	reported := 0
	for res := e.results(); len(res) > 0; res = e.results() {
		for _, r := range res {
			if err := e.o.MarkReported(r.MessageID); err != nil {
				t.Fatal(err)
			}
		}
		reported += len(res)
	}
	if reported != n {
		t.Fatalf("%d results, want %d", reported, n)
	}
	e.o.mu.Lock()
	a := e.o.t.blobs
	for i := range n {
		it := e.o.t.items.get(id(1, i))
		if it == nil || it.task() != "t-"+id(1, i) || it.person() != fmt.Sprint("p", i) || it.dev.scheduledFor(it.person()) != it {
			e.o.mu.Unlock()
			t.Fatalf("after the compaction, %s is %v", id(1, i), it)
		}
		if e.o.t.items.get(id(0, i)) != nil {
			e.o.mu.Unlock()
			t.Fatalf("%s reported and still in the table", id(0, i))
		}
	}
	live := e.o.t.dump()
	if err := checkBlobs(e.o.t); err != nil {
		e.o.mu.Unlock()
		t.Fatal(err)
	}
	e.o.mu.Unlock()
	deadIDs := 0 // what the reported commands' ids took
	for i := range n {
		deadIDs += len(id(0, i)) + len("t-"+id(0, i)) + len(fmt.Sprint("p", i))
	}
	if a.dead >= deadIDs || (a.dead >= blobMinDead && a.dead*2 > a.live) {
		t.Fatalf("chunks: %d live bytes, %d dead of %d that died: not compacted", a.live, a.dead, deadIDs)
	}
	if held != id(0, 7) {
		t.Fatalf("an id held across the compaction reads %q", held)
	}
	e.restart()
	e.o.mu.Lock()
	replayed := e.o.t.dump()
	if err := checkBlobs(e.o.t); err != nil {
		e.o.mu.Unlock()
		t.Fatal(err)
	}
	e.o.mu.Unlock()
	if replayed != live {
		t.Fatalf("replayed table differs:\n%s\nlive:\n%s", replayed, live)
	}
}

// Blobs from chunks take their own length; long ones and empty ones are allocated apart.
func TestBlobArenaAlloc(t *testing.T) {
	var a blobArena
	b1, b2 := a.alloc(10), a.alloc(20)
	if len(b1) != 10 || cap(b1) != 10 || len(b2) != 20 || &a.chunk[10] != &b2[0] || a.live != 30 {
		t.Fatalf("alloc: len %d cap %d, len %d, live %d", len(b1), cap(b1), len(b2), a.live)
	}
	if b := a.alloc(0); b != nil {
		t.Fatalf("alloc(0) = %v", b)
	}
	if b := a.alloc(blobOwnSize); len(b) != blobOwnSize || a.live != 30 {
		t.Fatalf("a long blob: len %d, live %d", len(b), a.live)
	}
	first := &a.chunk[0]
	for cap(a.chunk)-len(a.chunk) >= 10 {
		a.alloc(min(200, cap(a.chunk)-len(a.chunk)-5))
	}
	a.alloc(10) // does not fit: a new chunk
	if &a.chunk[0] == first || len(a.chunk) != 10 {
		t.Fatalf("a blob past the chunk's end: chunk len %d", len(a.chunk))
	}
}

// The table remembers the last recentCap ids that left it, in their order, as copies: the
// id it was given may alias a buffer that is then reused.
func TestRememberCopiesAndForgetsInOrder(t *testing.T) {
	tb := newTable()
	buf := make([]byte, 0, 64)
	const n = recentCap + 3000 // past the ring's size, over many chunks
	name := func(i int) string { return fmt.Sprintf("AddPerson-%d-1494527067538440192", i) }
	for i := range n {
		buf = append(buf[:0], name(i)...)
		tb.remember(unsafe.String(&buf[0], len(buf)))
		tb.remember(name(i)) // again: already remembered, not a second entry
	}
	for i := range len(buf) {
		buf[i] = 'x' // the last caller's buffer, overwritten
	}
	list := tb.recentList()
	if len(list) != recentCap {
		t.Fatalf("remembers %d ids, want %d", len(list), recentCap)
	}
	if err := checkRecent(&tb.recent); err != nil {
		t.Fatal(err)
	}
	if len(tb.recent.slots) != 16384 {
		t.Fatalf("%d slots for %d ids", len(tb.recent.slots), recentCap)
	}
	for k, id := range list {
		if want := name(n - recentCap + k); id != want {
			t.Fatalf("remembered #%d is %q, want %q", k, id, want)
		}
	}
	if tb.seen(name(n-recentCap-1)) || !tb.seen(name(n-recentCap)) || !tb.seen(name(n-1)) {
		t.Fatal("forgot the wrong ids")
	}
	// An id forgotten long ago comes back as the newest; the oldest goes.
	tb.remember(name(0))
	if !tb.seen(name(0)) || tb.seen(name(n-recentCap)) || tb.recentList()[recentCap-1] != name(0) {
		t.Fatal("a forgotten id remembered again is not the newest")
	}
}

// checkBlobs checks the chunks' accounting: live is what the table's items and errors use
// of them, and dead is below the compaction's threshold.
func checkBlobs(tb *table) error {
	live := 0
	for _, it := range tb.items.all() {
		if n := it.blobLen(); n < blobOwnSize {
			live += n
		}
		if e := tb.errs[it]; len(e) < blobOwnSize {
			live += len(e)
		}
	}
	if a := tb.blobs; a.live != live || (a.dead >= blobMinDead && a.dead > a.live/4) {
		return fmt.Errorf("blob chunks: %d live bytes (the table uses %d), %d dead", a.live, live, a.dead)
	}
	return nil
}

// recentIDs against the ring and map it replaced: random ids from a universe larger than
// the ring, so that ids are remembered again, forgotten, and come back.
func TestRecentIDsAgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var r recentIDs
	var ring []string
	pos := 0
	set := map[string]bool{}
	for step := range 60_000 {
		id := fmt.Sprint("m", rng.IntN(12_000))
		if !set[id] {
			if len(ring) < recentCap {
				ring = append(ring, id)
			} else {
				delete(set, ring[pos])
				ring[pos] = id
				pos = (pos + 1) % recentCap
			}
			set[id] = true
		}
		r.add(id)
		if len(r.ring) != len(set) {
			t.Fatalf("step %d: %d ids, want %d", step, len(r.ring), len(set))
		}
		if step%1000 == 0 {
			if err := checkRecent(&r); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			for q := range 12_000 {
				k := fmt.Sprint("m", q)
				if r.has(k) != set[k] {
					t.Fatalf("step %d: has(%s) = %v", step, k, r.has(k))
				}
			}
		}
	}
}

// checkRecent checks the set against the ring: each position once, under its id's tag;
// empty slots and tombstones hold none; used counts what is not empty; at most 3/4 used.
func checkRecent(r *recentIDs) error {
	seen := make([]bool, len(r.ring))
	used := 0
	for i, s := range r.slots {
		tag := r.tags[i]
		if tag != 0 {
			used++
		}
		if tag == 0 || tag == tombstone {
			if s != 0 {
				return fmt.Errorf("slot %d (tag %#x) holds position %d", i, tag, s)
			}
			continue
		}
		if s == 0 || int(s) > len(r.ring) || seen[s-1] || tag != tagOf(maphash.String(indexSeed, r.ring[s-1])) {
			return fmt.Errorf("slot %d holds position %d with tag %#x", i, s, tag)
		}
		seen[s-1] = true
	}
	for p, ok := range seen {
		if !ok {
			return fmt.Errorf("position %d (%s) is in no slot", p, r.ring[p])
		}
	}
	if used != r.used || used*4 > len(r.slots)*3 {
		return fmt.Errorf("%d slots used (counted %d) of %d", used, r.used, len(r.slots))
	}
	return nil
}
