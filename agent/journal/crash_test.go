package journal

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const crashChildEnv = "FAJOURNAL_CRASH_CHILD_DIR"

// crashChild runs in a re-executed test binary: it appends from several goroutines as fast
// as it can, compacting now and then, and prints the id of every record whose Append has
// returned. The parent kills it with SIGKILL at a random moment.
func crashChild(dir string) {
	iter := os.Getenv("FAJOURNAL_CRASH_ITER")
	j, err := Open(dir, &Options{SegmentSize: 32 << 10})
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
			pad := strings.Repeat("x", 10+g*13)
			for i := 0; ; i++ {
				rec := fmt.Appendf(nil, "%s/%d/%d/%s", iter, g, i, pad)
				mu.RLock()
				seq, err := j.AppendAsync(rec)
				liveMu.Lock()
				live = append(live, rec)
				liveMu.Unlock()
				mu.RUnlock()
				if err == nil {
					err = j.Wait(seq)
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
		time.Sleep(3 * time.Millisecond)
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
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("JOURNAL_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (JOURNAL_CRASH_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	dir := t.TempDir()
	acked := map[string]bool{}
	const kills = 24
	for iter := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, "FAJOURNAL_CRASH_ITER="+strconv.Itoa(iter))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		select {
		case l := <-lines:
			if l != "ready" {
				t.Fatalf("child said %q", l)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatal("child did not start")
		}
		kill := time.After(time.Duration(2+rng.IntN(30)) * time.Millisecond)
		n := 0
	collect:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break collect
				}
				acked[l] = true
				n++
			case <-kill:
				cmd.Process.Signal(syscall.SIGKILL)
				kill = nil
			}
		}
		cmd.Wait()
		if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || st.Signal() != syscall.SIGKILL {
			t.Fatalf("iteration %d: child ended with %v, not by SIGKILL", iter, cmd.ProcessState)
		}

		j, err := Open(dir, nil)
		if err != nil {
			t.Fatalf("iteration %d: reopen after SIGKILL: %v", iter, err)
		}
		found := map[string]bool{}
		err = j.Replay(func(p []byte) error {
			s := string(p)
			k := s[:strings.LastIndexByte(s, '/')]
			if found[k] {
				return fmt.Errorf("record %s replayed twice", k)
			}
			found[k] = true
			return nil
		})
		j.Close()
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		for id := range acked {
			if !found[id] {
				t.Fatalf("iteration %d: acknowledged append %s lost (seed %d)", iter, id, seed)
			}
		}
		t.Logf("kill %d: %d acked this run, %d acked in all, %d records on disk", iter, n, len(acked), len(found))
	}
}
