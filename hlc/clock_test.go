package hlc

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeWall is a settable physical clock, safe for concurrent use.
type fakeWall struct {
	mu    sync.Mutex
	ms    int64
	reads int
}

func (f *fakeWall) now() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.ms
}

func (f *fakeWall) set(ms int64) {
	f.mu.Lock()
	f.ms = ms
	f.mu.Unlock()
}

const docWall = 1696374425000 // the protocol document's example: 2023-10-03 23:07:05 GMT

func TestNowFollowsPhysicalClock(t *testing.T) {
	w := &fakeWall{ms: docWall}
	c := NewClock("CLIENT", WithWallClock(w.now))
	want := []Timestamp{
		{Wall: docWall, Counter: 0, Node: "CLIENT"},
		{Wall: docWall, Counter: 1, Node: "CLIENT"},
		{Wall: docWall, Counter: 2, Node: "CLIENT"},
	}
	for i, wt := range want {
		if got := c.Now(); got != wt {
			t.Fatalf("Now #%d = %v; want %v", i, got, wt)
		}
	}
	w.set(docWall + 5)
	if got := c.Now(); got != (Timestamp{Wall: docWall + 5, Node: "CLIENT"}) {
		t.Fatalf("after the physical clock moved on: %v; want counter reset", got)
	}
	// Physical clock jumps back an hour: the clock keeps its wall and counts.
	w.set(docWall - 3600_000)
	if got := c.Now(); got != (Timestamp{Wall: docWall + 5, Counter: 1, Node: "CLIENT"}) {
		t.Fatalf("after the physical clock went back: %v", got)
	}
	if w.reads != 5 {
		t.Errorf("physical clock read %d times for 5 Now calls", w.reads)
	}
	if c.Last() != (Timestamp{Wall: docWall + 5, Counter: 1, Node: "CLIENT"}) {
		t.Errorf("Last = %v", c.Last())
	}
}

func TestUpdateCases(t *testing.T) {
	type step struct {
		pt     int64
		remote Timestamp
		want   Timestamp // Node "S" implied
	}
	r := func(wall int64, counter uint32) Timestamp { return Timestamp{Wall: wall, Counter: counter, Node: "R"} }
	s := func(wall int64, counter uint32) Timestamp { return Timestamp{Wall: wall, Counter: counter, Node: "S"} }
	steps := []step{
		{pt: 100, remote: r(100, 0), want: s(100, 1)},  // remote == physical: counter passes remote's
		{pt: 100, remote: r(100, 7), want: s(100, 8)},  // all three equal: max counter + 1
		{pt: 100, remote: r(100, 3), want: s(100, 9)},  // clock's counter is the larger
		{pt: 100, remote: r(50, 90), want: s(100, 10)}, // remote behind: clock wins
		{pt: 200, remote: r(150, 5), want: s(200, 0)},  // physical ahead of both: counter resets
		{pt: 200, remote: r(260, 4), want: s(260, 5)},  // remote ahead (within drift): take it
		{pt: 300, remote: r(260, 4), want: s(300, 0)},
		{pt: 10, remote: r(5, 0), want: s(300, 1)}, // physical went backwards
	}
	w := &fakeWall{}
	c := NewClock("S", WithWallClock(w.now))
	for i, st := range steps {
		w.set(st.pt)
		got, err := c.Update(st.remote)
		if err != nil || got != st.want {
			t.Fatalf("step %d: Update(%v) at pt %d = %v, %v; want %v", i, st.remote, st.pt, got, err, st.want)
		}
		if !got.After(st.remote) {
			t.Fatalf("step %d: result %v not after remote %v", i, got, st.remote)
		}
	}
}

func TestMaxDrift(t *testing.T) {
	w := &fakeWall{ms: docWall}
	c := NewClock("StateStore", WithWallClock(w.now))
	if c.MaxDrift() != time.Minute {
		t.Fatalf("default MaxDrift = %v", c.MaxDrift())
	}
	first := c.Now()

	edge := Timestamp{Wall: docWall + 60_000, Counter: 3, Node: "CLIENT"}
	beyond := Timestamp{Wall: docWall + 60_001, Counter: 0, Node: "CLIENT"}
	if err := c.CheckDrift(beyond); !errors.Is(err, ErrTooFarAhead) || !strings.Contains(err.Error(), "60001 ms ahead") {
		t.Fatalf("CheckDrift(beyond) = %v", err)
	}
	got, err := c.Update(beyond)
	if !errors.Is(err, ErrTooFarAhead) || !got.IsZero() {
		t.Fatalf("Update(beyond) = %v, %v; want ErrTooFarAhead", got, err)
	}
	c.Observe(beyond) // ignored
	if c.Last() != first {
		t.Fatalf("a refused timestamp changed the clock: Last = %v; want %v", c.Last(), first)
	}
	if err := c.CheckDrift(edge); err != nil {
		t.Fatalf("CheckDrift(exactly max drift ahead) = %v", err)
	}
	got, err = c.Update(edge)
	if err != nil || got != (Timestamp{Wall: edge.Wall, Counter: 4, Node: "StateStore"}) {
		t.Fatalf("Update(edge) = %v, %v", got, err)
	}
	// Far behind is always fine.
	if _, err := c.Update(Timestamp{Wall: 0, Node: "old"}); err != nil {
		t.Fatal(err)
	}

	// A custom drift, and nonsense values falling back to the default.
	c2 := NewClock("n", WithWallClock(w.now), WithMaxDrift(1500*time.Millisecond))
	if err := c2.CheckDrift(Timestamp{Wall: docWall + 1501, Node: "x"}); !errors.Is(err, ErrTooFarAhead) {
		t.Errorf("1.5 s drift: 1501 ms ahead accepted")
	}
	if err := c2.CheckDrift(Timestamp{Wall: docWall + 1500, Node: "x"}); err != nil {
		t.Errorf("1.5 s drift: 1500 ms ahead refused: %v", err)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if got := NewClock("n", WithMaxDrift(d)).MaxDrift(); got != DefaultMaxDrift {
			t.Errorf("WithMaxDrift(%v) gives %v", d, got)
		}
	}
}

