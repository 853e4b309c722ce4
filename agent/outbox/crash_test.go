package outbox

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

const crashChildEnv = "OUTBOX_CRASH_CHILD_DIR"

// crashChild runs in a re-executed test binary: producers enqueue tasks for 8 terminals
// that ack (or refuse) after a random delay, a reporter reports results, and every accepted
// task id is printed once its Enqueue returned nil. The parent kills it with SIGKILL.
func crashChild(dir string) {
	iter := os.Getenv("OUTBOX_CRASH_ITER")
	var ob *Outbox
	var obReady sync.WaitGroup
	obReady.Add(1)
	sender := SenderFunc(func(_ context.Context, dev string, cmd Command) error {
		go func() {
			obReady.Wait()
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) // the terminal's work
			code := 0
			if rand.IntN(20) == 0 {
				code = 9
			}
			ob.Ack(dev, cmd.MessageID, code, "")
		}()
		return nil
	})
	cfg := map[string]DeviceConfig{}
	for d := range 8 {
		cfg[fmt.Sprintf("d%d", d)] = DeviceConfig{NoHeartbeat: true}
	}
	var err error
	ob, err = Open(dir, sender, &Options{Devices: cfg, CompactAfter: 300,
		Settings: Settings{RetryInterval: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	obReady.Done()
	var outMu sync.Mutex
	fmt.Println("ready")
	for g := range 4 {
		go func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("%s-%d-%d", iter, g, i)
				err := ob.Enqueue(Task{MessageID: id, DeviceID: fmt.Sprintf("d%d", rand.IntN(8)),
					Op: "AddPerson", PersonID: strconv.Itoa(rand.IntN(50)), Payload: []byte(id)})
				if err != nil && !strings.Contains(err.Error(), "full") {
					fmt.Fprintln(os.Stderr, "child enqueue:", err)
					os.Exit(3)
				}
				if err == nil {
					outMu.Lock()
					fmt.Println(id)
					outMu.Unlock()
				}
			}
		}()
	}
	for {
		<-ob.ResultsReady()
		res, err := ob.Results(50)
		if err != nil {
			os.Exit(3)
		}
		var ids []string
		for _, r := range res {
			ids = append(ids, r.MessageID)
		}
		ob.MarkReported(ids...)
	}
}

// TestCrashKillsLoseNoAcceptedTask kills a busy outbox with SIGKILL at random moments and
// checks, after each kill, that the journal opens and every task whose Enqueue had returned
// nil is still known: in the table, or finished and remembered as reported.
func TestCrashKillsLoseNoAcceptedTask(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OUTBOX_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (OUTBOX_CRASH_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	var accepted []string
	for iter := range 20 {
		n := testutil.CrashChild(t, []string{crashChildEnv + "=" + dir, "OUTBOX_CRASH_ITER=" + strconv.Itoa(iter)},
			20*time.Second, time.Duration(5+rng.IntN(40))*time.Millisecond, func(id string) { accepted = append(accepted, id) })
		j, err := journal.Open(dir, nil)
		if err != nil {
			t.Fatalf("iteration %d: reopen after SIGKILL: %v", iter, err)
		}
		tb := newTable()
		var r record
		err = j.Replay(func(p []byte) error {
			if err := decodeRecord(p, &r); err != nil {
				return err
			}
			return tb.apply(&r)
		})
		j.Close()
		if err != nil {
			t.Fatalf("iteration %d: replay: %v", iter, err)
		}
		for _, id := range accepted {
			if !tb.seen(id) {
				t.Fatalf("iteration %d: accepted task %s lost (seed %d)", iter, id, seed)
			}
		}
		t.Logf("kill %d: %d accepted this run, %d in all; table holds %d", iter, n, len(accepted), tb.items.len())
	}
}
