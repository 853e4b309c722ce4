package backlog

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// processCPU is the process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGatheringPokes: what a stream of pokes costs a gathering publisher, as the
// forwarder (no settled) and the reporter (settled asked at most every settleEvery) get
// one per ack or result: an op is one message added and its poke, one every 20 µs (the
// poking loop spins in between: a sleep that short costs more than what is measured),
// with a 5 ms gathering. cpu-ns/poke is the whole process's CPU: the 20 µs of spinning
// plus what the publisher spends, in wake-ups, settled questions and drains.
func BenchmarkGatheringPokes(b *testing.B) {
	for _, c := range []struct {
		name    string
		settled bool
	}{{"forwarder", false}, {"reporter", true}} {
		b.Run(c.name, func(b *testing.B) {
			ready := make(chan struct{}, 1)
			var pending, drains, asked atomic.Int64
			g := Gathering{Wait: 5 * time.Millisecond}
			if c.settled {
				g.Settled = func() bool { asked.Add(1); return false }
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				run(ctx, ready, g, func(context.Context) (bool, int, error) {
					drains.Add(1)
					return false, int(pending.Swap(0)), nil
				}, func(error, time.Duration) {})
			}()
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				pending.Add(1)
				poke(ready)
				for t := time.Now(); time.Since(t) < 20*time.Microsecond; {
				}
			}
			cpu := processCPU() - cpu0
			cancel()
			<-done
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/poke")
			b.ReportMetric(float64(drains.Load())/float64(b.N), "drains/poke")
			b.ReportMetric(float64(asked.Load())/float64(b.N), "settled/poke")
		})
	}
}