// TestDriftAfterPhysicalJumpBack: the check is against physical time, not the clock's wall, so a
// clock whose physical time jumped back still accepts peers near real time, and still refuses
// peers far ahead of it.
func TestDriftAfterPhysicalJumpBack(t *testing.T) {
	w := &fakeWall{ms: docWall}
	c := NewClock("S", WithWallClock(w.now))
	c.Now()
	w.set(docWall - 10*60_000)
	if _, err := c.Update(Timestamp{Wall: docWall - 10*60_000 + 30_000, Node: "R"}); err != nil {
		t.Fatalf("peer 30 s ahead of the (jumped back) physical time refused: %v", err)
	}
	if _, err := c.Update(Timestamp{Wall: docWall, Node: "R"}); !errors.Is(err, ErrTooFarAhead) {
		t.Fatalf("peer 10 min ahead of physical time accepted: %v", err)
	}
}

func TestObserve(t *testing.T) {
	w := &fakeWall{ms: docWall}
	c := NewClock("CLIENT", WithWallClock(w.now))
	c.Observe(Timestamp{Wall: docWall + 10, Counter: 4, Node: "StateStore"})
	if got := c.Now(); got != (Timestamp{Wall: docWall + 10, Counter: 5, Node: "CLIENT"}) {
		t.Fatalf("Now after Observe = %v", got)
	}
	c.Observe(Timestamp{Wall: docWall + 10, Counter: 2, Node: "StateStore"}) // behind: no effect
	c.Observe(Timestamp{Wall: docWall - 10, Counter: 9, Node: "StateStore"})
	if got := c.Now(); got != (Timestamp{Wall: docWall + 10, Counter: 6, Node: "CLIENT"}) {
		t.Fatalf("Observe of older timestamps changed the clock: %v", got)
	}
	if w.reads != 5 {
		t.Errorf("physical clock read %d times; want one per call", w.reads)
	}
}

func TestCounterOverflowCarriesIntoWall(t *testing.T) {
	w := &fakeWall{ms: 1000}
	c := NewClock("S", WithWallClock(w.now))
	c.maxCounter = 2
	var got []Timestamp
	for range 7 {
		got = append(got, c.Now())
	}
	want := []Timestamp{{1000, 0, "S"}, {1000, 1, "S"}, {1000, 2, "S"}, {1001, 0, "S"},
		{1001, 1, "S"}, {1001, 2, "S"}, {1002, 0, "S"}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Now #%d = %v; want %v (all: %v)", i, got[i], want[i], got)
		}
	}
	// The physical clock catching up resets the counter as usual.
	w.set(1003)
	if ts := c.Now(); ts != (Timestamp{1003, 0, "S"}) {
		t.Fatalf("got %v", ts)
	}

	// A remote counter at uint32's limit: no wrap, the result is still greater.
	c = NewClock("S", WithWallClock(w.now))
	remote := Timestamp{Wall: 1003, Counter: math.MaxUint32, Node: "R"}
	ts, err := c.Update(remote)
	if err != nil || ts != (Timestamp{1004, 0, "S"}) {
		t.Fatalf("Update(%v) = %v, %v", remote, ts, err)
	}
	c = NewClock("S", WithWallClock(w.now))
	c.Observe(remote)
	if ts := c.Now(); ts != (Timestamp{1004, 0, "S"}) {
		t.Fatalf("Now after Observe(%v) = %v", remote, ts)
	}
	// The real limit.
	c = NewClock("S", WithWallClock(w.now))
	ts, _ = c.Update(Timestamp{Wall: 1003, Counter: MaxCounter - 1, Node: "R"})
	if ts != (Timestamp{1003, MaxCounter, "S"}) {
		t.Fatalf("got %v", ts)
	}
	if ts := c.Now(); ts != (Timestamp{1004, 0, "S"}) {
		t.Fatalf("Now past MaxCounter = %v", ts)
	}
}

