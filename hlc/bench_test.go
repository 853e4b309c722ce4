package hlc

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// go test -run '^$' -bench . -benchmem -benchtime 1s ./hlc

var (
	sinkTS  Timestamp
	sinkErr error
)

func BenchmarkParse(b *testing.B) {
	for _, in := range []struct{ name, text string }{
		{"padded", "001696374425000:00001:StateStore"},
		{"unpadded", "1696374425000:1:StateStore"},
		{"uuid-node", "001732271234567:00042:01934f5e-7a2b-7c3d-8e4f-5a6b7c8d9e0f"},
	} {
		buf := []byte(in.text)
		b.Run(in.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				sinkTS, sinkErr = Parse(buf)
			}
		})
	}
	// The SDKs' way (strings.Split, strconv, a fresh node string), for scale.
	b.Run("split-strconv-baseline", func(b *testing.B) {
		s := "001696374425000:00001:StateStore"
		b.ReportAllocs()
		b.SetBytes(int64(len(s)))
		for b.Loop() {
			parts := strings.Split(s, ":")
			w, _ := strconv.ParseInt(parts[0], 10, 64)
			c, _ := strconv.ParseUint(parts[1], 10, 32)
			sinkTS = Timestamp{Wall: w, Counter: uint32(c), Node: strings.Clone(parts[2])}
		}
	})
}

// BenchmarkParseDistinctNodes parses more distinct node ids than the intern table holds: the
// worst case, one allocation per Parse.
func BenchmarkParseDistinctNodes(b *testing.B) {
	inputs := make([][]byte, 4*internSlots)
	for i := range inputs {
		inputs[i] = []byte("001696374425000:00001:client-" + strconv.Itoa(i))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		sinkTS, sinkErr = Parse(inputs[i%len(inputs)])
		i++
	}
}

func BenchmarkAppendText(b *testing.B) {
	ts := Timestamp{Wall: 1696374425000, Counter: 1, Node: "StateStore"}
	buf := make([]byte, 0, 64)
	b.Run("AppendText", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(ts.AppendText(nil))))
		for b.Loop() {
			buf = ts.AppendText(buf[:0])
		}
	})
	b.Run("fmt-baseline", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(ts.AppendText(nil))))
		for b.Loop() {
			buf = fmt.Appendf(buf[:0], "%015d:%05d:%s", ts.Wall, ts.Counter, ts.Node)
		}
	})
}

// fixedMillis is a physical clock that costs nothing, so the clock benchmarks measure the
// clock; "system-clock" variants add time.Now.
func fixedMillis() int64 { return 1696374425000 }

func BenchmarkUpdate(b *testing.B) {
	remote := Timestamp{Wall: 1696374425000, Counter: 3, Node: "CLIENT"}
	b.Run("fixed-clock", func(b *testing.B) {
		c := NewClock("StateStore", WithWallClock(fixedMillis))
		b.ReportAllocs()
		for b.Loop() {
			sinkTS, sinkErr = c.Update(remote)
		}
	})
	b.Run("system-clock", func(b *testing.B) {
		c := NewClock("StateStore")
		remote := remote
		remote.Wall = time.Now().UnixMilli()
		b.ReportAllocs()
		for b.Loop() {
			sinkTS, sinkErr = c.Update(remote)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		c := NewClock("StateStore", WithWallClock(fixedMillis))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = c.Update(remote)
			}
		})
	})
}

func BenchmarkNow(b *testing.B) {
	c := NewClock("CLIENT", WithWallClock(fixedMillis))
	b.ReportAllocs()
	for b.Loop() {
		sinkTS = c.Now()
	}
}

// casClock is the lock-free alternative to Clock's mutex, kept here only to measure the choice:
// wall and counter packed into one uint64 (wall 44 bits above a 2020 base, counter 20 bits),
// advanced with a CAS loop. It is the Now event only; the packing is what the real clock would
// have to give up (walls after 2577, counters above 1M).
type casClock struct {
	state atomic.Uint64
	now   func() int64
}

const casBase, casCounterBits = 1577836800000, 20

func (c *casClock) Now() Timestamp {
	pt := uint64(c.now()-casBase) << casCounterBits
	for {
		old := c.state.Load()
		next := old + 1
		if pt > old {
			next = pt
		}
		if c.state.CompareAndSwap(old, next) {
			return Timestamp{Wall: int64(next>>casCounterBits) + casBase, Counter: uint32(next & (1<<casCounterBits - 1)), Node: "CLIENT"}
		}
	}
}

// BenchmarkClockSync compares Clock.Now (mutex) with the CAS design, serially and with all
// CPUs hammering one clock.
func BenchmarkClockSync(b *testing.B) {
	mutexClock := NewClock("CLIENT", WithWallClock(fixedMillis))
	cas := &casClock{now: fixedMillis}
	for _, v := range []struct {
		name string
		now  func() Timestamp
	}{{"mutex", mutexClock.Now}, {"cas", cas.Now}} {
		b.Run(v.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sinkTS = v.now()
			}
		})
		b.Run(v.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					v.now()
				}
			})
		})
	}
}

// BenchmarkSystemMillis is the default physical clock alone, to read the system-clock rows
// against.
func BenchmarkSystemMillis(b *testing.B) {
	var sink int64
	for b.Loop() {
		sink += systemMillis()
	}
	_ = sink
}
