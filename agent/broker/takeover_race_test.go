package broker

import (
	"fmt"
	"testing"
	"time"
)

// TestTakeoverDuringPublishes: messages published while a persistent session is being
// taken over by a reconnecting client all reach it, with sessions in memory or on disk.
// mochi alone lost the few routed to the old client mid-takeover (see takeoverGuard).
func TestTakeoverDuringPublishes(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testTakeoverDuringPublishes(t, "") })
	t.Run("datadir", func(t *testing.T) { testTakeoverDuringPublishes(t, t.TempDir()) })
}

func testTakeoverDuringPublishes(t *testing.T, dir string) {
	b1 := startBroker(t, Options{AllowAnonymous: true, DataDir: dir})
	dial(t, b1.Addr(), "back-office", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"results"}}).close()
	const total = 1000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range total {
			_ = b1.Server().Publish("results", []byte(fmt.Sprint(i)), false, 1)
		}
	}()
	f := false
	back := dial(t, b1.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600, noSubscribe: true})
	<-done
	seen := map[string]bool{}
	for len(seen) < total {
		select {
		case m := <-back.other:
			seen[string(m.Payload)] = true
		case <-time.After(5 * time.Second):
			var missing []int
			for i := range total {
				if !seen[fmt.Sprint(i)] {
					missing = append(missing, i)
				}
			}
			t.Fatalf("%d of %d messages; missing %v", len(seen), total, missing)
		}
	}
}
