package serial

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// terminal is the far end of a PTY: it decodes the frames the link writes.
type terminal struct {
	t    *testing.T
	pty  *PTY
	cmds chan face.Command
	done chan struct{}
}

func newTerminal(t *testing.T) *terminal {
	t.Helper()
	p, err := OpenPTY()
	if err != nil {
		t.Fatal(err)
	}
	tm := &terminal{t: t, pty: p, cmds: make(chan face.Command, 16), done: make(chan struct{})}
	go tm.read()
	t.Cleanup(tm.close)
	return tm
}

func (tm *terminal) read() {
	defer close(tm.done)
	var d Decoder
	buf := make([]byte, 512)
	for {
		n, err := tm.pty.Master.Read(buf)
		if err != nil {
			return
		}
		d.Write(buf[:n], time.Now())
		for {
			f, _, err := d.Next(time.Now())
			if err == ErrIncomplete {
				break
			}
			if err != nil {
				continue
			}
			if m, err := f.Decode(); err == nil {
				if c, ok := m.(face.Command); ok {
					tm.cmds <- c
				}
			}
		}
	}
}

func (tm *terminal) close() {
	tm.pty.Close()
	<-tm.done
}

func (tm *terminal) write(b []byte) {
	tm.t.Helper()
	if _, err := tm.pty.Master.Write(b); err != nil {
		tm.t.Fatal(err)
	}
}

func (tm *terminal) ackFrame(id string, code int) []byte {
	fr, err := AppendMessage(nil, KindAck, &face.Ack{MessageID: id, Code: code})
	if err != nil {
		tm.t.Fatal(err)
	}
	return fr
}

func (tm *terminal) nextCommand() face.Command {
	tm.t.Helper()
	select {
	case c := <-tm.cmds:
		return c
	case <-time.After(5 * time.Second):
		tm.t.Fatal("terminal received no command")
	}
	return face.Command{}
}

func newLink(t *testing.T, cfg Config) *Link {
	t.Helper()
	if cfg.DeviceID == "" {
		cfg.DeviceID = "2042253"
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// waitEvent returns the next event of the wanted kind, failing on timeout. Events of other
// kinds are passed to skip (which may fail the test) or dropped when skip is nil.
func waitEvent(t *testing.T, l *Link, kind device.EventKind) device.Event {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-l.Events():
			if !ok {
				t.Fatalf("events closed while waiting for %s", kind)
			}
			if ev.Kind == kind {
				return ev
			}
			t.Logf("skipping %s", ev)
		case <-timeout:
			t.Fatalf("no %s event", kind)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	tm := newTerminal(t)
	l := newLink(t, Config{Port: tm.pty.Path, Baud: 9600, Parity: "even", StopBits: "2"})
	if ev := waitEvent(t, l, device.Up); ev.DeviceID != "2042253" {
		t.Fatalf("up for %q", ev.DeviceID)
	}
	ctx := context.Background()
	if err := l.Send(ctx, "2042253", typicalCommand); err != nil {
		t.Fatal(err)
	}
	if got := tm.nextCommand(); !got.Equal(&typicalCommand) {
		t.Fatalf("terminal got %+v", got)
	}
	tm.write(tm.ackFrame(typicalCommand.MessageID, 0))
	ev := waitEvent(t, l, device.Ack)
	if ev.Ack.MessageID != typicalCommand.MessageID || ev.DeviceID != "2042253" || ev.At.IsZero() {
		t.Fatalf("ack event %+v", ev)
	}
	hb, _ := AppendMessage(nil, KindHeartbeat, &face.Heartbeat{Time: "2026-11-22T10:00:00Z", Persons: 3})
	tm.write(hb)
	if ev := waitEvent(t, l, device.Heartbeat); ev.Heartbeat.Persons != 3 || ev.Heartbeat.DeviceID != "2042253" {
		t.Fatalf("heartbeat event %+v", ev)
	}

	err := l.Send(ctx, "other", typicalCommand)
	if !errors.Is(err, device.ErrUnknownDevice) {
		t.Fatalf("send to another device: %v", err)
	}
	var se *Error
	if !errors.As(err, &se) || se.Port != tm.pty.Path {
		t.Fatalf("not a *serial.Error: %#v", err)
	}
	if err := l.Send(ctx, "2042253", face.Command{MessageID: "x", Op: "Explode"}); !errors.Is(err, device.ErrInvalid) {
		t.Fatalf("invalid command: %v", err)
	}
}

func TestGarbageCorruptAndCutFrames(t *testing.T) {
	tm := newTerminal(t)
	l := newLink(t, Config{Port: tm.pty.Path, FrameTimeout: 200 * time.Millisecond, ReadTimeout: 20 * time.Millisecond})
	waitEvent(t, l, device.Up)

	// Garbage, then an ack.
	tm.write(append([]byte("\x00\xffnoise\xfa"), tm.ackFrame("a-1", 0)...))
	if ev := waitEvent(t, l, device.Error); !errors.Is(ev.Err, device.ErrFrame) {
		t.Fatalf("garbage: %v", ev.Err)
	}
	if ev := waitEvent(t, l, device.Ack); ev.Ack.MessageID != "a-1" {
		t.Fatalf("ack after garbage: %+v", ev)
	}

	// A corrupt ack, then a good one.
	bad := tm.ackFrame("a-2", 0)
	bad[len(bad)-6] ^= 0x01
	tm.write(append(bad, tm.ackFrame("a-3", 0)...))
	if ev := waitEvent(t, l, device.Error); !errors.Is(ev.Err, ErrChecksum) {
		t.Fatalf("corrupt frame: %v", ev.Err)
	}
	if ev := waitEvent(t, l, device.Ack); ev.Ack.MessageID != "a-3" {
		t.Fatalf("ack after a corrupt one: %+v", ev)
	}

	// A frame cut by a newer one (the terminal rebooted mid-frame).
	cut := tm.ackFrame("a-4", 0)
	tm.write(append(cut[:len(cut)/2], tm.ackFrame("a-5", 0)...))
	if ev := waitEvent(t, l, device.Ack); ev.Ack.MessageID != "a-5" {
		t.Fatalf("ack after a cut frame: %+v", ev)
	}

	// A frame cut with nothing after it: dropped after FrameTimeout, not waited on forever.
	tm.write(cut[:len(cut)/2])
	if ev := waitEvent(t, l, device.Error); !errors.Is(ev.Err, ErrCutFrame) {
		t.Fatalf("cut frame: %v", ev.Err)
	}
	tm.write(tm.ackFrame("a-6", 0))
	if ev := waitEvent(t, l, device.Ack); ev.Ack.MessageID != "a-6" {
		t.Fatalf("ack after a timed-out frame: %+v", ev)
	}

	// A valid frame holding an invalid message, and a heartbeat naming another terminal.
	raw, _ := (&face.Ack{Code: 1}).MarshalMsg(nil)
	inv, _ := AppendFrame(nil, KindAck, raw)
	tm.write(inv)
	if ev := waitEvent(t, l, device.Error); !errors.Is(ev.Err, device.ErrInvalid) || !errors.Is(ev.Err, face.ErrInvalid) {
		t.Fatalf("invalid ack: %v", ev.Err)
	}
	hb, _ := AppendMessage(nil, KindHeartbeat, &face.Heartbeat{DeviceID: "someone-else"})
	tm.write(hb)
	if ev := waitEvent(t, l, device.Error); !errors.Is(ev.Err, device.ErrInvalid) {
		t.Fatalf("foreign heartbeat: %v", ev.Err)
	}
}

func TestPortVanishesAndComesBack(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "ttyFACE")
	tm := newTerminal(t)
	if err := os.Symlink(tm.pty.Path, link); err != nil {
		t.Fatal(err)
	}
	l := newLink(t, Config{Port: link, ReopenMin: 10 * time.Millisecond, ReopenMax: 50 * time.Millisecond})
	waitEvent(t, l, device.Up)

	tm.close() // the USB adapter is pulled
	os.Remove(link)
	if ev := waitEvent(t, l, device.Down); !errors.Is(ev.Err, device.ErrTransport) {
		t.Fatalf("down: %v", ev.Err)
	}
	if err := l.Send(context.Background(), "2042253", typicalCommand); !errors.Is(err, device.ErrNotConnected) {
		t.Fatalf("send while down: %v", err)
	}

	tm2 := newTerminal(t) // plugged back in, under the same name
	if err := os.Symlink(tm2.pty.Path, link); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, l, device.Up)
	if err := l.Send(context.Background(), "2042253", typicalCommand); err != nil {
		t.Fatal(err)
	}
	tm2.nextCommand()
	tm2.write(tm2.ackFrame(typicalCommand.MessageID, 0))
	waitEvent(t, l, device.Ack)
}

