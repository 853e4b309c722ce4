//go:build linux

package journal

import (
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func gettid() int { return unix.Gettid() }

// schedStats reads threads' time on a CPU and time waiting for one from
// /proc/self/task/TID/schedstat, one pread on a descriptor kept per thread.
type schedStats struct {
	b     *testing.B
	files map[int]*os.File
	buf   []byte
}

func newSchedStats(b *testing.B) *schedStats {
	s := &schedStats{b: b, files: map[int]*os.File{}, buf: make([]byte, 128)}
	b.Cleanup(func() {
		for _, f := range s.files {
			f.Close()
		}
	})
	return s
}

func (s *schedStats) read(tid int) (onCPU, waited time.Duration) {
	f := s.files[tid]
	if f == nil {
		var err error
		if f, err = os.Open(fmt.Sprintf("/proc/self/task/%d/schedstat", tid)); err != nil {
			s.b.Fatalf("per-thread scheduler statistics: %v", err)
		}
		s.files[tid] = f
	}
	n, _ := f.ReadAt(s.buf, 0)
	var v [2]int64 // "cpu_ns wait_ns slices\n", parsed without allocating
	i := 0
	for _, c := range s.buf[:n] {
		if c == ' ' {
			if i++; i == len(v) {
				break
			}
		} else if c >= '0' && c <= '9' {
			v[i] = v[i]*10 + int64(c-'0')
		}
	}
	return time.Duration(v[0]), time.Duration(v[1])
}

// BenchmarkRotate measures a segment rotation, which holds WriteOut for its whole length:
// one durable 200-byte append, then Checkpoint, which seals the segment and creates the
// next (fsync of the sealed one, create, header, fsync, directory fsync). With
// preallocation the seal releases the reserved blocks (ftruncate) and the new segment
// reserves SegmentSize (64 MiB, the default) with fallocate.
func BenchmarkRotate(b *testing.B) {
	rec := make([]byte, 200)
	for _, prealloc := range []bool{false, true} {
		b.Run(fmt.Sprintf("prealloc=%v", prealloc), func(b *testing.B) {
			j, err := Open(b.TempDir(), &Options{noPreallocate: !prealloc})
			if err != nil {
				b.Fatal(err)
			}
			defer j.Close()
			b.ReportAllocs()
			for b.Loop() {
				if err := j.Append(rec); err != nil {
					b.Fatal(err)
				}
				if _, err := j.Checkpoint(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func (s *schedStats) available() bool { return true }
