package whitelist

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

func testSeed(t *testing.T, env string) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(env); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s: %v", env, err)
		}
	}
	t.Logf("seed %d (%s=%d to repeat)", seed, env, seed)
	return seed
}

// TestPropertyRandomUpdates applies random Set, Delete, Replace, Exclude, Include and
// Forget to a store and to a model, closes and reopens it and compacts it at random
// points (small CompactBytes: the compactor runs too, and updates are written in parts),
// and checks after every step that the store's lists, digests and counts equal the
// model's.
func TestPropertyRandomUpdates(t *testing.T) {
	seed := testSeed(t, "WHITELIST_PROPERTY_SEED")
	rng := rand.New(rand.NewPCG(seed, 2))
	gen := &opGen{rng: rng}
	dir := t.TempDir()
	opt := Options{CompactBytes: 2 << 10, Journal: journal.Options{Sync: journal.SyncNone}, chunkMask: 3}
	s, err := Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	m := model{}
	steps := 2000
	if testing.Short() {
		steps = 500
	}
	for step := range steps {
		o := gen.op(4, 40)
		if err := o.applyStore(s); err != nil {
			t.Fatalf("step %d %v: %v (seed %d)", step, o, err, seed)
		}
		o.applyModel(m)
		switch rng.IntN(50) {
		case 0:
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = Open(dir, opt); err != nil {
				t.Fatalf("step %d: reopen: %v (seed %d)", step, err, seed)
			}
		case 1:
			if err := s.Compact(); err != nil {
				t.Fatalf("step %d: compact: %v", step, err)
			}
		}
		checkAgainst(t, s, m)
	}
	t.Logf("%d steps: %+v", steps, s.Stats())
}

// TestPartsOfALargeUpdate: a Replace larger than one journal record is written in parts
// and replays whole; parts a crash cut off before the last are dropped.
func TestPartsOfALargeUpdate(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	list := siteList(40_000, 0) // about 3 MB of records: a dozen parts
	if _, err := s.Replace("d1", list[:10]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Replace("d1", list); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	want := s.Digest("d1")
	s.Close()
	var kinds []byte
	j, err := journal.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var recs [][]byte
	j.Replay(func(b []byte) error {
		kinds = append(kinds, b[1])
		recs = append(recs, append([]byte(nil), b...))
		return nil
	})
	j.Close()
	if k := string(kinds); len(k) < 4 || k[:2] != "OP" || k[len(k)-1] != 'L' || strings.Trim(k[1:len(k)-1], "P") != "" {
		t.Fatalf("record kinds %q, want one update then parts ending in L", kinds)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Digest("d1") != want || s.Count("d1") != len(list) {
		t.Fatalf("after reopen: digest %s count %d, want %s %d", s.Digest("d1"), s.Count("d1"), want, len(list))
	}
	s.Close()

	// The same journal without its last part: the update is dropped, the first stays.
	cut := t.TempDir()
	j, err = journal.Open(cut, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs[:len(recs)-1] {
		j.Append(r)
	}
	j.Close()
	s, err = Open(cut, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Count("d1") != 10 || s.Stats().Records != 10 {
		t.Fatalf("a cut update applied: count %d, records %d", s.Count("d1"), s.Stats().Records)
	}
}

const crashChildEnv = "SYNC_CRASH_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

// crashOps is the operations of one crash iteration: the child applies them and the
// parent's model follows them, both from the same seed.
func crashOps(seed uint64, iter int) *opGen {
	return &opGen{rng: rand.New(rand.NewPCG(seed, uint64(iter)))}
}

// crashChild applies random updates with real fsync (journal.SyncAlways), flushing after
// a random number of them and printing the step number each Flush made durable, until
// the parent kills it.
func crashChild(dir string) {
	seed, _ := strconv.ParseUint(os.Getenv("WHITELIST_CRASH_SEED"), 10, 64)
	iter, _ := strconv.Atoi(os.Getenv("SYNC_CRASH_ITER"))
	s, err := Open(dir, Options{CompactBytes: 16 << 10, chunkMask: 3})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	fmt.Println("ready")
	rng := crashOps(seed, iter)
	for step := 1; ; step++ {
		if err := rng.op(4, 60).applyStore(s); err != nil {
			fmt.Fprintln(os.Stderr, "child update:", err)
			os.Exit(3)
		}
		if step%(1+int(seed%5)) == 0 {
			if err := s.Flush(); err != nil {
				fmt.Fprintln(os.Stderr, "child flush:", err)
				os.Exit(3)
			}
			fmt.Println(step)
		}
	}
}

// TestCrashKillsLoseNoFlushedUpdate kills a store applying updates with SIGKILL at random
// moments, reopens it after each kill and checks that it holds the state after a prefix
// of the updates at least as long as the last one Flush returned for: every list equal
// to the model's at that step, digests equal to the digests recomputed.
func TestCrashKillsLoseNoFlushedUpdate(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	seed := testSeed(t, "WHITELIST_CRASH_SEED")
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	m := model{}
	for iter := range 12 {
		acked := 0
		testutil.CrashChild(t, []string{crashChildEnv + "=" + dir, "SYNC_CRASH_ITER=" + strconv.Itoa(iter),
			"WHITELIST_CRASH_SEED=" + strconv.FormatUint(seed, 10)},
			20*time.Second, time.Duration(20+rng.IntN(80))*time.Millisecond, func(line string) {
				if n, err := strconv.Atoi(line); err == nil {
					acked = n
				}
			})
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("iteration %d: reopen after SIGKILL: %v (seed %d)", iter, err, seed)
		}
		// Follow the child's updates on the model up to the flushed step, then on until
		// the states are equal: the updates past the last flush may or may not have
		// reached the file.
		ops := crashOps(seed, iter)
		step := 0
		for ; step < acked; step++ {
			ops.op(4, 60).applyModel(m)
		}
		got := storeModel(s)
		for limit := acked + 10_000; !modelsEqual(got, m); step++ {
			if step == limit {
				t.Fatalf("iteration %d: the reopened store matches no step from %d on (seed %d)", iter, acked, seed)
			}
			ops.op(4, 60).applyModel(m)
		}
		checkAgainst(t, s, m)
		t.Logf("kill %d: flushed through step %d, recovered at step %d; %+v", iter, acked, step, s.Stats())
		s.Close()
		m = m.clone()
	}
}
