package e2e

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// logWatch is a slog handler that keeps every record's message and attributes as one line
// and wakes whoever waits for a line.
type logWatch struct {
	mu    sync.Mutex
	lines []string
	wake  chan struct{}
}

func newLogWatch() *logWatch { return &logWatch{wake: make(chan struct{}, 1)} }

func (w *logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w *logWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *logWatch) WithGroup(string) slog.Handler            { return w }
func (w *logWatch) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	w.mu.Lock()
	w.lines = append(w.lines, line)
	w.mu.Unlock()
	poke(w.wake)
	return nil
}

// has reports whether a line holds every one of parts.
func (w *logWatch) has(parts ...string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lines {
		found := true
		for _, p := range parts {
			found = found && strings.Contains(l, p)
		}
		if found {
			return true
		}
	}
	return false
}

// TestFaceChunkForAConnectionThatWentAway: a face chunk sent to a terminal whose connection
// is gone, while the agent still counts it online, is not delivered to the terminal's next
// connection. The agent gives that chunk up when it judges the terminal offline and, once
// the terminal is back, asks where the face stands (a PutFace without data); the old chunk
// arriving just before that question was two commands in flight, which a strict terminal
// refuses. The sequence: t2 heartbeats on a new connection and is sent nothing (so its
// first command is checked for a subscriber), goes away, is sent a face chunk (no
// subscriber: the link holds it for the connection that heartbeated), is found offline when
// the chunk's retry falls due (retry_interval is longer than heartbeat_timeout and shorter
// than the outage: the chunk is given up, the transfer goes on with the question), and
// comes back on a new connection, which subscribes before it heartbeats. The chunk must
// leave before t2's last heartbeat is heartbeat_timeout old: 2 s leaves a loaded machine
// well over a second for the task's way in.
func TestFaceChunkForAConnectionThatWentAway(t *testing.T) {
	src := fmt.Sprintf(`[agent]
gateway_id = "gw-rc"
data_dir = %q
[broker]
listen = "127.0.0.1:0"
[metrics]
listen = "127.0.0.1:0"
[dispatch]
retry_interval = "3s"
heartbeat_timeout = "2s"
[[devices]]
id = "t2"
`, t.TempDir())
	logs := newLogWatch()
	addr, a, _ := startAgentOpts(t, &agent.Options{Config: parse(t, src), Logger: slog.New(logs)})
	bo := connectBackOffice(t, addr, "gw-rc")

	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"t2"}, sim.Options{Seed: 7, Protocol: 2,
		AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond}, HeartbeatInterval: 200 * time.Millisecond,
		Strict: true, OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	if err := fleet.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, "t2 online", func() bool { return metric(t, a, `faceagent_device_online{device="t2"}`) == 1 })

	term := fleet.Terminal("t2")
	term.GoOffline(6 * time.Second)
	waitFor(t, "the broker to see t2's connection end", func() bool {
		return logs.has("client disconnected", "facesim-t2")
	}, logs.wake)
	photo := newTestFace(43, 1<<10, "template")
	bo.publish("faceagent/gw-rc/tasks", []byte(fmt.Sprintf(`{"taskId":"r1","deviceId":"t2","op":"AddPerson","person":%s}`,
		personJSON("p1", "N p1", &photo, true))))
	bo.waitFor("the task's result", 30*time.Second, func() bool { _, ok := bo.results["r1"]; return ok })

	bo.mu.Lock()
	r := bo.results["r1"]
	bo.mu.Unlock()
	if r.Status != wire.Succeeded {
		t.Errorf("result %+v, want succeeded", r)
	}
	if got, ok := term.Face(photo.sum); !ok || !bytes.Equal(got, photo.data) {
		t.Errorf("the face held %v, byte-exact %v", ok, bytes.Equal(got, photo.data))
	}
	if err := fleet.Violations(); err != nil {
		t.Error(err)
	}
	// The scenario happened as described: the chunk was held for the connection that went
	// away, and dropped when the terminal subscribed on its new one.
	if !logs.has("held command dropped") {
		t.Error("no held command was dropped: the chunk did not wait for the connection that went away")
	}
}
