package journal

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
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
