package outbox

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// An item is 64 bytes on 64-bit targets, a size class of its own: one field more and every
// queued task costs 80 (BenchmarkMemoryPerTask). On 32-bit ARM (test-arm) pointers and
// ints are half as wide and it is 56, within the 64-byte class.
func TestItemIs64Bytes(t *testing.T) {
	want := uintptr(64)
	if unsafe.Sizeof(uintptr(0)) == 4 {
		want = 56
	}
	if n := unsafe.Sizeof(item{}); n != want {
		t.Fatalf("item is %d bytes, want %d", n, want)
	}
}

// Ids longer than the item's 16-bit lengths are refused, not cut; ids at the limit keep
// every byte.
func TestLongIDs(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	long := strings.Repeat("x", maxFieldLen+1)
	for _, task := range []Task{
		{MessageID: long, DeviceID: "d"},
		{MessageID: "m", TaskID: long, DeviceID: "d"},
		{MessageID: "m", DeviceID: "d", PersonID: long},
	} {
		if err := e.o.Enqueue(task); !errors.Is(err, ErrInvalidTask) {
			t.Fatalf("a %d-byte field: %v", len(long), err)
		}
	}
	id, tid, person := strings.Repeat("i", maxFieldLen), strings.Repeat("t", maxFieldLen), strings.Repeat("p", maxFieldLen)
	if err := e.o.Enqueue(Task{MessageID: id, TaskID: tid, DeviceID: "d", PersonID: person, Payload: []byte("pay")}); err != nil {
		t.Fatal(err)
	}
	e.restart()
	e.o.Heartbeat("d")
	c := e.snd.next(t)
	if c.MessageID != id || c.TaskID != tid || c.PersonID != person || string(c.Payload) != "pay" {
		t.Fatalf("sent lengths %d %d %d %q", len(c.MessageID), len(c.TaskID), len(c.PersonID), c.Payload)
	}
}

// TestPersonIndexAgainstAMap runs random puts and deletes, with many colliding runs
// (few slots, many keys), and compares every lookup with a map.
func TestItemIndexAgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := byPerson()
	want := map[string]*item{}
	for step := range 200_000 {
		p := fmt.Sprint(rng.IntN(300))
		switch rng.IntN(3) {
		case 0, 1:
			it := newItem(nil, fmt.Sprint("m", step), "", p)
			x.put(it)
			want[p] = it
		case 2:
			x.del(p)
			delete(want, p)
		}
		if x.n != len(want) {
			t.Fatalf("step %d: %d entries, want %d", step, x.n, len(want))
		}
		if step%97 == 0 {
			for q := range 300 {
				k := fmt.Sprint(q)
				if got := x.get(k); got != want[k] {
					t.Fatalf("step %d: get(%s) = %v, want %v", step, k, got, want[k])
				}
			}
			if len(x.slots) > 8 && x.n*8 < len(x.slots) {
				t.Fatalf("step %d: %d slots for %d entries: never shrunk", step, len(x.slots), x.n)
			}
			if x.n*4 > len(x.slots)*3 {
				t.Fatalf("step %d: %d slots for %d entries: more than 3/4 full", step, len(x.slots), x.n)
			}
			for i, it := range x.slots {
				if (it == nil) != (x.tags[i] == 0) || (it != nil && x.tags[i] != tagOf(maphash.String(indexSeed, it.person()))) {
					t.Fatalf("step %d: slot %d holds %v with tag %#x", step, i, it, x.tags[i])
				}
			}
		}
	}
	for p := range want {
		x.del(p)
	}
	if x.n != 0 || len(x.slots) > 8 {
		t.Fatalf("drained index keeps %d entries, %d slots", x.n, len(x.slots))
	}
}
