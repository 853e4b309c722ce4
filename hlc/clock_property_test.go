package hlc

import (
	"errors"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Property tests for the invariants listed on Clock. Each run picks a random seed and logs it;
// replay a failure with HLC_SEED=<seed> (or -seed <seed>):
//
//	HLC_SEED=12345 go test -race -run Property ./hlc
var seedFlag = flag.Uint64("seed", 0, "seed for the hlc property tests (also HLC_SEED); 0 picks one")

func propertySeed(t *testing.T) uint64 {
	t.Helper()
	seed := *seedFlag
	if s := os.Getenv("HLC_SEED"); s != "" && seed == 0 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("HLC_SEED=%q: %v", s, err)
		}
		seed = v
	}
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay: HLC_SEED=%d go test -race -run '^%s$' ./hlc)", seed, seed, t.Name())
	return seed
}

// jumpyWall is a physical clock that mostly ticks forward by a few milliseconds and sometimes
// jumps minutes backwards or forwards, like an NTP step or a gateway without an RTC booting.
// It records the largest reading it gave, which bounds every wall the clock may issue.
type jumpyWall struct {
	mu      sync.Mutex
	r       *rand.Rand
	ms      int64
	maxRead int64
	frozen  bool // never moves: forces counter growth
}

func newJumpyWall(seed uint64) *jumpyWall {
	return &jumpyWall{r: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), ms: docWall, maxRead: math.MinInt64}
}

// now is the physical clock handed to the Clock: it returns the current reading, then moves.
func (w *jumpyWall) now() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	ms := w.ms
	w.maxRead = max(w.maxRead, ms)
	w.step()
	return ms
}

// peek returns the reading the next now call gives (single-goroutine tests only).
func (w *jumpyWall) peek() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ms
}

func (w *jumpyWall) largest() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxRead
}

func (w *jumpyWall) step() {
	if w.frozen {
		return
	}
	switch p := w.r.IntN(100); {
	case p < 3: // jump back up to 3 minutes
		w.ms -= w.r.Int64N(180_000)
	case p < 6: // jump forward up to 3 minutes
		w.ms += w.r.Int64N(180_000)
	case p < 40: // same millisecond
	default:
		w.ms += w.r.Int64N(3)
	}
}

// randomRemote makes a remote timestamp around the physical reading pt and the clock's last
// value: equal to it, a little behind or ahead, at the drift edge, beyond it, far behind, with
// counters near the limits.
func randomRemote(r *rand.Rand, pt int64, last Timestamp, driftMs int64) Timestamp {
	ts := Timestamp{Node: "peer-" + strconv.Itoa(r.IntN(3))}
	switch r.IntN(9) {
	case 0:
		ts.Wall, ts.Counter = last.Wall, last.Counter
	case 1:
		ts.Wall, ts.Counter = last.Wall, last.Counter+uint32(r.IntN(3))
	case 2:
		ts.Wall = pt + driftMs + r.Int64N(3) - 1 // around the edge
	case 3:
		ts.Wall = pt + driftMs + 1 + r.Int64N(600_000) // beyond
	case 4:
		ts.Wall = pt - r.Int64N(600_000) // behind
	case 5:
		ts.Wall, ts.Counter = pt+r.Int64N(driftMs+1), math.MaxUint32-uint32(r.IntN(2))
	default:
		ts.Wall, ts.Counter = pt+r.Int64N(2*driftMs)-driftMs, uint32(r.IntN(5))
	}
	ts.Wall = max(ts.Wall, 0)
	return ts
}

// pair orders (wall, counter) only: the node id plays no part in what a clock issues.
func pairLess(a, b Timestamp) bool {
	return a.Wall < b.Wall || (a.Wall == b.Wall && a.Counter < b.Counter)
}

// spec is what a clock must issue, stated independently of Kulkarni's case analysis: the
// smallest (wall, counter) pair greater than every pair seen so far (seen: the largest issued
// or accepted remote pair) whose wall is at least the physical reading pt; a counter beyond
// limit moves to the next millisecond instead.
func spec(seen Timestamp, pt int64, limit uint64, node string) Timestamp {
	if pt > seen.Wall {
		return Timestamp{Wall: pt, Node: node}
	}
	if uint64(seen.Counter)+1 > limit {
		return Timestamp{Wall: seen.Wall + 1, Node: node}
	}
	return Timestamp{Wall: seen.Wall, Counter: seen.Counter + 1, Node: node}
}

