package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// startStatusAgent runs a real agent (embedded broker on a free port, state written every
// 50 ms, terminals offline 500 ms after their last heartbeat) for devices ids, and returns
// its broker's address.
func startStatusAgent(t *testing.T, gw string, ids ...string) string {
	t.Helper()
	src := fmt.Sprintf("[agent]\ngateway_id = %q\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[dispatch]\nheartbeat_timeout = \"500ms\"\n[store]\nwrite_interval = \"50ms\"\n", gw, t.TempDir())
	for _, id := range ids {
		src += fmt.Sprintf("[[devices]]\nid = %q\n", id)
	}
	cfg, err := config.Parse("status.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(&agent.Options{Config: cfg, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("agent: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("agent not ready within 20 s")
	}
	return a.BrokerAddr()
}

// watchedOutput collects what taskctl status -w writes and wakes a waiter on each write.
type watchedOutput struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func newWatchedOutput() *watchedOutput { return &watchedOutput{wrote: make(chan struct{}, 1)} }

func (w *watchedOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return w.buf.Write(p)
}

func (w *watchedOutput) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor waits until cond holds for the output, for at most d.
func (w *watchedOutput) waitFor(t *testing.T, what string, d time.Duration, cond func(string) bool) {
	t.Helper()
	deadline := time.After(d)
	for !cond(w.String()) {
		select {
		case <-w.wrote:
		case <-deadline:
			t.Fatalf("no %s within %v; output:\n%s", what, d, w.String())
		}
	}
}

// lastTable returns the rows of the last table in a non-tty -w output (tables are separated
// by a blank line), by terminal: the row's fields after the id.
func lastTable(out string) map[string][]string {
	tables := strings.Split(strings.TrimRight(out, "\n"), "\n\n")
	rows := map[string][]string{}
	for _, line := range strings.Split(tables[len(tables)-1], "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && f[0] != "gateway" && f[0] != "TERMINAL" {
			rows[f[0]] = f[1:]
		}
	}
	return rows
}

func stateOf(out, id string) string {
	if row := lastTable(out)[id]; len(row) > 0 {
		return row[0]
	}
	return ""
}

// taskctl status against a real agent with simulated terminals: -w shows both terminals
// online, then the one whose simulator stopped go offline within a bounded wait; on a
// terminal it redraws in place; the one-shot table lists every terminal's state and a
// terminal the gateway does not know as "no state".
func TestStatusWatchesTerminalsGoOffline(t *testing.T) {
	const gw = "gs"
	addr := startStatusAgent(t, gw, "t1", "t2")
	opts := sim.Options{Seed: 3, HeartbeatInterval: 50 * time.Millisecond}
	f1, err := sim.StartMQTT("mqtt://"+addr, []string{"t1"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	f2, err := sim.StartMQTT("mqtt://"+addr, []string{"t2"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()

	// One task makes t1's desired list the agent's (a managed terminal, judged in sync);
	// t2 never named by a task stays unmanaged.
	tasks := filepath.Join(t.TempDir(), "tasks.jsonl")
	task := `{"taskId":"s-1","deviceId":"t1","op":"AddPerson","person":{"id":"p1","name":"Ann","validFrom":"2026-01-01T00:00:00Z","validTo":"2027-01-01T00:00:00Z"}}` + "\n"
	if err := os.WriteFile(tasks, []byte(task), 0o644); err != nil {
		t.Fatal(err)
	}
	var submitOut, submitErr bytes.Buffer
	if code := run(context.Background(), []string{"submit", "-url", "mqtt://" + addr, "-gateway", gw, "-timeout", "20s", tasks}, nil, &submitOut, &submitErr, false); code != 0 {
		t.Fatalf("submit: exit %d: %s%s", code, submitOut.String(), submitErr.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	args := []string{"status", "-w", "-url", "mqtt://" + addr, "-gateway", gw, "t1", "t2"}
	out, tty := newWatchedOutput(), newWatchedOutput()
	var errOut bytes.Buffer
	codes := make(chan int, 2)
	go func() { codes <- run(ctx, args, nil, out, &errOut, false) }()
	go func() { codes <- run(ctx, append(args, "-every", "100ms"), nil, tty, &bytes.Buffer{}, true) }()

	out.waitFor(t, "table with t1 and t2 online and in sync", 20*time.Second, func(s string) bool {
		rows := lastTable(s)
		return len(rows["t1"]) > 1 && rows["t1"][0] == "online" && rows["t1"][1] == "yes" && stateOf(s, "t2") == "online" &&
			len(rows["t2"]) > 1 && rows["t2"][1] == "unmanaged"
	})
	if row := lastTable(out.String())["t1"]; len(row) < 7 || row[2] != "0" || row[3] != "-" || row[4] != "1/1" || row[6] != "ago" {
		t.Errorf("t1's row %q: want queue 0, nothing in flight, persons 1/1 and a heartbeat age", row)
	}

	stopped := time.Now()
	f1.Close()
	out.waitFor(t, "table with t1 offline", 10*time.Second, func(s string) bool {
		return stateOf(s, "t1") == "offline" && stateOf(s, "t2") == "online"
	})
	t.Logf("t1 shown offline %v after its simulator stopped (heartbeat_timeout 500ms)", time.Since(stopped).Round(time.Millisecond))

	// On a terminal: 2 heading lines and 2 rows, redrawn in place (cursor up 4, clear).
	tty.waitFor(t, "a redraw in place", 10*time.Second, func(s string) bool { return strings.Contains(s, "\x1b[4A\x1b[J") })
	if strings.Contains(tty.String(), "\n\n") {
		t.Error("on a terminal, -w printed a new table instead of redrawing in place")
	}
	cancel()
	for range 2 {
		if code := <-codes; code != 0 {
			t.Errorf("status -w ended with %d after ^C: %s", code, errOut.String())
		}
	}

	// One shot: every terminal's row, t3 unknown to the gateway, exit 1.
	var once, onceErr bytes.Buffer
	code := run(context.Background(), []string{"status", "-url", "mqtt://" + addr, "-gateway", gw, "t1", "t2", "t3"}, nil, &once, &onceErr, false)
	if code != 1 {
		t.Errorf("exit %d, want 1 (t3 has no state): %s", code, onceErr.String())
	}
	rows := lastTable(once.String())
	if rows["t1"][0] != "offline" || rows["t2"][0] != "online" || strings.Join(rows["t3"], " ") != "no state not found: faceagent/gs/devices/t3" {
		t.Errorf("one-shot table:\n%s", once.String())
	}
	if !strings.HasPrefix(once.String(), "gateway gs ") || !strings.Contains(once.String(), "3 terminals, 1 online") {
		t.Errorf("one-shot heading:\n%s", once.String())
	}
}

func TestStatusUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"status", "-h"}, nil, &out, &errOut, false); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
	for _, want := range []string{"usage: taskctl status", "KEYNOTIFY", "redrawn in place", "-every"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("status -h lacks %q:\n%s", want, errOut.String())
		}
	}
	for _, args := range [][]string{{"status"}, {"status", "-every", "1ms", "t1"}, {"status", "-nope"}} {
		if code := run(context.Background(), args, nil, &out, &errOut, false); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	out.Reset()
	if code := run(context.Background(), []string{"--help"}, nil, &out, &errOut, false); code != 0 || !strings.Contains(out.String(), "taskctl status") {
		t.Errorf("taskctl --help does not mention status (exit %d)", code)
	}
}
