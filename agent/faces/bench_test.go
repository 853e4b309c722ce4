package faces

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkPut: Put of a new 1 KiB or 100 KiB face into a store on the test's disk, with
// what it costs the flash: fsyncs/op and written-B/op (bytes Put wrote into files), and
// disk-B/op, the bytes the kernel sent to the device for the process (/proc/self/io
// write_bytes: data, and whatever metadata the filesystem wrote back for it; 0 where the
// kernel does not count it, as on tmpfs).
func BenchmarkPut(b *testing.B) {
	for _, size := range []int{1 << 10, 100 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{MaxBytes: 1 << 40, Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			data := bytes.Repeat([]byte{0x5a}, size)
			disk0 := writeBytes()
			b.ReportAllocs()
			b.SetBytes(int64(size))
			i := 0
			for b.Loop() {
				binary.BigEndian.PutUint64(data, uint64(i)) // a new face each time
				i++
				if err := s.Put(sha256.Sum256(data), int64(size), bytes.NewReader(data)); err != nil {
					b.Fatal(err)
				}
			}
			st := s.Stats()
			b.ReportMetric(float64(st.Fsyncs)/float64(i), "fsyncs/op")
			b.ReportMetric(float64(st.BytesWritten)/float64(i), "written-B/op")
			if d := writeBytes(); d >= 0 && disk0 >= 0 {
				b.ReportMetric(float64(d-disk0)/float64(i), "disk-B/op")
			}
		})
	}
}

// writeBytes is /proc/self/io's write_bytes, or -1.
func writeBytes() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "write_bytes: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