// TestPropertySequential drives clocks with random operations against a jumping physical clock
// and checks every result against spec and the invariants on Clock, knowing each call's
// physical reading exactly.
func TestPropertySequential(t *testing.T) {
	seed := propertySeed(t)
	r := rand.New(rand.NewPCG(seed, 1))
	limits := []uint64{MaxCounter, MaxCounter, 0, 1, 3}
	for trial := range 200 {
		w := newJumpyWall(r.Uint64())
		w.frozen = trial%7 == 0
		drift := time.Duration(1+r.IntN(120)) * time.Second
		c := NewClock("S", WithWallClock(w.now), WithMaxDrift(drift))
		c.maxCounter = limits[r.IntN(len(limits))]
		driftMs := drift.Milliseconds()

		var (
			seen       Timestamp // largest pair issued or accepted
			maxRemote  int64     // largest accepted remote wall
			carries    int64     // issues where spec moved the wall for an overflow
			lastIssued Timestamp
		)
		issued := func(op string, got Timestamp, pt int64, remote *Timestamp) {
			t.Helper()
			fail := func(what string) {
				t.Helper()
				t.Fatalf("seed %d trial %d: %s = %v (pt %d, seen %v, remote %v, limit %d): %s",
					seed, trial, op, got, pt, seen, remote, c.maxCounter, what)
			}
			if want := spec(seen, pt, c.maxCounter, "S"); got != want {
				fail("want " + want.String())
			}
			if uint64(got.Counter) > c.maxCounter {
				fail("counter beyond the limit")
			}
			if !lastIssued.IsZero() && !lastIssued.Before(got) {
				fail("not after the previous timestamp " + lastIssued.String())
			}
			if pairLess(got, seen) || got == seen {
				fail("not after everything seen")
			}
			if remote != nil && !got.After(*remote) {
				fail("Update result not after its remote")
			}
			if got.Wall < pt {
				fail("wall behind the physical reading")
			}
			if got.Wall > seen.Wall && got.Wall > pt {
				carries++
			}
			if bound := max(w.largest(), maxRemote) + carries; got.Wall > bound {
				fail("wall beyond max(physical, accepted remote) = " + strconv.FormatInt(bound, 10))
			}
			if got.Wall > w.largest()+driftMs+carries {
				fail("wall more than the max drift ahead of physical time")
			}
			seen, lastIssued = got, got
		}

		for range 300 {
			pt := w.peek()
			switch op := r.IntN(10); {
			case op < 3:
				issued("Now", c.Now(), pt, nil)
			case op < 7:
				remote := randomRemote(r, pt, c.Last(), driftMs)
				before := c.Last()
				got, err := c.Update(remote)
				tooFar := remote.Wall > pt+driftMs
				if tooFar != errors.Is(err, ErrTooFarAhead) || (err != nil && !tooFar) {
					t.Fatalf("seed %d trial %d: Update(%v) at pt %d drift %d = %v", seed, trial, remote, pt, driftMs, err)
				}
				if err != nil {
					if c.Last() != before {
						t.Fatalf("seed %d trial %d: refused Update changed the clock %v -> %v", seed, trial, before, c.Last())
					}
					continue
				}
				if pairLess(seen, remote) {
					seen.Wall, seen.Counter = remote.Wall, remote.Counter
				}
				maxRemote = max(maxRemote, remote.Wall)
				issued("Update", got, pt, &remote)
			case op < 9:
				remote := randomRemote(r, pt, c.Last(), driftMs)
				before := c.Last()
				c.Observe(remote)
				if remote.Wall > pt+driftMs {
					if c.Last() != before {
						t.Fatalf("seed %d trial %d: Observe of a too-far remote changed the clock", seed, trial)
					}
					continue
				}
				if pairLess(seen, remote) {
					seen.Wall, seen.Counter = remote.Wall, remote.Counter
				}
				maxRemote = max(maxRemote, remote.Wall)
				if l := c.Last(); l.Wall != seen.Wall || l.Counter != seen.Counter {
					t.Fatalf("seed %d trial %d: after Observe(%v) Last = %v; want %v", seed, trial, remote, l, seen)
				}
			default:
				remote := randomRemote(r, pt, c.Last(), driftMs)
				before := c.Last()
				err := c.CheckDrift(remote)
				if (remote.Wall > pt+driftMs) != errors.Is(err, ErrTooFarAhead) || c.Last() != before {
					t.Fatalf("seed %d trial %d: CheckDrift(%v) at pt %d = %v", seed, trial, remote, pt, err)
				}
			}
		}
	}
}

