package broker

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// sessionsBound is the most the sessions journal's directory may occupy with live bytes
// of live records and segments of segment bytes (doc.go, "Persistence"): the files
// (live + max(segment, live) dead bytes), a snapshot being written (live) and the new open
// segment's reserved blocks (segment), plus slack for the group commit that crossed the
// threshold and block rounding.
func sessionsBound(live, segment int64) int64 {
	return 2*live + max(segment, live) + segment + 256<<10
}

// TestSessionsJournalStaysBoundedUnderLoad: the Azure IoT Operations SDK's state store
// client (a kept session with CleanStart false and session expiry 0xFFFFFFFF, many
// requests in flight, each answered with a QoS 1 message to that session that it
// acknowledges: GETs of 1 KB values and SETs), at 8 and then 64 requests in flight, while
// one kept session never acknowledges what it gets and another is connected but never
// reads, each sent a message for every fourth request: the sessions journal's directory
// stays within the stated bound of its live records at every sample.
func TestSessionsJournalStaysBoundedUnderLoad(t *testing.T) {
	const (
		segment     = 256 << 10
		perPhase    = 4000
		stuckEvery  = 4
		sampleEvery = 100
	)
	dataDir := t.TempDir()
	b := startBroker(t, Options{DataDir: dataDir, SessionsSegmentSize: segment, MaxInflight: 500})
	dir := filepath.Join(dataDir, SessionsDir)

	neverAcks, _ := connectKept(t, b.Addr(), "never-acks", true)
	subscribeMem(t, neverAcks, "stuck/acks")
	go func() { _, _ = io.Copy(io.Discard, neverAcks.conn) }() // reads, never acknowledges
	notReading, _ := connectKept(t, b.Addr(), "not-reading", true)
	subscribeMem(t, notReading, "stuck/reads")

	f := false
	sdk := dial(t, b.Addr(), "sdk-statestore", dialOptions{cleanStart: &f, sessionExpiry: 0xFFFFFFFF})
	value := strings.Repeat("v", 1024)
	deadline := time.Now().Add(60 * time.Second)

	var worst struct {
		sync.Mutex
		over, disk, bound, live int64
		samples                 int
	}
	sample := func() {
		st := b.SessionsStats()
		disk := testutil.DirDiskBytes(t, dir)
		bound := sessionsBound(st.LiveBytes, segment)
		worst.Lock()
		defer worst.Unlock()
		worst.samples++
		if over := disk - bound; worst.samples == 1 || over > worst.over {
			worst.over, worst.disk, worst.bound, worst.live = over, disk, bound, st.LiveBytes
		}
	}

	for _, inflight := range []int{8, 64} {
		err := stateStoreLoad(sdk, inflight, perPhase, value, func(n int64) error {
			if time.Now().After(deadline) {
				return fmt.Errorf("%d in flight: request %d after the deadline", inflight, n)
			}
			return nil
		}, func(n int64) error {
			if n%stuckEvery == 0 {
				for _, topic := range []string{"stuck/acks", "stuck/reads"} {
					if err := b.PublishDeferred(topic, fmt.Appendf(nil, "stuck-%d", n), 1); err != nil {
						return err
					}
				}
			}
			if n%sampleEvery == 0 {
				sample()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sample()
	}
	st := b.SessionsStats()
	t.Logf("%d samples; closest to the bound: %d bytes on disk, bound %d (live %d); at the end: %+v",
		worst.samples, worst.disk, worst.bound, worst.live, st)
	if worst.over > 0 {
		t.Fatalf("the sessions journal occupied %d bytes, %d over its bound %d (live records %d bytes)",
			worst.disk, worst.over, worst.bound, worst.live)
	}
	if st.Compactions == 0 {
		t.Fatal("no compaction in the whole run")
	}
}

// stateStoreLoad is the state store SDK's load from sdk: requests 1 to total, sent by
// inflight goroutines, each on a key of its own, GETs and (even n) SETs of value, each
// waited for until its answer comes (waitFor). before(n) runs before request n is sent and
// after(n) once it is answered (nil: nothing); an error from either, or a request that
// fails, stops that goroutine. It returns once every goroutine stopped, with the first
// error.
func stateStoreLoad(sdk *client, inflight int, total int64, value string, before, after func(n int64) error) error {
	var next atomic.Int64
	errs := make(chan error, inflight)
	var wg sync.WaitGroup
	for g := range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("key-%d", g)
			for {
				n := next.Add(1)
				if n > total {
					return
				}
				if before != nil {
					if err := before(n); err != nil {
						errs <- err
						return
					}
				}
				payload := cmd("GET", key)
				if n%2 == 0 {
					payload = cmd("SET", key, value)
				}
				_, wait, err := sdk.publish(payload, req{})
				if err != nil {
					errs <- err
					return
				}
				select {
				case <-wait:
				case <-time.After(waitFor):
					errs <- fmt.Errorf("no response to request %d", n)
					return
				}
				if after != nil {
					if err := after(n); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
