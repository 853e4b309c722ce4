package broker

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// TestCompactionsAndFullDiskTogether: writers put, delete and drop clients' records while
// the disk fills and frees again every few tens of milliseconds and the journal compacts
// every 64 KiB of dead bytes, so that compactions start, fail and finish around the
// journal's failures and Resets. Once the disk is back the committer takes writes again,
// and what a reopened journal replays is exactly what the committer holds as committed.
func TestCompactionsAndFullDiskTogether(t *testing.T) {
	for round := range 2 {
		dir := t.TempDir()
		bfs := &budgetFS{budget: -1}
		j, err := journal.Open(dir, &journal.Options{FS: bfs, SegmentSize: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		c := newCommitter(j, slog.New(slog.DiscardHandler))
		c.minDead = 64 << 10
		if err := c.replay(nil); err != nil {
			t.Fatal(err)
		}
		c.start()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				val := make([]byte, 1024)
				for {
					select {
					case <-stop:
						return
					default:
					}
					client := fmt.Sprintf("c%d", r.IntN(8))
					switch k := inflightKey(client, uint16(r.IntN(40)+1)); r.IntN(10) {
					case 0: // a clean start over the session
						_, _ = c.enqueue(write{dropClient: client, key: clientKey(client), value: []byte("client")})
					case 1, 2, 3: // an acknowledgement
						_, _ = c.enqueue(write{key: k})
					default:
						_ = c.enqueueWait(write{key: k, value: val[:r.IntN(len(val))+1]})
					}
				}
			}()
		}
		r := rand.New(rand.NewPCG(uint64(round), 99))
		for end := time.Now().Add(time.Second); time.Now().Before(end); {
			bfs.setBudget(int64(r.IntN(300 << 10)))
			time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
			bfs.setBudget(-1)
			time.Sleep(time.Duration(r.IntN(60)) * time.Millisecond)
		}
		close(stop)
		wg.Wait()
		eventually(t, "the journal taking writes again", func() bool {
			_ = c.enqueueWait(write{key: subscriptionKey("probe", "p"), value: []byte("p")})
			return c.brokenErr() == nil
		})
		st := c.stats()
		if st.Failures == 0 || st.Compactions == 0 {
			t.Fatalf("round %d: %d failures and %d compactions: the run did not mix them", round, st.Failures, st.Compactions)
		}
		want := liveKeys(c)
		if err := c.close(); err != nil {
			t.Fatal(err)
		}
		reopened := openTestCommitter(t, dir)
		got := liveKeys(reopened)
		_ = reopened.close()
		if got != want {
			t.Fatalf("round %d (%+v): a reopened journal replays\n%.400s\nwhere the committer held\n%.400s", round, st, got, want)
		}
	}
}
