package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/store"
)

var binary string

const testVersion = "v0.0.0-test"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "faceagent-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "faceagent")
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion, "-o", binary, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		panic("build faceagent: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

func runBinary(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), 0
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVersionAndUsage(t *testing.T) {
	out, _, code := runBinary(t, "-version")
	if code != 0 || !strings.HasPrefix(out, "faceagent "+testVersion+" go") {
		t.Errorf("-version: %d %q", code, out)
	}
	for _, args := range [][]string{{}, {"-bogus"}, {"-config"}, {"-config", "x.toml", "extra"}} {
		_, errOut, code := runBinary(t, args...)
		if code != exitUsage || !strings.Contains(errOut, "usage: faceagent") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	for _, h := range []string{"-h", "--help"} {
		out, errOut, code := runBinary(t, h)
		if code != 0 || errOut != "" {
			t.Errorf("%s: exit %d, stderr %q", h, code, errOut)
		}
		for _, want := range []string{"usage: faceagent -config FILE", "-check-config", "Examples:", "SIGHUP", "Exit codes: 0 clean stop"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: no %q in\n%s", h, want, out)
			}
		}
	}
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.toml", "[agent]\ngateway_id = \"gw-7\"\n[broker]\n[dispatch]\nmax_tries = 3\n")
	out, errOut, code := runBinary(t, "-config", good, "-check-config")
	if code != 0 || errOut != "" {
		t.Fatalf("valid config: exit %d, stderr %q", code, errOut)
	}
	eff, err := config.Parse("effective", []byte(out), nil)
	if err != nil || eff.Agent.GatewayID != "gw-7" || eff.Dispatch.MaxTries != 3 || eff.Dispatch.RetryInterval.Duration != 2*time.Second {
		t.Fatalf("effective config does not load back: %v\n%s", err, out)
	}

	bad := writeFile(t, dir, "bad.toml", "[agent]\ngateway_id = \"gw-7\"\n[broker]\n[dispatch]\nmax_tries = 0\nretry_interval = \"soon\"\n")
	out, errOut, code = runBinary(t, "-config", bad, "-check-config")
	want := bad + `:6: dispatch.retry_interval: invalid duration "soon" (write e.g. "2s", "500ms", "7d")` + "\n"
	if code != exitUsage || out != "" || errOut != want {
		t.Fatalf("bad config: exit %d\nstderr %q\nwant   %q", code, errOut, want)
	}
	_, errOut, code = runBinary(t, "-config", bad+".missing", "-check-config")
	if code != exitUsage || !strings.HasPrefix(errOut, bad+".missing: open ") {
		t.Fatalf("missing file: exit %d %q", code, errOut)
	}
	// Running (not only checking) a bad config is exit 2 as well.
	if _, _, code := runBinary(t, "-config", bad); code != exitUsage {
		t.Fatalf("run with bad config: exit %d", code)
	}
}

// agentProc is a running faceagent whose stderr log is watched line by line.
type agentProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	wake  chan struct{}
	done  chan struct{}
}

func startAgent(t *testing.T, cfgPath string) *agentProc {
	t.Helper()
	p := &agentProc{t: t, cmd: exec.Command(binary, "-config", cfgPath), wake: make(chan struct{}, 1), done: make(chan struct{})}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// waitLog waits for a log line matching re after line from, and returns its index and
// submatches.
func (p *agentProc) waitLog(re *regexp.Regexp, from int) (int, []string) {
	p.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		p.mu.Lock()
		for i := from; i < len(p.lines); i++ {
			if m := re.FindStringSubmatch(p.lines[i]); m != nil {
				p.mu.Unlock()
				return i, m
			}
		}
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-p.done:
			p.t.Fatalf("faceagent exited before logging %s:\n%s", re, p.log())
		case <-deadline:
			p.t.Fatalf("no log line %s within 20s:\n%s", re, p.log())
		}
	}
}

