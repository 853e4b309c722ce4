package attack

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// sampleEvery is the monitor's period: short enough to see a burst of descriptors or
// memory that lasts a few tens of milliseconds, long enough to cost the machine little.
const sampleEvery = 20 * time.Millisecond

// sample is the agent's resources at one moment.
type sample struct {
	rss       int64 // VmRSS, bytes
	fds       int   // entries of /proc/PID/fd
	dataBytes int64 // bytes of the files under data_dir
	logBytes  int64 // bytes the agent wrote to stdout and stderr, every run together
	// received is the commands the terminals got, all together; quietFor, how long that
	// count had not moved. results and resultsQuietFor, the same for the back office's
	// results.
	received        int
	quietFor        time.Duration
	results         int
	resultsQuietFor time.Duration
}

// window is what the monitor saw between two calls of reset: the first sample and the
// peaks.
type window struct {
	start, peak  sample
	began, ended time.Time
}

func (w window) String() string {
	return fmt.Sprintf("RSS %d KiB (from %d), %d descriptors (from %d), data_dir %d KiB (from %d), log +%d bytes, "+
		"at most %v without a command, %v without a result",
		w.peak.rss>>10, w.start.rss>>10, w.peak.fds, w.start.fds, w.peak.dataBytes>>10, w.start.dataBytes>>10,
		w.peak.logBytes-w.start.logBytes, w.peak.quietFor.Round(time.Millisecond), w.peak.resultsQuietFor.Round(time.Millisecond))
}

// monitor samples the agent every sampleEvery and keeps the peaks of the current window.
type monitor struct {
	s    *system
	stop func()

	mu         sync.Mutex
	pid        int
	last       sample
	lastMoved  time.Time // when received last grew
	lastCount  int
	resultAt   time.Time // when results last grew
	lastResult int
	w          window
	samples    int // samples taken by the monitor's goroutine
}

// waitSamples returns once the monitor took n more samples, or after n+10 periods.
func (m *monitor) waitSamples(n int) {
	m.mu.Lock()
	want := m.samples + n
	m.mu.Unlock()
	deadline := time.Now().Add(time.Duration(n+10) * sampleEvery)
	for time.Now().Before(deadline) {
		m.mu.Lock()
		got := m.samples
		m.mu.Unlock()
		if got >= want {
			return
		}
		time.Sleep(sampleEvery / 4)
	}
}

func startMonitor(s *system) *monitor {
	m := &monitor{s: s, pid: s.proc.cmd.Process.Pid, lastMoved: time.Now(), resultAt: time.Now()}
	m.last = m.read()
	m.w = window{start: m.last, peak: m.last, began: time.Now()}
	quit := make(chan struct{})
	done := make(chan struct{})
	var once sync.Once
	m.stop = func() { once.Do(func() { close(quit) }); <-done }
	go func() {
		defer close(done)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			x := m.read()
			m.mu.Lock()
			m.last = x
			m.w.peak = maxSample(m.w.peak, x)
			m.samples++
			m.mu.Unlock()
		}
	}()
	return m
}

// follow points the monitor at a new run of the agent.
func (m *monitor) follow(pid int) {
	m.mu.Lock()
	m.pid = pid
	m.mu.Unlock()
}

// read takes one sample.
func (m *monitor) read() sample {
	m.mu.Lock()
	pid := m.pid
	m.mu.Unlock()
	var x sample
	var err error
	if x.rss, err = vmRSS(pid); err == nil {
		var ents []os.DirEntry
		ents, err = os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
		x.fds = len(ents)
	}
	x.dataBytes = testutil.DirFileBytes(m.s.dataView)
	x.logBytes = int64(m.s.log.Len())
	x.received = m.s.tr.received()
	x.results = m.s.tr.bo.resultCount()
	now := time.Now()
	if err != nil { // the agent is restarting: no process to read
		x.rss, x.fds = 0, 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if x.received != m.lastCount {
		m.lastCount, m.lastMoved = x.received, now
	}
	x.quietFor = now.Sub(m.lastMoved)
	if x.results != m.lastResult {
		m.lastResult, m.resultAt = x.results, now
	}
	x.resultsQuietFor = now.Sub(m.resultAt)
	return x
}

// now returns a fresh sample (it does not count towards the window).
func (m *monitor) now() sample { return m.read() }

// reset starts a new window and returns the one that ends.
func (m *monitor) reset() window {
	x := m.read()
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.w
	w.peak = maxSample(w.peak, x)
	w.ended = time.Now()
	m.w = window{start: x, peak: x, began: w.ended}
	return w
}

func maxSample(a, b sample) sample {
	a.rss = max(a.rss, b.rss)
	a.fds = max(a.fds, b.fds)
	a.dataBytes = max(a.dataBytes, b.dataBytes)
	a.logBytes = max(a.logBytes, b.logBytes)
	a.received = max(a.received, b.received)
	a.quietFor = max(a.quietFor, b.quietFor)
	a.results = max(a.results, b.results)
	a.resultsQuietFor = max(a.resultsQuietFor, b.resultsQuietFor)
	return a
}

// vmRSS reads VmRSS from /proc/PID/status, in bytes.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	_, rest, ok := bytes.Cut(b, []byte("\nVmRSS:"))
	if !ok {
		return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(line), []byte("kB")))), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("VmRSS %q: %w", line, err)
	}
	return kb << 10, nil
}
