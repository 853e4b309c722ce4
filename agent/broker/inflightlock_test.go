package broker

import (
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestInflightNextImmediateWithWriters: mochi calls Inflight.NextImmediate on a client's
// reader goroutine after each packet while the client has messages in flight, and
// publishers add to the same set (Inflight.Set) on their own goroutines. mochi v2.7.9's
// NextImmediate took the read lock twice (its own, then GetAll's): a Set waiting between
// the two blocked the second for good, and both goroutines hung (the terminal's reader and,
// in the agent, the outbox's send).
func TestInflightNextImmediateWithWriters(t *testing.T) {
	in := mqtt.NewInflights()
	in.Set(packets.Packet{PacketID: 1, FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}})
	const rounds = 20_000 // mochi v2.7.9 hung within a few thousand here (-race)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range rounds {
			in.NextImmediate()
		}
	}()
	go func() {
		defer wg.Done()
		for i := range rounds {
			id := uint16(2 + i%8)
			in.Set(packets.Packet{PacketID: id, FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}})
			in.Delete(id)
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("NextImmediate and Set deadlocked")
	}
}
