package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
)

// threadSwitches sums the context switches (voluntary and not) of every thread of this
// process (/proc/self/task/*/status). An idle process that nobody wakes does not switch:
// each timer that fires, each goroutine a timer or the network readies, costs at least one.
func threadSwitches(tb testing.TB) int64 {
	tb.Helper()
	files, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(files) == 0 {
		tb.Skip("no /proc/self/task: context switches cannot be counted here")
	}
	var n int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended between Glob and ReadFile
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Bytes()
			for _, key := range [][]byte{[]byte("voluntary_ctxt_switches:"), []byte("nonvoluntary_ctxt_switches:")} {
				if v, ok := bytes.CutPrefix(line, key); ok {
					x, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
					n += x
				}
			}
		}
	}
	return n
}

// BenchmarkIdleWakeups: the agent with its embedded broker and 64 configured MQTT
// terminals, none connected, nothing queued, nothing happening. After a settling second it
// counts, over FACEAGENT_IDLE_WINDOW (default 10s; docs/benchmarks.md uses 60s), the
// process's thread context switches (each wake-up costs at least one), the CPU time spent
// and the GC cycles. Run it with -benchtime 1x: the window, not b.N, is the measurement.
func BenchmarkIdleWakeups(b *testing.B) {
	window := 10 * time.Second
	if s := os.Getenv("FACEAGENT_IDLE_WINDOW"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("FACEAGENT_IDLE_WINDOW: %v", err)
		}
		window = d
	}
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-idle\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n[journal]\nsync = \"batch\"\n[log]\nlevel = \"error\"\n", b.TempDir())
	for i := range benchTerminals {
		src += fmt.Sprintf("[[devices]]\nid = \"i%02d\"\n", i)
	}
	cfg, err := config.Parse("idle.toml", []byte(src), nil)
	if err != nil {
		b.Fatal(err)
	}
	_, stop := startAgent(b, cfg)
	defer stop()
	time.Sleep(time.Second) // start-up work (journal open, first state writes) settles
	gc := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	var switches, gcs int64
	var cpu time.Duration
	b.ResetTimer()
	for range b.N {
		metrics.Read(gc)
		gc0, sw0, cpu0 := gc[0].Value.Uint64(), threadSwitches(b), cpuTime()
		time.Sleep(window) // the benchmark's own goroutine: one wake-up at the end
		metrics.Read(gc)
		switches += threadSwitches(b) - sw0
		cpu += cpuTime() - cpu0
		gcs += int64(gc[0].Value.Uint64() - gc0)
	}
	b.StopTimer()
	secs := window.Seconds() * float64(b.N)
	b.ReportMetric(float64(switches)/secs, "switches/s")
	b.ReportMetric(float64(cpu.Microseconds())/secs, "cpu-µs/s")
	b.ReportMetric(float64(gcs)/secs, "gc/s")
	b.ReportMetric(float64(switches)/float64(b.N), "switches/window")
}