// TestPropertyConcurrent has many goroutines share one clock and checks what can be checked
// across goroutines: a timestamp issued after another was seen (happens-before through a
// mutex) is greater; every goroutine's own timestamps increase; Update beats its remote; no
// two issued timestamps are equal; no wall is more than the max drift ahead of physical time.
func TestPropertyConcurrent(t *testing.T) {
	seed := propertySeed(t)
	for _, variant := range []struct {
		name   string
		frozen bool
		limit  uint64
	}{
		{"jumping physical clock", false, MaxCounter},
		{"frozen physical clock, tiny counter", true, 3},
	} {
		t.Run(variant.name, func(t *testing.T) {
			const goroutines, ops = 8, 3000
			w := newJumpyWall(seed)
			w.frozen = variant.frozen
			c := NewClock("S", WithWallClock(w.now))
			c.maxCounter = variant.limit
			driftMs := c.MaxDrift().Milliseconds()

			var published struct {
				sync.Mutex
				max Timestamp
			}
			results := make([][]Timestamp, goroutines)
			errs := make(chan string, goroutines)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(seed, uint64(g)+2))
					var mine []Timestamp
					for range ops {
						published.Lock()
						before := published.max
						published.Unlock()

						var got Timestamp
						var remote *Timestamp
						switch r.IntN(4) {
						case 0, 1:
							got = c.Now()
						case 2:
							rem := randomRemote(r, w.peek(), before, driftMs)
							var err error
							if got, err = c.Update(rem); err != nil {
								if !errors.Is(err, ErrTooFarAhead) {
									errs <- "Update: " + err.Error()
									return
								}
								continue
							}
							remote = &rem
						default:
							c.Observe(randomRemote(r, w.peek(), before, driftMs))
							continue
						}
						switch {
						case !before.IsZero() && !got.After(before):
							errs <- got.String() + " issued after " + before.String() + " was published"
						case len(mine) > 0 && !got.After(mine[len(mine)-1]):
							errs <- got.String() + " after this goroutine's " + mine[len(mine)-1].String()
						case remote != nil && !got.After(*remote):
							errs <- "Update(" + remote.String() + ") = " + got.String()
						case got.Node != "S":
							errs <- "node " + got.Node
						case variant.limit == MaxCounter && got.Wall > w.largest()+driftMs:
							errs <- got.String() + " more than the drift ahead of physical " + strconv.FormatInt(w.largest(), 10)
						default:
							mine = append(mine, got)
							published.Lock()
							published.max = maxTimestamp(published.max, got)
							published.Unlock()
							continue
						}
						return
					}
					results[g] = mine
				}()
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Errorf("seed %d: %s", seed, e)
			}
			all := slices.Concat(results...)
			slices.SortFunc(all, Compare)
			for i := 1; i < len(all); i++ {
				if Compare(all[i-1], all[i]) == 0 {
					t.Fatalf("seed %d: %v issued twice", seed, all[i])
				}
			}
			if len(all) < goroutines*ops/3 {
				t.Fatalf("seed %d: only %d timestamps issued", seed, len(all))
			}
		})
	}
}

// maxTimestamp is max in the order of Compare.
func maxTimestamp(a, b Timestamp) Timestamp {
	if Compare(a, b) >= 0 {
		return a
	}
	return b
}
