package mqtt

import (
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestInflightNextImmediateWithWriters: mochi calls Inflight.NextImmediate on a client's
// reader goroutine after each packet while the client has messages in flight, and
// publishers add to the same set (Inflight.Set) on their own goroutines. mochi v2.7.9's
// NextImmediate took the read lock twice (its own, then GetAll's): a Set waiting between
// the two blocked the second for good, and both goroutines hung (the terminal's reader and,
// in the agent, the outbox's send).
func TestInflightNextImmediateWithWriters(t *testing.T) {
	in := NewInflights()
	in.Set(packets.Packet{PacketID: 1, FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}})
	runAgainst(t, "NextImmediate and Set", func(int) { in.NextImmediate() }, func(i int) {
		id := uint16(2 + i%8)
		in.Set(packets.Packet{PacketID: id, FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}})
		in.Delete(id)
	})
}

// runAgainst runs reader and writer 20,000 times each on goroutines of their own (mochi
// v2.7.9's double read locks hung within a few thousand rounds under -race) and fails the
// test if they have not both finished within 20 s: what deadlocked is named by what.
func runAgainst(t *testing.T, what string, reader, writer func(round int)) {
	t.Helper()
	const rounds = 20_000
	var wg sync.WaitGroup
	wg.Add(2)
	for _, f := range []func(int){reader, writer} {
		go func(f func(int)) { // this module is go 1.21: a loop variable is shared
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				f(i)
			}
		}(f)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal(what + " deadlocked")
	}
}
