package journal

import (
	"fmt"
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
	// it meets an fsync in progress (on ext4 a write can wait for the running journal
	// transaction).
	b.Run("one-queued-during-fsyncs", func(b *testing.B) {
		j := open(b)
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
		b.SetBytes(int64(len(rec)))
		b.ReportAllocs()
		var worst time.Duration
		for b.Loop() {
			if _, err := j.AppendLazy(rec); err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			if err := j.WriteOut(); err != nil {
				b.Fatal(err)
			}
			worst = max(worst, time.Since(t0))
		}
		close(stop)
		wg.Wait()
		b.ReportMetric(float64(worst.Microseconds()), "worst-µs")
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
