package journal

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

const crashChildEnv = "FAJOURNAL_CRASH_CHILD_DIR"

// crashChild runs in a re-executed test binary: it appends from several goroutines as fast
// as it can, compacting now and then, and prints the id of every record whose Append has
// returned. The parent kills it with SIGKILL at a random moment.
func crashChild(dir string) {
	appendChild(dir, childSpec{
		opts: &Options{SegmentSize: 32 << 10}, pad: "x", padBase: 10, padStep: 13, compactEvery: 3 * time.Millisecond,
		queue: (*Journal).AppendAsync,
		done:  (*Journal).Wait,
	})
}

// childSpec is how one kind of crash child appends: queue puts a record in (under the
// compactor's read lock, so a checkpoint sees it in the state or in the journal after it),
// done makes it as durable as the test claims (outside that lock) before its id is printed.
type childSpec struct {
	opts             *Options
	pad              string
	padBase, padStep int
	compactEvery     time.Duration
	queue            func(j *Journal, rec []byte) (Seq, error)
	done             func(j *Journal, seq Seq) error
}

// appendChild runs a crash child: eight goroutines append records "iter/g/i/pad" (pads of
// different lengths) and print "iter/g/i" once done returned, while the main goroutine
// checkpoints and writes a snapshot of every record so far every compactEvery. It never
// returns; the parent SIGKILLs it.
func appendChild(dir string, c childSpec) {
	iter := os.Getenv("FAJOURNAL_CRASH_ITER")
	j, err := Open(dir, c.opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	var (
		mu     sync.RWMutex // orders appends against the compactor's checkpoint
		live   [][]byte     // every record ever appended: the "state" a snapshot holds
		outMu  sync.Mutex
		liveMu sync.Mutex
	)
	if err := j.Replay(func(p []byte) error { live = append(live, append([]byte(nil), p...)); return nil }); err != nil {
		fmt.Fprintln(os.Stderr, "child replay:", err)
		os.Exit(3)
	}
	fmt.Println("ready")
	for g := range 8 {
		go func() {
			pad := strings.Repeat(c.pad, c.padBase+g*c.padStep)
			for i := 0; ; i++ {
				rec := fmt.Appendf(nil, "%s/%d/%d/%s", iter, g, i, pad)
				mu.RLock()
				seq, err := c.queue(j, rec)
				liveMu.Lock()
				live = append(live, rec)
				liveMu.Unlock()
				mu.RUnlock()
				if err == nil {
					err = c.done(j, seq)
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "child append:", err)
					os.Exit(3)
				}
				outMu.Lock()
				fmt.Printf("%s/%d/%d\n", iter, g, i)
				outMu.Unlock()
			}
		}()
	}
	for {
		time.Sleep(c.compactEvery)
		mu.Lock()
		cp, err := j.Checkpoint()
		liveMu.Lock()
		state := append([][]byte(nil), live...)
		liveMu.Unlock()
		mu.Unlock()
		if err != nil {
			os.Exit(3)
		}
		err = j.WriteSnapshot(cp, func(emit func([]byte) error) error {
			for _, r := range state {
				if err := emit(r); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "child snapshot:", err)
			os.Exit(3)
		}
	}
}

func TestCrashKillsLoseNoAcknowledgedAppend(t *testing.T) {
	killAndReplay(t, crashChildEnv, 24, 0, 30, false, "acknowledged append")
}

// killAndReplay runs the crash child named by childEnv kills times in dir, SIGKILLing it
// after 2 to 2+maxDelayMs ms, and after each kill replays the journal: no record twice,
// every record the child printed (done) still there, and with inOrder each goroutine's
// records a gap-free prefix 0, 1, …, n. stream picks the seed's random stream; what names a
// printed record in failures.
func killAndReplay(t *testing.T, childEnv string, kills int, stream uint64, maxDelayMs int, inOrder bool, what string) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("JOURNAL_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (JOURNAL_CRASH_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), stream))
	dir := t.TempDir()
	done := map[string]bool{}
	for iter := range kills {
		n := testutil.CrashChild(t, []string{childEnv + "=" + dir, "FAJOURNAL_CRASH_ITER=" + strconv.Itoa(iter)},
			10*time.Second, time.Duration(2+rng.IntN(maxDelayMs))*time.Millisecond, func(id string) { done[id] = true })

		j, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("iteration %d: reopen after SIGKILL: %v", iter, err)
		}
		found := map[string]bool{}
		nextOf := map[string]int{} // "iter/g" → the next i expected
		err = j.Replay(func(p []byte) error {
			f := strings.SplitN(string(p), "/", 4)
			k := f[0] + "/" + f[1] + "/" + f[2]
			if found[k] {
				return fmt.Errorf("record %s replayed twice", k)
			}
			found[k] = true
			if inOrder {
				i, _ := strconv.Atoi(f[2])
				g := f[0] + "/" + f[1]
				if i != nextOf[g] {
					return fmt.Errorf("record %s follows %s/%d: the file is not a prefix of the appends", k, g, nextOf[g]-1)
				}
				nextOf[g] = i + 1
			}
			return nil
		})
		j.Close()
		if err != nil {
			t.Fatalf("iteration %d: %v (seed %d)", iter, err, seed)
		}
		for id := range done {
			if !found[id] {
				t.Fatalf("iteration %d: %s %s lost (seed %d)", iter, what, id, seed)
			}
		}
		t.Logf("kill %d: %d done this run, %d in all, %d records on disk", iter, n, len(done), len(found))
	}
}
