package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/internal/soakclient"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// Soak tests of a broker-only faceagent with a client shaped like the Azure IoT Operations
// Go SDK's statestore client (internal/soakclient): one connection, a fixed number of
// requests in flight, every answer checked and counted. In the normal test run they send
// soakShort requests each; `make soak` (FACEAGENT_SOAK=1) sends soakLong and prints a
// progress line every few seconds. FACEAGENT_SOAK_REQUESTS and FACEAGENT_SOAK_INFLIGHT
// (a comma-separated list) override the count and the in-flight levels.
const (
	soakShort = 3000
	soakLong  = 100000
)

// soakPlan is what a soak test runs: requests per level, the levels, the progress interval,
// and a time bound for each level.
func soakPlan(t *testing.T) (requests int, levels []int, every, bound time.Duration) {
	t.Helper()
	requests, levels, every, bound = soakShort, []int{8, 64}, 2*time.Second, 50*time.Second
	if os.Getenv("FACEAGENT_SOAK") == "1" {
		requests, every, bound = soakLong, 5*time.Second, 15*time.Minute
	}
	if s := os.Getenv("FACEAGENT_SOAK_REQUESTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("FACEAGENT_SOAK_REQUESTS=%q: want a positive number", s)
		}
		requests = n
	}
	if s := os.Getenv("FACEAGENT_SOAK_INFLIGHT"); s != "" {
		levels = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				t.Fatalf("FACEAGENT_SOAK_INFLIGHT=%q: want positive numbers, comma-separated", s)
			}
			levels = append(levels, n)
		}
	}
	return requests, levels, every, bound
}

// soakWatch samples a faceagent process's memory (/proc/PID/status: VmRSS, and VmHWM, the
// peak) and the bytes of files under its data_dir, every second and on demand; the peaks
// span every process it was pointed at.
type soakWatch struct {
	dataDir string
	stop    chan struct{}
	done    chan struct{}

	mu                 sync.Mutex
	pid                int
	rss, peakRSS       int64
	disk, peakDisk     int64
	samples, failedRSS int
}

func newSoakWatch(dataDir string) *soakWatch {
	w := &soakWatch{dataDir: dataDir, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
				w.sample()
			}
		}
	}()
	return w
}

func (w *soakWatch) close() { close(w.stop); <-w.done }

// watch points the sampler at a new process.
func (w *soakWatch) watch(pid int) {
	w.mu.Lock()
	w.pid = pid
	w.mu.Unlock()
	w.sample()
}

// sample reads the process's memory and the data_dir's bytes now. Call it before the
// process ends too: VmHWM is its peak so far.
func (w *soakWatch) sample() {
	w.mu.Lock()
	pid := w.pid
	w.mu.Unlock()
	rss, hwm, err := procMemory(pid)
	disk := testutil.DirFileBytes(w.dataDir)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples++
	if err != nil {
		w.failedRSS++ // the process has just ended
	} else {
		w.rss, w.peakRSS = rss, max(w.peakRSS, hwm, rss)
	}
	w.disk, w.peakDisk = disk, max(w.peakDisk, disk)
}

func (w *soakWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("RSS %s (peak %s), data_dir %s (peak %s)", mib(w.rss), mib(w.peakRSS), mib(w.disk), mib(w.peakDisk))
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// procMemory reads VmRSS and VmHWM, in bytes.
func procMemory(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %q", k, v)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS (a zombie?)", pid)
	}
	return rss, hwm, sc.Err()
}

// soakAgent writes a broker-only config (extra: more [broker] keys) and starts faceagent.
func soakAgent(t *testing.T, extra string) (cfg, addr, dataDir string) {
	t.Helper()
	dir := t.TempDir()
	addr, dataDir = testutil.FreeAddr(t), filepath.Join(dir, "data")
	cfg = writeFile(t, dir, "agent.toml", fmt.Sprintf("[agent]\ndata_dir = %q\n[broker]\nlisten = %q\n%s", dataDir, addr, extra))
	return cfg, addr, dataDir
}