func (p *agentProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

func (p *agentProc) stop(sig syscall.Signal) int {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
	<-p.done
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		p.t.Fatal(err)
	}
	return 0
}

var runningRe = regexp.MustCompile(`msg="faceagent running".* broker=(\S+) metrics=(\S+)`)

// A config with only [broker] runs the embedded broker and state store alone: a store
// round trip through it, /metrics and /healthz, SIGHUP reloads (good and bad files),
// SIGTERM stops cleanly with exit 0, and a persisted key survives the restart.
func TestBrokerOnlyEndToEnd(t *testing.T) {
	dir := t.TempDir()
	cfgText := "[agent]\ndata_dir = \"" + filepath.Join(dir, "data") + "\"\n[broker]\nlisten = \"127.0.0.1:0\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n"
	cfgPath := writeFile(t, dir, "agent.toml", cfgText)

	p := startAgent(t, cfgPath)
	_, m := p.waitLog(runningRe, 0)
	brokerAddr, metricsAddr := m[1], m[2]

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := store.Connect(ctx, &store.Options{URL: "mqtt://" + brokerAddr})
	if err != nil {
		t.Fatalf("store connect: %v\n%s", err, p.log())
	}
	v, err := c.Set(ctx, "faceagent/test/key", []byte("hello"), &store.SetOptions{Persist: true})
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Get(ctx, "faceagent/test/key")
	if err != nil || string(e.Value) != "hello" || e.Version != v {
		t.Fatalf("Get = %q %v, %v (set version %v)", e.Value, e.Version, err, v)
	}
	c.Close()

	for path, want := range map[string]string{"/healthz": "ok\n", "/metrics": "faceagent_build_info{version=\"" + testVersion + "\"} 1\n"} {
		resp, err := http.Get("http://" + metricsAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("%s: %d %q, want %q", path, resp.StatusCode, body, want)
		}
	}

	// SIGHUP: a file that does not load is refused and the agent keeps running.
	writeFile(t, dir, "agent.toml", cfgText+"[log]\nlevel = \"chatty\"\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	i, _ := p.waitLog(regexp.MustCompile(`reload refused.*log\.level: \\"chatty\\"`), 0)
	// A good one that only changes the log level applies live.
	writeFile(t, dir, "agent.toml", cfgText+"[log]\nlevel = \"debug\"\n")
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	p.waitLog(regexp.MustCompile(`msg="config reloaded"`), i+1)

	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.log())
	}

	// Restart on the same data_dir: the persisted key is still there.
	p = startAgent(t, cfgPath)
	_, m = p.waitLog(runningRe, 0)
	c, err = store.Connect(ctx, &store.Options{URL: "mqtt://" + m[1]})
	if err != nil {
		t.Fatal(err)
	}
	e, err = c.Get(ctx, "faceagent/test/key")
	c.Close()
	if err != nil || string(e.Value) != "hello" {
		t.Fatalf("after restart: %q, %v", e.Value, err)
	}
	if code := p.stop(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit %d\n%s", code, p.log())
	}
}

// A listen address already taken is a runtime failure: exit 1, not 2.
func TestStartFailureExitsOne(t *testing.T) {
	dir := t.TempDir()
	first := startAgent(t, writeFile(t, dir, "a.toml", "[agent]\ndata_dir = \""+filepath.Join(dir, "a")+"\"\n[broker]\nlisten = \"127.0.0.1:0\"\n"))
	_, m := first.waitLog(runningRe, 0)
	second := writeFile(t, dir, "b.toml", "[agent]\ndata_dir = \""+filepath.Join(dir, "b")+"\"\n[broker]\nlisten = \""+m[1]+"\"\n")
	_, errOut, code := runBinary(t, "-config", second)
	if code != exitFailure || !strings.Contains(errOut, "address already in use") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
	if code := first.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("first agent: exit %d", code)
	}
}

// lineCount returns how many log lines the agent has written so far (for waitLog's from).
func (p *agentProc) lineCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}