func TestPhysicalClamp(t *testing.T) {
	w := &fakeWall{ms: -5}
	c := NewClock("S", WithWallClock(w.now))
	if ts := c.Now(); ts != (Timestamp{0, 1, "S"}) {
		t.Fatalf("negative physical time: %v", ts)
	}
	w.set(math.MaxInt64)
	if ts := c.Now(); ts != (Timestamp{MaxWall, 0, "S"}) {
		t.Fatalf("huge physical time: %v", ts)
	}
	// Remote far beyond MaxWall is far beyond any drift.
	if _, err := c.Update(Timestamp{Wall: math.MaxInt64, Counter: math.MaxUint32, Node: "R"}); !errors.Is(err, ErrTooFarAhead) {
		t.Fatalf("remote at MaxInt64 accepted: %v", err)
	}
	// A negative remote wall (built in code) is just old.
	if ts, err := c.Update(Timestamp{Wall: math.MinInt64, Node: "R"}); err != nil || ts != (Timestamp{MaxWall, 1, "S"}) {
		t.Fatalf("remote at MinInt64: %v, %v", ts, err)
	}
}

func TestNewClockNodeIDs(t *testing.T) {
	for _, bad := range []string{"", "host:1883"} {
		if err := ValidNode(bad); err == nil {
			t.Errorf("ValidNode(%q) = nil", bad)
		}
	}
	if c := NewClock("gw:01:a"); c.Node() != "gw_01_a" {
		t.Errorf("NewClock(\"gw:01:a\").Node() = %q", c.Node())
	}
	a, b := NewClock(""), NewClock("")
	if len(a.Node()) != 20 || !strings.HasPrefix(a.Node(), "hlc-") || a.Node() == b.Node() {
		t.Errorf("empty node ids became %q and %q; want distinct random ids", a.Node(), b.Node())
	}
	for _, c := range []*Clock{a, NewClock("gw:01")} {
		if err := ValidNode(c.Node()); err != nil {
			t.Error(err)
		}
		if ts, err := ParseString(c.Now().String()); err != nil || ts.Node != c.Node() {
			t.Errorf("clock %q issues unparseable timestamps: %v", c.Node(), err)
		}
	}
	if err := ValidNode("StateStore"); err != nil {
		t.Error(err)
	}
	c := NewClock("StateStore")
	if c.Node() != "StateStore" || !c.Last().IsZero() {
		t.Errorf("fresh clock: node %q, last %v", c.Node(), c.Last())
	}
	// The real physical clock by default.
	before := time.Now().UnixMilli()
	ts := c.Now()
	if ts.Wall < before || ts.Wall > time.Now().UnixMilli() {
		t.Errorf("Now with the system clock = %v; want between %d and now", ts, before)
	}
}

func TestUpdateAllocs(t *testing.T) {
	w := &fakeWall{ms: docWall}
	c := NewClock("StateStore", WithWallClock(w.now))
	remote := Timestamp{Wall: docWall, Counter: 0, Node: "CLIENT"}
	if n := testing.AllocsPerRun(100, func() { _, _ = c.Update(remote) }); n != 0 {
		t.Errorf("Update: %v allocs; want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { c.Now() }); n != 0 {
		t.Errorf("Now: %v allocs; want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { c.Observe(remote) }); n != 0 {
		t.Errorf("Observe: %v allocs; want 0", n)
	}
}

func TestRestore(t *testing.T) {
	w := &fakeWall{ms: docWall}
	c := NewClock("StateStore", WithWallClock(w.now))
	// Before the restart the store issued versions up to 5 minutes ahead of the physical time
	// it now reads (its clock jumped back over the reboot). Observe would ignore that; Restore
	// must not.
	persisted := Timestamp{Wall: docWall + 5*60_000, Counter: 7, Node: "StateStore"}
	c.Observe(persisted)
	if !c.Last().IsZero() {
		t.Fatalf("Observe took a timestamp beyond the drift: %v", c.Last())
	}
	c.Restore(persisted)
	if got := c.Now(); got != (Timestamp{Wall: persisted.Wall, Counter: 8, Node: "StateStore"}) {
		t.Fatalf("Now after Restore(%v) = %v", persisted, got)
	}
	c.Restore(Timestamp{Wall: docWall, Counter: 99, Node: "StateStore"}) // older: no effect
	if got := c.Now(); got != (Timestamp{Wall: persisted.Wall, Counter: 9, Node: "StateStore"}) {
		t.Fatalf("Restore of an older timestamp moved the clock: %v", got)
	}
	// A corrupt wall is clamped, so the carry arithmetic cannot overflow.
	c = NewClock("S", WithWallClock(w.now))
	c.maxCounter = 0
	c.Restore(Timestamp{Wall: math.MaxInt64, Node: "S"})
	a, b := c.Now(), c.Now()
	if a.Wall != restoreLimit+1 || !b.After(a) {
		t.Fatalf("after restoring MaxInt64: %v then %v", a, b)
	}
}