// soakRun runs one level: requests with inFlight in flight, on a client that rides out
// broker restarts, logging a progress line every `every`. during, if set, runs on the
// test's goroutine while the run goes on (the SIGKILL test restarts the agent from it), with
// a context that ends when the run does; its error fails the test. onAnswer and gate are
// the run's OnAnswer and Gate. It returns the report and Run's error.
func soakRun(t *testing.T, addr string, w *soakWatch, requests, inFlight int, every, bound time.Duration,
	during func(context.Context, *soakclient.Client) error, onAnswer func(int), gate func(int64)) (*soakclient.Report, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	c, err := soakclient.Dial(ctx, soakclient.Options{Addr: addr, ClientID: fmt.Sprintf("soak-%d-%d", inFlight, time.Now().UnixNano()),
		Reconnect: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	type result struct {
		rep *soakclient.Report
		err error
	}
	done := make(chan result, 1)
	runCtx, runOver := context.WithCancel(ctx)
	defer runOver()
	go func() {
		rep, err := c.Run(ctx, soakclient.RunOptions{Requests: requests, InFlight: inFlight, Stall: 10 * time.Second,
			OnAnswer: onAnswer, Gate: gate, ProgressEvery: every, Progress: func(p soakclient.Progress) {
				t.Logf("soak %d in flight: %6.1fs %d/%d answered, %.0f/s, p50 %v, p99 %v, %v",
					inFlight, p.Elapsed.Seconds(), p.Answered, p.Requests, p.Rate, p.P50, p.P99, w)
			}})
		runOver()
		done <- result{rep, err}
	}()
	finished := false
	defer func() {
		if !finished { // during failed the test: end the run first, it logs through t
			cancel()
			c.Close()
			<-done
		}
	}()
	if during != nil {
		if err := during(runCtx, c); err != nil {
			t.Error(err)
		}
	}
	r := <-done
	finished = true
	return r.rep, r.err
}

// soakSummary logs the closing summary of a level.
func soakSummary(t *testing.T, name string, rep *soakclient.Report, w *soakWatch) {
	t.Helper()
	w.mu.Lock()
	peakRSS, peakDisk := w.peakRSS, w.peakDisk
	w.mu.Unlock()
	stall := ""
	if rep.Stalled {
		stall = fmt.Sprintf(", STALLED after %d answers in %.1fs (%.0f/s)", rep.Answered, rep.Active.Seconds(), float64(rep.Answered)/max(rep.Active.Seconds(), 1e-9))
	}
	t.Logf("soak %s: %d requests, %d answered, %d unanswered, %.1fs (%.0f/s)%s, p50 %v, p99 %v, max %v; faceagent peak RSS %s (%d bytes), peak data_dir %s (%d bytes)",
		name, rep.Requests, rep.Answered, rep.Unanswered, rep.Elapsed.Seconds(), float64(rep.Answered)/max(rep.Elapsed.Seconds(), 1e-9), stall,
		rep.P50, rep.P99, rep.Max, mib(peakRSS), peakRSS, mib(peakDisk), peakDisk)
}

// Sustained load on one connection, as the SDK's client puts it on the store: every
// request answered, every answer right. The broker's in-flight bound (max_queued_messages,
// mochi's MaximumInflight: messages held per client) is set to 1,000 here, still 15 times
// the 64 requests in flight: a client that acknowledges every answer never has more than
// it has requests in flight, so the bound must never be reached; the default of 10,000
// would show a leak only after 10,000 requests (the official SDK's client stalled there).
func TestSoakStateStore(t *testing.T) {
	requests, levels, every, bound := soakPlan(t)
	for _, inFlight := range levels {
		t.Run(fmt.Sprintf("inflight=%d", inFlight), func(t *testing.T) {
			extra, limit := "max_queued_messages = 1000\n", "max_queued_messages = 1000 here"
			if os.Getenv("FACEAGENT_SOAK") == "1" {
				extra, limit = "", "max_queued_messages, 10,000 by default" // the defaults, as the SDK's run had them
			}
			cfg, addr, dataDir := soakAgent(t, extra)
			p := startAgent(t, cfg)
			p.waitLog(runningRe, 0)
			w := newSoakWatch(dataDir)
			defer w.close()
			w.watch(p.cmd.Process.Pid)
			rep, err := soakRun(t, addr, w, requests, inFlight, every, bound, nil, nil, nil)
			w.sample()
			if code := p.stop(syscall.SIGTERM); code != 0 {
				t.Errorf("SIGTERM: exit %d\n%s", code, p.log())
			}
			if rep != nil {
				soakSummary(t, fmt.Sprintf("%d in flight", inFlight), rep, w)
			}
			if rep != nil && rep.Stalled {
				t.Fatalf("%d in flight: the store stopped answering after %d requests: with at most %d requests in flight, each answer "+
					"acknowledged at once, the broker's in-flight bound for the client (%s) can only be "+
					"full of messages the client acknowledged but the broker still holds\n%v\n%v", inFlight, rep.Answered, inFlight, limit, err, reportErr(rep))
			}
			if err != nil {
				t.Fatalf("%d in flight: %v\n%v", inFlight, err, reportErr(rep))
			}
			if err := rep.Err(); err != nil {
				t.Fatalf("%d in flight: %v", inFlight, err)
			}
		})
	}
}

// The same with the agent SIGKILLed when half the requests are answered and started again
// on its data_dir. The client resumes its session (Clean Start false, the session must be
// present) and sends again what the broker had not acknowledged; then every request must
// be answered, and nothing may come that MQTT does not allow. Shortly before the kill the
// client puts a barrier (soakclient's Client.Barrier) behind what it had acknowledged: an
// answer acknowledged before it must never come again; one acknowledged between the
// barrier and the kill may (the broker may not have stored the acknowledgement), and a
// request sent again may be answered twice. Anything more is a message the broker kept
// although it was acknowledged. No answer may be missing: the broker acknowledges a state
// store request only once its answer is stored for the client's kept session, so a
// request it acknowledged before the kill is answered before it or after the restart.
func TestSoakStateStoreSIGKILL(t *testing.T) {
	requests, levels, every, bound := soakPlan(t)
	for _, inFlight := range levels {
		t.Run(fmt.Sprintf("inflight=%d", inFlight), func(t *testing.T) {
			cfg, addr, dataDir := soakAgent(t, "")
			p := startAgent(t, cfg)
			p.waitLog(runningRe, 0)
			w := newSoakWatch(dataDir)
			defer w.close()
			w.watch(p.cmd.Process.Pid)
			// The barrier goes out a few windows before half way and the run waits for it
			// at half way (Gate), so that it has returned before the kill however slow the
			// disk; the SIGKILL is sent from the client's reader at the first answer after
			// that, so that it finds requests in flight however fast the machine and
			// however late a goroutine is scheduled.
			half := int64(requests / 2)
			var victim atomic.Int64 // the agent's pid until it is killed
			victim.Store(int64(p.cmd.Process.Pid))
			var barrierDone atomic.Bool
			barrierOver := make(chan struct{}) // closed when the barrier returned, well or not
			killedAt := make(chan int, 1)
			gate := func(n int64) {
				if n >= half {
					<-barrierOver
				}
			}
			onAnswer := func(answered int) {
				if int64(answered) >= half && barrierDone.Load() {
					if pid := victim.Swap(0); pid != 0 {
						w.sample()
						_ = syscall.Kill(int(pid), syscall.SIGKILL)
						killedAt <- answered
					}
				}
			}
			rep, err := soakRun(t, addr, w, requests, inFlight, every, bound, func(ctx context.Context, c *soakclient.Client) error {
				err := c.PrepareBarrier(ctx)
				if err == nil {
					err = c.WaitAnswered(ctx, int(max(half/2, half-4*int64(inFlight))))
				}
				if err == nil {
					err = c.Barrier(ctx)
				}
				barrierDone.Store(err == nil)
				close(barrierOver)
				if err != nil {
					return err
				}
				var at int
				select {
				case at = <-killedAt:
				case <-ctx.Done():
					return fmt.Errorf("no SIGKILL: %w", ctx.Err())
				}
				p.kill() // waits for it to be gone
				t.Logf("soak %d in flight: SIGKILLed the agent at %d answered; %v", inFlight, at, w)
				p = startAgent(t, cfg)
				p.waitLog(runningRe, 0)
				w.watch(p.cmd.Process.Pid)
				return nil
			}, onAnswer, gate)
			w.sample()
			if code := p.stop(syscall.SIGTERM); code != 0 {
				t.Errorf("SIGTERM: exit %d\n%s", code, p.log())
			}
			if rep != nil {
				soakSummary(t, fmt.Sprintf("%d in flight, SIGKILL midway", inFlight), rep, w)
			}
			if err != nil {
				t.Fatalf("%d in flight: %v\n%v", inFlight, err, reportErr(rep))
			}
			if err := rep.Err(); err != nil {
				why := ""
				if rep.Phantoms > 0 {
					why += fmt.Sprintf(" (%d answers the client had acknowledged came again after the restart, beyond what MQTT allows: "+
						"the broker kept them in flight although they were acknowledged)", rep.Phantoms)
				}
				if rep.LostInCrash > 0 {
					why += fmt.Sprintf(" (%d answers lost in the crash: requests the broker had acknowledged, answered neither before the kill nor after)", rep.LostInCrash)
				}
				t.Fatalf("%d in flight, SIGKILL midway%s: %v", inFlight, why, err)
			}
			if rep.Drops != 1 || rep.Resumes != 1 {
				t.Fatalf("%d drops and %d resumes, want one of each: %v", rep.Drops, rep.Resumes, rep)
			}
		})
	}
}

// reportErr is rep's verdict, or a note that there is no report.
func reportErr(rep *soakclient.Report) any {
	if rep == nil {
		return "(no report)"
	}
	if err := rep.Err(); err != nil {
		return err
	}
	return rep
}
