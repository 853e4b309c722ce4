package journal

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAppend measures durable appends (fsync on) of 200-byte records from 1, 16 and 64
// concurrent producers: the group commit at work.
func BenchmarkAppend(b *testing.B) {
	rec := make([]byte, 200)
	for _, p := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("producers=%d", p), func(b *testing.B) {
			j, err := Open(b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range p {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if err := j.Append(rec); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			st := j.Stats()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
			b.ReportMetric(float64(st.Records)/float64(max(st.Batches, 1)), "records/fsync")
		})
	}
}

// BenchmarkWriteOut measures WriteOut, which the agent calls before every command it
// sends: idle (nothing queued since the last write: two atomic loads), one 200-byte lazy
// record queued (AppendLazy + WriteOut: one write(2), no fsync). LazyDelay is an hour, so
// the writer goroutine never fsyncs in between.
func BenchmarkWriteOut(b *testing.B) {
	rec := make([]byte, 200)
	open := func(b *testing.B) *Journal {
		j, err := Open(b.TempDir(), &Options{LazyDelay: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { j.Close() })
		return j
	}
	b.Run("idle", func(b *testing.B) {
		j := open(b)
		b.ReportAllocs()
		for b.Loop() {
			if err := j.WriteOut(); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same while another goroutine appends durably without pause, so the writer
	// goroutine writes and fsyncs the same file all the time: what a WriteOut costs when
	// it meets an fsync in progress (on ext4 a write that grows the file can wait for the
	// journal commit that fsync runs). With segment preallocation (the default) and
	// without, in the same run: worst, p99 and p99.9 of the single WriteOut, and how many
	// in 10,000 took over 1 ms; rotations counts the segments filled meanwhile (none
	// expected: each would hold WriteOut through its fsyncs).
	b.Run("one-queued-during-fsyncs", func(b *testing.B) {
		for _, prealloc := range []bool{false, true} {
			b.Run(fmt.Sprintf("prealloc=%v", prealloc), func(b *testing.B) {
				// Segments large enough that a run fills none: a rotation's fsyncs
				// would hold WriteOut in either mode and hide the difference.
				j, err := Open(b.TempDir(), &Options{LazyDelay: time.Hour, SegmentSize: 512 << 20, noPreallocate: !prealloc})
				if err != nil {
					b.Fatal(err)
				}
				defer j.Close()
				writeOutDuringFsyncs(b, j, rec)
			})
		}
	})
	b.Run("one-queued", func(b *testing.B) {
		j := open(b)
		b.SetBytes(int64(len(rec)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := j.AppendLazy(rec); err != nil {
				b.Fatal(err)
			}
			if err := j.WriteOut(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBurstAfterQuiet measures what an intake message costs the journal after a
// quiet spell: 64 records appended one by one (AppendAsync, as the outbox stores a message
// of 64 tasks), then Wait for the last, on a journal idle for longer than BatchWindow.
// SyncBatch with the default window (2 ms) and SyncAlways; fsyncs/op counts the batches.
func BenchmarkBurstAfterQuiet(b *testing.B) {
	rec := make([]byte, 200)
	for _, pol := range []SyncPolicy{SyncBatch, SyncAlways} {
		b.Run(pol.String(), func(b *testing.B) {
			j, err := Open(b.TempDir(), &Options{Sync: pol})
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				time.Sleep(3 * time.Millisecond) // quiet: longer than the window
				b.StartTimer()
				var last Seq
				for range 64 {
					if last, err = j.AppendAsync(rec); err != nil {
						b.Fatal(err)
					}
				}
				if err := j.Wait(last); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(j.Stats().Batches)/float64(b.N), "fsyncs/op")
		})
	}
}

// writeOutDuringFsyncs runs AppendLazy + WriteOut of rec in b.Loop while another goroutine
// appends durably without pause, and reports the distribution of the WriteOut calls.
//
// On a loaded machine most slow calls are the caller waiting for a CPU, in either mode. So
// the scheduler statistics of the thread running the call (/proc/self/task/TID/schedstat:
// time on a CPU, time runnable but waiting for one) are read around every call: what is
// left of a slow call's wall time is time asleep in the kernel (or parked on the journal's
// write mutex), and asleep-over-1ms/1e4 (-100µs/1e4) counts the calls that slept over 1 ms
// (100 µs): the stalls behind the filesystem without the scheduler's. A call over 100 µs
// that ended on another thread than it started on cannot be split and counts in
// migrated/1e4 (the goroutine is not locked to
// its thread: that would make every wake-up a thread hand-off and change what is measured).
func writeOutDuringFsyncs(b *testing.B, j *Journal, rec []byte) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := j.Append(rec); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	sched := newSchedStats(b)
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	lat := make([]time.Duration, 0, 1<<20)
	asleep100µs, asleep1ms, migrated := 0, 0, 0
	for b.Loop() {
		if _, err := j.AppendLazy(rec); err != nil {
			b.Fatal(err)
		}
		tid0 := gettid()
		onCPU0, waited0 := sched.read(tid0)
		t0 := time.Now()
		if err := j.WriteOut(); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		lat = append(lat, d)
		if d > 100*time.Microsecond {
			if tid := gettid(); tid != tid0 {
				migrated++
			} else {
				onCPU1, waited1 := sched.read(tid)
				switch slept := d - (onCPU1 - onCPU0) - (waited1 - waited0); {
				case slept > time.Millisecond:
					asleep1ms++
					fallthrough
				case slept > 100*time.Microsecond:
					asleep100µs++
				}
			}
		}
	}
	close(stop)
	wg.Wait()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	slow := len(lat) - sort.Search(len(lat), func(i int) bool { return lat[i] > time.Millisecond })
	at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e3 }
	per1e4 := func(n int) float64 { return float64(n) * 1e4 / float64(len(lat)) }
	b.ReportMetric(float64(lat[len(lat)-1])/1e3, "worst-µs")
	b.ReportMetric(at(0.99), "p99-µs")
	b.ReportMetric(at(0.999), "p99.9-µs")
	b.ReportMetric(per1e4(slow), "over-1ms/1e4")
	if sched.available() {
		b.ReportMetric(per1e4(asleep100µs), "asleep-over-100µs/1e4")
		b.ReportMetric(per1e4(asleep1ms), "asleep-over-1ms/1e4")
		b.ReportMetric(per1e4(migrated), "migrated/1e4")
	}
	b.ReportMetric(float64(j.Stats().Segments-1), "rotations")
}
