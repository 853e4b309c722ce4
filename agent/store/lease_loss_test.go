package store

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// TestLeaseLossNotHeldBackByAHangingRenewal: a renewal that gets no answer must not block
// the lease's loop for a whole RenewEvery, or the loss (the TTL running out, the DELETE of
// the expired key) would be signalled up to RenewEvery late while the holder still acts on
// the lease. The renewal ends with the lease.
func TestLeaseLossNotHeldBackByAHangingRenewal(t *testing.T) {
	_, url := startEmbedded(t, "", "", nil)
	c := connect(t, url, func(o *Options) { o.ClientID = "hanging-holder" })
	var sets atomic.Int32
	c.mu.Lock() // the lease's requests take c.mu before reading testMutate
	c.testMutate = func(p *paho.Publish) {
		if bytes.Contains(p.Payload, []byte("NEX")) && sets.Add(1) > 1 {
			// Renewals reach the store, whose answer goes where nobody listens.
			p.Properties.ResponseTopic += "/nobody"
		}
	}
	c.mu.Unlock()

	// RenewEvery close to the TTL makes the delay a blocking renewal would cause (until
	// start+2*RenewEvery) far larger than the slack allowed below.
	const ttl, every = 1500 * time.Millisecond, 1400 * time.Millisecond
	start := time.Now()
	l, err := c.TryAcquire(ctxT(t), "hang", &LeaseOptions{TTL: ttl, RenewEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("lease never signalled lost")
	}
	if late := time.Since(start) - ttl; late > 700*time.Millisecond {
		t.Fatalf("loss signalled %v after the TTL ran out (renewals every %v)", late, every)
	}
	if !errors.Is(l.Err(), ErrLeaseLost) {
		t.Fatalf("Err = %v, want ErrLeaseLost", l.Err())
	}
	if sets.Load() < 2 {
		t.Fatalf("no renewal was attempted (%d SETs)", sets.Load())
	}
}
