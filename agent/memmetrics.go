package agent

import (
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
)

// memoryClasses are the Go runtime's memory classes exported as
// faceagent_go_memory_bytes{class}: where the resident set goes, for checking a board's
// memory budget in the field.
var memoryClasses = []struct{ class, metric string }{
	{"heap_objects", "/memory/classes/heap/objects:bytes"},
	{"heap_free", "/memory/classes/heap/free:bytes"},
	{"heap_unused", "/memory/classes/heap/unused:bytes"},
	{"heap_released", "/memory/classes/heap/released:bytes"},
	{"stacks", "/memory/classes/heap/stacks:bytes"},
	{"runtime", "/memory/classes/metadata/other:bytes"},
}

// registerMemoryMetrics adds process_resident_memory_bytes (the Prometheus convention) and
// the runtime's memory classes, read at scrape time.
func (a *Agent) registerMemoryMetrics() {
	r := a.registry
	r.NewGaugeFunc("process_resident_memory_bytes", "Resident set size of the process (VmRSS), in bytes.", func() float64 {
		return float64(residentBytes())
	})
	classes := r.NewGaugeVec("faceagent_go_memory_bytes",
		"Go runtime memory by class: heap_objects (live and not yet swept), heap_free (free, still resident), heap_unused (fragmentation), heap_released (returned to the kernel), stacks, runtime (metadata).", "class")
	samples := make([]metrics.Sample, len(memoryClasses))
	for i, c := range memoryClasses {
		samples[i].Name = c.metric
	}
	r.OnScrape(func() {
		metrics.Read(samples)
		for i, c := range memoryClasses {
			if samples[i].Value.Kind() == metrics.KindUint64 {
				classes.With(c.class).Set(float64(samples[i].Value.Uint64()))
			}
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
