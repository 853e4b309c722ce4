package metrics

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// memoryClasses are the Go runtime's memory classes exported as
// faceagent_go_memory_bytes{class}: where the resident set goes, for checking a board's
// memory budget in the field. They come from runtime.ReadMemStats (a short stop of the
// world, once a scrape), not runtime/metrics, whose tables would add to the ARM binary
// (docs/benchmarks.md, "Binary size").
var memoryClasses = []struct {
	class string
	bytes func(*runtime.MemStats) uint64
}{
	{"heap_objects", func(m *runtime.MemStats) uint64 { return m.HeapAlloc }},
	{"heap_free", func(m *runtime.MemStats) uint64 { return m.HeapIdle - m.HeapReleased }},
	{"heap_unused", func(m *runtime.MemStats) uint64 { return m.HeapInuse - m.HeapAlloc }},
	{"heap_released", func(m *runtime.MemStats) uint64 { return m.HeapReleased }},
	{"stacks", func(m *runtime.MemStats) uint64 { return m.StackInuse }},
	{"runtime", func(m *runtime.MemStats) uint64 { return m.GCSys }},
}

// RegisterProcess adds process_resident_memory_bytes (the Prometheus convention) and the
// Go runtime's memory classes (faceagent_go_memory_bytes{class}) to r, read at scrape time.
func RegisterProcess(r *Registry) {
	r.NewGaugeFunc("process_resident_memory_bytes", "Resident set size of the process (VmRSS), in bytes.", func() float64 {
		return float64(residentBytes())
	})
	classes := r.NewGaugeVec("faceagent_go_memory_bytes",
		"Go runtime memory by class: heap_objects (live and not yet swept), heap_free (free, still resident), heap_unused (fragmentation), heap_released (returned to the kernel), stacks, runtime (the GC's metadata, reserved more than touched).", "class")
	r.OnScrape(func() {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		for _, c := range memoryClasses {
			classes.With(c.class).Set(float64(c.bytes(&m)))
		}
	})
}

// residentBytes reads VmRSS from /proc/self/status; 0 where there is none.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	return parseVmRSS(string(b))
}

// parseVmRSS finds "VmRSS:   1234 kB" in a /proc/PID/status text and returns bytes.
func parseVmRSS(status string) int64 {
	for line := range strings.Lines(status) {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb < 0 || kb > 1<<40 {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
