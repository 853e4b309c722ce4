package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/store"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a bytes.Buffer safe for the writes of a child process and reads of the test.
// Every Write pokes wrote, so a test waits for output as an event rather than polling it.
type syncBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{} // capacity 1; made on first use so the zero value works
}

// written returns the channel poked after each Write; s.mu must be held.
func (s *syncBuffer) written() chan struct{} {
	if s.wrote == nil {
		s.wrote = make(chan struct{}, 1)
	}
	return s.wrote
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.b.Write(p)
	select {
	case s.written() <- struct{}{}:
	default:
	}
	return n, err
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type result struct {
	code           int
	stdout, stderr string
}

func run(ctx context.Context, env map[string]string, stdin string, args ...string) result {
	var out, errb syncBuffer
	code := Run(ctx, args, &IO{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return env[k] }})
	return result{code, out.String(), errb.String()}
}

var versionRE = regexp.MustCompile(`\d{15}:\d{5}:[^\s)]+`)

// golden compares r (versions masked) with testdata/name.golden.
func golden(t *testing.T, name string, r result) {
	t.Helper()
	got := versionRE.ReplaceAllString(
		"exit "+string(rune('0'+r.code))+"\n--- stdout\n"+r.stdout+"\n--- stderr\n"+r.stderr, "VERSION")
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if got != string(want) {
		t.Errorf("%s: output differs\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestHelp(t *testing.T) {
	golden(t, "help", run(context.Background(), nil, "", "--help"))
	golden(t, "no-command", run(context.Background(), nil, "", "--url", "mqtt://127.0.0.1:1"))
	golden(t, "unknown-command", run(context.Background(), nil, "", "frob"))
	golden(t, "set-help", run(context.Background(), nil, "", "set", "--help"))
}

func TestCommands(t *testing.T) {
	storeURL := startStore(t)
	env := map[string]string{"FACEAGENT_SS_URL": storeURL, "FACEAGENT_SS_TIMEOUT": "5s"}
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "value.txt")
	if err := os.WriteFile(file, []byte("from a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
	}{
		{"get-missing", "", []string{"get", "greeting"}},
		{"set", "", []string{"set", "greeting", "hello", "--px", "1m", "-v"}},
		{"get", "", []string{"get", "-v", "greeting"}},
		{"set-nx-refused", "", []string{"set", "greeting", "other", "--nx"}},
		{"set-nex-same", "", []string{"set", "greeting", "hello", "--nex"}},
		{"set-stdin", "from stdin", []string{"set", "piped", "-"}},
		{"get-stdin", "", []string{"get", "piped"}},
		{"set-file", "", []string{"set", "filed", "@" + file, "--persist"}},
		{"get-file", "", []string{"get", "filed"}},
		{"vdel-wrong", "", []string{"vdel", "greeting", "nope"}},
		{"vdel", "", []string{"vdel", "greeting", "hello"}},
		{"del", "", []string{"del", "piped"}},
		{"del-missing", "", []string{"del", "piped"}},
		{"set-fencing-bad", "", []string{"set", "k", "v", "--fencing", "yesterday"}},
		{"set-usage", "", []string{"set", "onlykey"}},
		{"set-nx-nex", "", []string{"set", "k", "v", "--nx", "--nex"}},
		{"server-error", "", []string{"get", ""}},
	} {
		golden(t, tc.name, run(ctx, env, tc.stdin, tc.args...))
	}
	// Flags beat the environment.
	if r := run(ctx, map[string]string{"FACEAGENT_SS_URL": "mqtt://127.0.0.1:1", "FACEAGENT_SS_TIMEOUT": "5s"}, "", "--url", storeURL, "get", "filed"); r.code != 0 || r.stdout != "from a file" {
		t.Errorf("--url over env: %+v", r)
	}
	// Fencing through the CLI: a token taken from a version.
	r := run(ctx, env, "", "set", "lock", "me", "--nex", "--px", "10s", "-v")
	token := strings.TrimSpace(strings.TrimPrefix(r.stderr, "version "))
	if r := run(ctx, env, "", "set", "fenced", "1", "--fencing", token); r.code != 0 {
		t.Fatalf("fenced set: %+v", r)
	}
	golden(t, "set-unfenced", run(ctx, env, "", "set", "fenced", "2"))
}

func TestWatch(t *testing.T) {
	storeURL := startStore(t)
	env := map[string]string{"FACEAGENT_SS_URL": storeURL}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"watch", "a", "b"}, &IO{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
	}()
	waitFor(t, &errb, "watching 2 key(s)")
	c := connectStore(t, storeURL)
	// One change at a time: the keys' watches are separate channels, so two pending
	// notifications could be printed in either order.
	for _, kv := range [][2]string{{"a", "1"}, {"b", "two words"}} {
		if _, err := c.Set(ctx, kv[0], []byte(kv[1]), nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, &out, kv[0]+" SET")
	}
	if _, err := c.Del(ctx, "a", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &out, "a DELETE")
	cancel() // Ctrl-C
	code := <-done
	golden(t, "watch", result{code, out.String(), errb.String()})
}

func TestLock(t *testing.T) {
	storeURL := startStore(t)
	env := map[string]string{"FACEAGENT_SS_URL": storeURL}
	ctx := context.Background()
	r := run(ctx, env, "", "lock", "job", "--ttl", "2s", "--holder", "me", "--", "sh", "-c", "echo inside; exit 3")
	golden(t, "lock-exit-code", r)

	// The lease is lost while the command runs: it is stopped and sscli exits 2.
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"lock", "job", "--ttl", "30s", "--holder", "me", "--", "sh", "-c", "echo started; exec sleep 60"},
			&IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
	}()
	waitFor(t, &out, "started")
	c := connectStore(t, storeURL)
	if _, err := c.Del(ctx, "job", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		golden(t, "lock-lost", result{code, out.String(), errb.String()})
	case <-time.After(10 * time.Second):
		t.Fatal("command not stopped when the lease was lost")
	}
	// Held by someone else and --wait=false: exit 1.
	if _, err := c.Set(ctx, "busy", []byte("other"), &store.SetOptions{Expiry: time.Minute}); err != nil {
		t.Fatal(err)
	}
	golden(t, "lock-held", run(ctx, env, "", "lock", "busy", "--wait=false", "--", "true"))
}

