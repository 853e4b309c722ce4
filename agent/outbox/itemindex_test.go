package outbox

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

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
			it := newItem(fmt.Sprint("m", step), "", p, nil)
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
		}
	}
	for p := range want {
		x.del(p)
	}
	if x.n != 0 || len(x.slots) > 8 {
		t.Fatalf("drained index keeps %d entries, %d slots", x.n, len(x.slots))
	}
}