func TestMissingPortReportsDownOnceAndCloses(t *testing.T) {
	l := newLink(t, Config{Port: filepath.Join(t.TempDir(), "nope"), ReopenMin: time.Millisecond, ReopenMax: 2 * time.Millisecond})
	if ev := waitEvent(t, l, device.Down); !errors.Is(ev.Err, device.ErrNotConnected) {
		t.Fatalf("down: %v", ev.Err)
	}
	select {
	case ev := <-l.Events():
		t.Fatalf("a second event while still missing: %s", ev)
	case <-time.After(50 * time.Millisecond): // tens of reopen attempts
	}
	l.Close()
	if err := l.Send(context.Background(), "2042253", typicalCommand); !errors.Is(err, device.ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
}

func TestCloseWakesBlockedRead(t *testing.T) {
	tm := newTerminal(t)
	l := newLink(t, Config{Port: tm.pty.Path, ReadTimeout: time.Hour}) // only Close can end the read
	waitEvent(t, l, device.Up)
	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return while the reader was blocked")
	}
	for range l.Events() { // drained and closed
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{DeviceID: "d"},
		{Port: "/dev/null"},
		{Port: "/dev/null", DeviceID: "d", Parity: "sometimes"},
		{Port: "/dev/null", DeviceID: "d", StopBits: "3"},
		{Port: "/dev/null", DeviceID: "d", DataBits: 9},
		{Port: "/dev/null", DeviceID: "d", MaxPayload: 1 << 20},
	} {
		if _, err := New(cfg); !errors.Is(err, device.ErrConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// A terminal that stops reading fills the line. Send returns when its ctx ends, whether it
// was waiting for the write lock or blocked in the write, and Close gives the blocked write
// WriteGrace, then closes the port anyway.
func TestSendBlockedByAStuckTerminal(t *testing.T) {
	p, err := OpenPTY()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l := newLink(t, Config{Port: p.Path, DeviceID: "d", WriteGrace: 100 * time.Millisecond})
	waitEvent(t, l, device.Up)
	send := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		return l.Send(ctx, "d", typicalCommand)
	}
	// Nobody reads the master: sooner or later a write blocks and Send gives up on ctx.
	for i := 0; ; i++ {
		err := send()
		if err == nil {
			if i > 100000 {
				t.Fatal("the line never filled up")
			}
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, device.ErrTransport) {
			t.Fatalf("blocked write: %v", err)
		}
		break
	}
	// The write is still in progress: the next Send cannot even get the write lock.
	if err := send(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send behind a blocked write: %v", err)
	}
	start := time.Now()
	l.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v with a write blocked", d)
	}
	// Closing the pty fails the blocked write, so its goroutine ends before goleak looks.
}
