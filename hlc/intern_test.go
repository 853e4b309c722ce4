package hlc

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func TestInternReturnsEqualStringsNotViews(t *testing.T) {
	buf := []byte("7:1:node-to-intern")
	ts, err := Parse(buf)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, "7:1:XXXXXXXXXXXXXX") // the caller reuses its buffer
	if ts.Node != "node-to-intern" {
		t.Fatalf("Node changed with the input buffer: %q", ts.Node)
	}
	again, _ := ParseString("9:9:node-to-intern")
	if unsafe.StringData(again.Node) != unsafe.StringData(ts.Node) {
		t.Error("second Parse of the same node id did not return the interned string")
	}
}

func TestInternLongIDsNotCached(t *testing.T) {
	long := strings.Repeat("n", internMaxLen+1)
	a, _ := ParseString("1:0:" + long)
	b, _ := ParseString("1:0:" + long)
	if a.Node != long || b.Node != long {
		t.Fatal("long node id mangled")
	}
	if unsafe.StringData(a.Node) == unsafe.StringData(b.Node) {
		t.Error("a node id longer than internMaxLen was cached")
	}
	in := []byte("1:0:" + long)
	if n := testing.AllocsPerRun(20, func() { _, _ = Parse(in) }); n != 1 {
		t.Errorf("long id: %v allocs; want exactly 1 (the string)", n)
	}
}

// TestInternChurn parses far more distinct ids than the table holds from many goroutines (the
// race detector watches the atomic slots): every result must be right, the table must hold
// only ids it was given, and afterwards a hot set of ids must be allocation-free again.
func TestInternChurn(t *testing.T) {
	const goroutines, ids = 8, 4 * internSlots
	var wg sync.WaitGroup
	errs := make(chan string, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				node := "churn-" + strconv.Itoa((i*7+g)%ids)
				ts, err := ParseString("1:2:" + node)
				if err != nil || ts.Node != node {
					errs <- node + " parsed as " + ts.Node
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for i := range internTable {
		if p := internTable[i].Load(); p != nil && (len(*p) > internMaxLen || *p == "") {
			t.Errorf("slot %d holds %q", i, *p)
		}
	}
	hot := [][]byte{[]byte("1:0:StateStore"), []byte("1:0:CLIENT"), []byte("1:0:other-client")}
	// A few rounds let hot ids that collide on a slot settle into their other candidates.
	for range 32 {
		for _, h := range hot {
			_, _ = Parse(h)
		}
	}
	n := testing.AllocsPerRun(50, func() {
		for _, h := range hot {
			_, _ = Parse(h)
		}
	})
	if n != 0 {
		t.Errorf("hot ids after churn: %v allocs per round; want 0", n)
	}
}
