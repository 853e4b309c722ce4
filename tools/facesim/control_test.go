package main

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/mqttlink"
)

// lineWriter hands every line written to it to a channel, so a test waits on facesim's
// answers as events.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	lines chan string
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			return len(b), nil
		}
		w.lines <- string(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

// expect reads facesim's output until a line contains want, and returns that line.
func (w *lineWriter) expect(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case l := <-w.lines:
			if strings.Contains(l, want) {
				return l
			}
		case <-timeout:
			t.Fatalf("no output line with %q", want)
		}
	}
}

// The -stdin commands change the running terminals as the agent will then see them.
func TestStdinCommands(t *testing.T) {
	in, feed := io.Pipe()
	out := &lineWriter{lines: make(chan string, 1024)}
	ctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan ready, 1)
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-n", "2", "-summary", "0", "-heartbeat", "0",
			"-capacity", "5", "-stdin"}, in, out, io.Discard, func(r ready) { readyc <- r })
	}()
	var r ready
	select {
	case r = <-readyc:
	case code := <-done:
		t.Fatalf("facesim exited %d", code)
	case <-time.After(15 * time.Second):
		t.Fatal("facesim not ready")
	}
	defer func() {
		cancel()
		feed.Close()
		if code := <-done; code != exitOK {
			t.Errorf("exit %d", code)
		}
	}()
	l, err := mqttlink.New(mqttlink.Config{URL: r.BrokerURL})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	waitUp(t, l)
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(feed, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	// heartbeat asks id for a heartbeat and waits for one that satisfies want: a heartbeat
	// sent before the command (the one a terminal sends when it connects) may arrive first.
	heartbeat := func(id string, want func(face.Heartbeat) bool) {
		t.Helper()
		send("heartbeat " + id)
		out.expect(t, "ok")
		timeout := time.After(5 * time.Second)
		var last *face.Heartbeat
		for {
			select {
			case ev := <-l.Events():
				if ev.Kind == device.Heartbeat && ev.DeviceID == id {
					if want(ev.Heartbeat) {
						return
					}
					last = &ev.Heartbeat
				}
			case <-timeout:
				t.Fatalf("no heartbeat as wanted from %s within 5s; the last: %+v", id, last)
			}
		}
	}

	send("status sim-1")
	out.expect(t, "sim-1 protocol=2 serial=FS-sim-1-1 digest=0000000000000000 persons=0 capacity=5")
	send("add sim-1 951 ed8b5c1121eda4fa")
	out.expect(t, "ok")
	send("add sim-1 952")
	out.expect(t, "ok")
	send("persons sim-1")
	out.expect(t, `951 ed8b5c1121eda4fa ""`)
	out.expect(t, `952 - ""`)
	var want face.Digest
	want.Toggle("951", mustRev(t, "ed8b5c1121eda4fa"))
	want.Toggle("952", face.Rev{})
	heartbeat("sim-1", func(h face.Heartbeat) bool { return h.Digest == want.String() && h.Persons == 2 && h.Capacity == 5 })
	send("rev sim-1 951 0123456789abcdef")
	out.expect(t, "ok")
	send("delete sim-1 952")
	out.expect(t, "ok")
	if ps := r.Fleet.Terminal("sim-1").Persons(); len(ps) != 1 || ps[0].Rev != "0123456789abcdef" {
		t.Fatalf("persons %+v", ps)
	}
	send("replace sim-1 SN-9")
	out.expect(t, "sim-1 serial=SN-9")
	heartbeat("sim-1", func(h face.Heartbeat) bool {
		return h.Serial == "SN-9" && h.Persons == 0 && h.Digest == "0000000000000000"
	})
	send("protocol sim-2 1")
	out.expect(t, "ok")
	heartbeat("sim-2", func(h face.Heartbeat) bool { return h.Protocol == 0 && h.Digest == "" })
	send("capacity all 9")
	out.expect(t, "ok")
	send("add sim-2 7")
	out.expect(t, "ok")
	send("reset all")
	out.expect(t, "ok")
	if n := len(r.Fleet.Terminal("sim-2").Persons()); n != 0 || r.Fleet.Terminal("sim-2").Capacity() != 9 {
		t.Fatalf("after reset all: %d persons, capacity %d", n, r.Fleet.Terminal("sim-2").Capacity())
	}
	for line, want := range map[string]string{
		"bogus":                   "bogus: unknown command",
		"status nobody":           `status: no terminal "nobody"`,
		"capacity sim-1 lots":     `capacity: "lots" is not a number`,
		"protocol sim-1 3":        "protocol: sim: protocol 3: want 1 or 2",
		"delete sim-1 ghost":      `delete: sim-1 holds no person "ghost"`,
		"rev sim-1 951 XYZ":       "rev: face: rev must be 16 lower-case hex digits",
		"replace all":             `replace: no terminal "all"`,
		"add sim-1":               "add: want [2 3] arguments, got 1",
		"add sim-1 951 notarev!!": "add: face: command: person.rev",
	} {
		send(line)
		out.expect(t, want)
	}
	send("help")
	out.expect(t, "factory reset")
}

func mustRev(t *testing.T, s string) face.Rev {
	r, err := face.ParseRev(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func waitUp(t *testing.T, l device.Link) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-l.Events():
			if ev.Kind == device.Up {
				return
			}
		case <-timeout:
			t.Fatal("link not up")
		}
	}
}
