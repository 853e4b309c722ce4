package e2e

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// soakSample is what TestDaemonSoak reads of the agent at one moment: from /proc/<pid>
// (RSS, open descriptors), from its /metrics (goroutines, live heap, queued commands) and
// from data_dir on disk.
type soakSample struct {
	at         time.Duration // since the soak began
	phase      string        // warm (before load), load, base (idle after a restart), idle (the end), quiet
	pid        int
	rssKB      int64 // VmRSS
	fds        int   // entries of /proc/<pid>/fd
	goroutines int   // faceagent_goroutines
	heapKB     int64 // faceagent_go_memory_bytes{class="heap_objects"}
	queued     int   // faceagent_queue_depth summed over terminals
	diskKB     int64 // data_dir's allocated blocks (du: preallocated segments included)
	filesKB    int64 // data_dir's file sizes (ls)
	tasks      int   // tasks the broker accepted so far
	results    int   // results and deadletters the back office got so far
}

// sampleAgent reads the agent of pid, its /metrics at metricsAddr and dataDir.
func sampleAgent(t testing.TB, pid int, metricsAddr, dataDir string) soakSample {
	t.Helper()
	s := soakSample{pid: pid, rssKB: procRSSKB(t, pid), fds: procFDs(t, pid)}
	text := scrapeAddr(t, metricsAddr)
	g, ok := seriesValue(text, "faceagent_goroutines")
	heap, ok2 := seriesValue(text, `faceagent_go_memory_bytes{class="heap_objects"}`)
	if !ok || !ok2 {
		t.Fatalf("/metrics lacks faceagent_goroutines or faceagent_go_memory_bytes:\n%s", text)
	}
	s.goroutines, s.heapKB = int(g), int64(heap)/1024
	s.queued = int(sumSeries(text, "faceagent_queue_depth"))
	s.diskKB, s.filesKB = dirUsage(dataDir)
	return s
}

// procRSSKB is VmRSS of pid in kB.
func procRSSKB(t testing.TB, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no VmRSS", pid)
	return 0
}

// procFDs counts pid's open file descriptors.
func procFDs(t testing.TB, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// sumSeries adds up every series of name (each label set) in text.
func sumSeries(text, name string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line[strings.LastIndexByte(line, '}')+1:])
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// dirUsage is what dir and everything under it occupies on disk (allocated blocks, as du
// counts them) and the sum of its files' sizes, in KiB; files that go while it walks (a
// compaction) count as gone.
func dirUsage(dir string) (diskKB, filesKB int64) {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Stat(path, &st) == nil {
			diskKB += st.Blocks * 512 / 1024
			filesKB += st.Size / 1024
		}
		return nil
	})
	return diskKB, filesKB
}

// soakTable writes the samples as CSV (header first).
func soakTable(samples []soakSample) string {
	var b strings.Builder
	b.WriteString("seconds,phase,pid,rss_kb,fds,goroutines,heap_kb,queued,data_dir_disk_kb,data_dir_files_kb,tasks,results\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "%.1f,%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d\n", s.at.Seconds(), s.phase, s.pid, s.rssKB, s.fds,
			s.goroutines, s.heapKB, s.queued, s.diskKB, s.filesKB, s.tasks, s.results)
	}
	return b.String()
}

// soakThirds splits samples by time into the first and the last third of their span and
// returns the largest value of each.
func soakThirds(samples []soakSample, value func(soakSample) int64) (firstMax, lastMax int64) {
	if len(samples) == 0 {
		return 0, 0
	}
	from, to := samples[0].at, samples[len(samples)-1].at
	third := (to - from) / 3
	for _, s := range samples {
		switch v := value(s); {
		case s.at <= from+third:
			firstMax = max(firstMax, v)
		case s.at >= to-third:
			lastMax = max(lastMax, v)
		}
	}
	return firstMax, lastMax
}
