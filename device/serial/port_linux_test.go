package serial

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"

	bugserial "go.bug.st/serial"
	"golang.org/x/sys/unix"
)

// termiosOf reads the line settings of pty's terminal side through its own descriptor.
func termiosOf(t *testing.T, p *PTY, req uint) *unix.Termios {
	t.Helper()
	rc, err := p.keep.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var tio *unix.Termios
	var ioErr error
	if err := rc.Control(func(fd uintptr) { tio, ioErr = unix.IoctlGetTermios(int(fd), req) }); err != nil {
		t.Fatal(err)
	}
	if ioErr != nil {
		t.Fatal(ioErr)
	}
	return tio
}

// The port must set up the line exactly as go.bug.st/serial (which it replaced in the
// daemon) does: same termios, field by field, for every parity, size, stop bits and rate kind.
// A pty stands in for the UART; its driver forces CS8 and clears PARENB whatever was asked,
// so character size and parity enable are compared only as the pty keeps them (PARODD,
// CMSPAR, INPCK, CSTOPB and the rates are kept).
func TestOpenTTYSetsTheLineLikeGoBugSerial(t *testing.T) {
	parities := map[string]bugserial.Parity{"none": bugserial.NoParity, "odd": bugserial.OddParity,
		"even": bugserial.EvenParity, "mark": bugserial.MarkParity, "space": bugserial.SpaceParity}
	stops := map[string]bugserial.StopBits{"1": bugserial.OneStopBit, "2": bugserial.TwoStopBits}
	for _, c := range []Config{
		{},
		{Baud: 9600, DataBits: 7, Parity: "even", StopBits: "2"},
		{Baud: 57600, DataBits: 5, Parity: "odd"},
		{Baud: 921600, DataBits: 6, Parity: "mark"},
		{Baud: 4000000, Parity: "space", StopBits: "2"},
		{Baud: 250000}, // no B constant: termios2, BOTHER
		{Baud: 31250, DataBits: 7, Parity: "odd"},
	} {
		c.Port, c.DeviceID = "unused", "d"
		m, err := c.fill()
		if err != nil {
			t.Fatal(err)
		}
		stop := c.StopBits
		if stop == "" {
			stop = "1"
		}
		par := c.Parity
		if par == "" {
			par = "none"
		}
		theirs := func(p *PTY) {
			port, err := bugserial.Open(p.Path, &bugserial.Mode{BaudRate: c.Baud, DataBits: c.DataBits,
				Parity: parities[par], StopBits: stops[stop]})
			if err != nil {
				t.Fatal(err)
			}
			port.Close()
		}
		ours := func(p *PTY) {
			port, err := openTTY(p.Path, m, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			port.Close()
		}
		var got [2][2]unix.Termios
		for i, open := range []func(*PTY){theirs, ours} {
			p, err := OpenPTY()
			if err != nil {
				t.Fatal(err)
			}
			open(p)
			got[i][0], got[i][1] = *termiosOf(t, p, unix.TCGETS), *termiosOf(t, p, unix.TCGETS2)
			p.Close()
		}
		if got[0] != got[1] {
			t.Errorf("%d baud, %d bits, parity %s, stop %s:\n go.bug.st/serial %+v\n ours             %+v", c.Baud, c.DataBits, par, stop, got[0], got[1])
		}
		if c.Baud == 250000 && (got[1][1].Ospeed != 250000 || got[1][1].Cflag&unix.CBAUD != unix.BOTHER) {
			t.Errorf("250000 baud: termios2 %+v", got[1][1])
		}
	}
}

func TestOpenTTYRefusesOnePointFiveStopBits(t *testing.T) {
	p, err := OpenPTY()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := Config{Port: p.Path, DeviceID: "d", StopBits: "1.5"}
	m, err := c.fill()
	if err != nil {
		t.Fatal(err) // a valid setting; Linux cannot apply it
	}
	if port, err := openTTY(p.Path, m, time.Second); err == nil {
		port.Close()
		t.Fatal("1.5 stop bits opened")
	}
}

func TestTTYReadTimesOutEmptyAndFailsOnHangup(t *testing.T) {
	p, err := OpenPTY()
	if err != nil {
		t.Fatal(err)
	}
	c := Config{Port: p.Path, DeviceID: "d"}
	m, _ := c.fill()
	port, err := openTTY(p.Path, m, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	buf := make([]byte, 16)
	start := time.Now()
	if n, err := port.Read(buf); n != 0 || err != nil {
		t.Fatalf("idle read: %d, %v; want 0, nil after the timeout", n, err)
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("idle read returned after %v, before its 20ms timeout", waited)
	}
	if _, err := p.Master.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if n, err := port.Read(buf); err != nil || string(buf[:n]) != "hi" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	p.Close() // hang up
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := port.Read(buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("hangup reported as %v", err)
			}
			return
		}
		if n != 0 || time.Now().After(deadline) {
			t.Fatalf("after hangup: %d bytes, %v", n, err)
		}
	}
}
