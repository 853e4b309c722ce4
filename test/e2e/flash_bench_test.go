package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device/sim"
)

// ioWriteBytes is /proc/self/io's write_bytes: the bytes of page cache this process
// dirtied for files (what reaches the disk, counted once per page per write-back).
func ioWriteBytes(tb testing.TB) int64 {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		tb.Skipf("no /proc/self/io: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatal("no write_bytes in /proc/self/io")
	return 0
}

// fsyncCounter counts this process's fsync and fdatasync calls, every thread's, from strace
// attached to it: between start and stop, marked in strace's output by fsync(-1) and
// fsync(-2), which fail at once (EBADF) and sync nothing.
type fsyncCounter struct {
	cmd *exec.Cmd
	out string
}

// waitMarker makes fsync(fd) calls until strace's output shows one.
func (c *fsyncCounter) waitMarker(tb testing.TB, fd int) {
	tb.Helper()
	want := fmt.Sprintf("fsync(%d)", fd)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_ = syscall.Fsync(fd)
		if b, _ := os.ReadFile(c.out); bytes.Contains(b, []byte(want)) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("strace never showed %s", want)
		}
		time.Sleep(5 * time.Millisecond) // strace writes its output asynchronously: no event to wait on
	}
}

func startFsyncCounter(tb testing.TB) *fsyncCounter {
	tb.Helper()
	path, err := exec.LookPath("strace")
	if err != nil {
		tb.Skip("strace not installed: fsyncs are counted with it")
	}
	c := &fsyncCounter{out: tb.TempDir() + "/strace.out"}
	c.cmd = exec.Command(path, "-f", "-qq", "-y", "-e", "trace=fsync,fdatasync", "-o", c.out, "-p", strconv.Itoa(os.Getpid()))
	if err := c.cmd.Start(); err != nil {
		tb.Skipf("strace: %v", err)
	}
	tb.Cleanup(func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
	c.waitMarker(tb, -1)
	return c
}

// stop ends the count and returns the fsync and fdatasync calls between the markers, in
// all and by the file's path as part names it ("" when strace gave no path).
func (c *fsyncCounter) stop(tb testing.TB, part func(path string) string) (int, map[string]int) {
	tb.Helper()
	c.waitMarker(tb, -2)
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	_ = c.cmd.Wait()
	f, err := os.Open(c.out)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	n, counting, by := 0, false, map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, "fsync(-1)"):
			counting = true
		case strings.Contains(line, "fsync(-2)"):
			return n, by
		case counting && !strings.Contains(line, "resumed>") && (strings.Contains(line, "fsync(") || strings.Contains(line, "fdatasync(")):
			n++
			path := ""
			if i := strings.IndexByte(line, '<'); i >= 0 {
				if j := strings.IndexByte(line[i:], '>'); j > 0 {
					path = line[i+1 : i+j]
				}
			}
			by[part(path)]++
		}
	}
	tb.Fatal("strace's output ends before the stop marker")
	return 0, nil
}

// Flash cost per task: the bytes this process writes to disk and the fsyncs it makes for
// one AddPerson task, with a 1 KiB face (a new face each task) and without, from the
// upstream message to its result, through the whole daemon (intake, outbox journal,
// desired-state journal, face store, results backlog, embedded broker) with the default
// [journal] sync policy. One task per message, each waited for: no group commit shares
// the cost between tasks. The terminal is a protocol 2 MQTT terminal acking at once.
//
//	go test -run '^$' -bench FlashPerTask -benchtime 200x ./test/e2e/
func BenchmarkFlashPerTask(b *testing.B) {
	for _, withFace := range []bool{true, false} {
		name := "noface"
		if withFace {
			name = "face1KiB"
		}
		b.Run(name, func(b *testing.B) { benchFlashPerTask(b, withFace) })
	}
}

func benchFlashPerTask(b *testing.B, withFace bool) {
	dataDir := b.TempDir()
	cfg := parse(b, fmt.Sprintf(`[agent]
gateway_id = "gw-fl"
data_dir = %q
[broker]
listen = "127.0.0.1:0"
[[devices]]
id = "d1"
`, dataDir))
	addr, _, stop := startAgentFull(b, cfg)
	defer stop()
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"d1"}, sim.Options{Protocol: 2, Batch: 30, HeartbeatInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	bo := connectBackOffice(b, addr, "gw-fl")
	msgs := make([][]byte, b.N)
	for i := range msgs {
		id := fmt.Sprintf("p%d", i)
		var f *testFace
		if withFace {
			// testFaceData repeats after 256 seeds: the task's number makes each face new.
			tf := newTestFace(i, 1<<10, "template")
			binary.BigEndian.PutUint64(tf.data, uint64(i))
			sum := sha256.Sum256(tf.data)
			tf.sum = hex.EncodeToString(sum[:])
			f = &tf
		}
		msgs[i] = fmt.Appendf(nil, `{"taskId":"t%d","deviceId":"d1","op":"AddPerson","person":%s}`, i, personJSON(id, "N "+id, f, true))
	}
	fs := startFsyncCounter(b)
	w0 := ioWriteBytes(b)
	b.ResetTimer()
	for i, m := range msgs {
		bo.publish("faceagent/gw-fl/tasks", m)
		task := fmt.Sprintf("t%d", i)
		bo.waitFor("task "+task, 30*time.Second, func() bool { _, ok := bo.results[task]; return ok })
	}
	b.StopTimer()
	written := ioWriteBytes(b) - w0
	fsyncs, by := fs.stop(b, func(path string) string {
		rel, ok := strings.CutPrefix(path, dataDir+"/")
		if !ok {
			return "outside data_dir: " + path
		}
		dir, _, _ := strings.Cut(rel, "/")
		return dir
	})
	var parts []string
	for k, v := range by {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(v)/float64(b.N)))
	}
	slices.Sort(parts)
	b.Logf("fsyncs per task by part of data_dir: %s", strings.Join(parts, ", "))
	b.ReportMetric(float64(written)/float64(b.N), "wbytes/task")
	b.ReportMetric(float64(fsyncs)/float64(b.N), "fsyncs/task")
}