func TestBench(t *testing.T) {
	storeURL := startStore(t)
	env := map[string]string{"FACEAGENT_SS_URL": storeURL}
	for _, op := range []string{"set", "get"} {
		r := run(context.Background(), env, "", "bench", "-n", "300", "-c", "8", "--op", op)
		if r.code != 0 {
			t.Fatalf("bench %s: %+v", op, r)
		}
		re := regexp.MustCompile(`^` + strings.ToUpper(op) + `: 300 requests, 8 in flight, 32-byte values, 0 failed\nthroughput: \d+ ops/s\nlatency: p50 \S+  p90 \S+  p99 \S+  max \S+\n$`)
		if !re.MatchString(r.stdout) {
			t.Errorf("bench output:\n%s", r.stdout)
		}
		if !strings.Contains(r.stderr, "100% 300/300") {
			t.Errorf("no finished progress bar: %q", r.stderr)
		}
	}
}

// startStore starts the embedded broker and state store on a free loopback port.
func startStore(t *testing.T) string {
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return "mqtt://" + b.Addr()
}

func connectStore(t *testing.T, url string) *store.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := store.Connect(ctx, &store.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor waits until b contains s, woken by each write to b.
func waitFor(t *testing.T, b *syncBuffer, s string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		b.mu.Lock()
		seen, wrote := strings.Contains(b.b.String(), s), b.written()
		b.mu.Unlock()
		if seen {
			return
		}
		select {
		case <-wrote:
		case <-timeout:
			t.Fatalf("never saw %q in %q", s, b.String())
		}
	}
}
