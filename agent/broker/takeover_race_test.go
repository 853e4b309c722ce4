package broker

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestTakeoverDuringPublishes: messages published while a persistent session is being
// taken over by a reconnecting client all reach it, each once unless resent with DUP, with
// sessions in memory or on disk. mochi alone lost the few routed to the old client
// mid-takeover (see takeoverGuard); the resumed connection got up to a hundred of them
// twice, without DUP (TestResumeWithoutSendQuotaSendsWaitingMessagesOnce in the mochi
// fork, TestLateHooksOfACopiedMessageRedeliverNothing).
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
	got := countReceipts(t, back)
	<-done
	// Published after all the others: a copy sent twice before it arrives is counted.
	if err := b1.Server().Publish("results", []byte("last"), false, 1); err != nil {
		t.Fatal(err)
	}
	want := []string{"last"}
	for i := range total {
		want = append(want, fmt.Sprint(i))
	}
	missing := got.waitFor(want, 5*time.Second)
	if len(missing) > 0 {
		t.Errorf("%d of %d messages; missing %v", len(want)-len(missing), len(want), missing)
	}
	if again := got.sentAgain(); len(again) > 0 {
		t.Errorf("%d messages received again without DUP: %v", len(again), again)
	}
}

// receipts counts the messages a client receives on client.other, taking each off the
// channel as it comes: resends of messages not yet acknowledged, which QoS 1 allows with
// DUP set, cannot fill the client's bounded queue.
type receipts struct {
	mu    sync.Mutex
	count map[string]int
	again []string      // received a second time or more without DUP
	news  chan struct{} // a message came (capacity 1: a wake-up, not a count)
}

// countReceipts drains c.other into a receipts until the test ends.
func countReceipts(t *testing.T, c *client) *receipts {
	r := &receipts{count: make(map[string]int), news: make(chan struct{}, 1)}
	stop := make(chan struct{})
	ended := make(chan struct{})
	t.Cleanup(func() { close(stop); <-ended })
	go func() {
		defer close(ended)
		for {
			select {
			case m := <-c.other:
				p := string(m.Payload)
				r.mu.Lock()
				r.count[p]++
				if r.count[p] > 1 && !m.Duplicate() {
					r.again = append(r.again, p)
				}
				r.mu.Unlock()
				select {
				case r.news <- struct{}{}:
				default:
				}
			case <-stop:
				return
			}
		}
	}()
	return r
}

// waitFor waits until every payload in want has come, as long as messages keep coming
// within idle of each other, and returns those that did not.
func (r *receipts) waitFor(want []string, idle time.Duration) []string {
	for {
		var missing []string
		r.mu.Lock()
		for _, p := range want {
			if r.count[p] == 0 {
				missing = append(missing, p)
			}
		}
		r.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-r.news:
		case <-time.After(idle):
			return missing
		}
	}
}

// sentAgain returns the payloads received again without DUP.
func (r *receipts) sentAgain() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.again...)
}
