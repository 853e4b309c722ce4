package serial

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// PTY is a pseudo-terminal pair: Path names the terminal side, which a Link (or any
// serial port library) opens like a serial port; Master is the other end of the wire,
// used by simulated terminals and tests.
//
// The PTY keeps one descriptor of the terminal side open itself, so Master reads block
// (instead of failing with EIO) while no one has Path open, for example while a Link is
// reopening the port.
type PTY struct {
	Master *os.File
	Path   string
	keep   *os.File
}

// OpenPTY opens a new pseudo-terminal pair through /dev/ptmx and puts its terminal side in
// raw mode (no echo, no line editing, 8-bit clean) before anyone opens it.
func OpenPTY() (*PTY, error) {
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	fail := func(what string, err error) (*PTY, error) {
		master.Close()
		return nil, fmt.Errorf("pty: %s: %w", what, err)
	}
	var n uint32
	rc, err := master.SyscallConn()
	if err != nil {
		return fail("syscall conn", err)
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		if ioErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioErr != nil { // unlockpt
			return
		}
		var v uint32
		v, ioErr = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN) // ptsname
		n = v
	}); err != nil {
		return fail("control", err)
	}
	if ioErr != nil {
		return fail("unlock/ptsname", ioErr)
	}
	path := fmt.Sprintf("/dev/pts/%d", n)
	keep, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("open "+path, err)
	}
	krc, err := keep.SyscallConn()
	if err == nil {
		err = krc.Control(func(fd uintptr) {
			var t *unix.Termios
			if t, ioErr = unix.IoctlGetTermios(int(fd), unix.TCGETS); ioErr != nil {
				return
			}
			// cfmakeraw
			t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
			t.Oflag &^= unix.OPOST
			t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
			t.Cflag &^= unix.CSIZE | unix.PARENB
			t.Cflag |= unix.CS8
			ioErr = unix.IoctlSetTermios(int(fd), unix.TCSETS, t)
		})
	}
	if err == nil {
		err = ioErr
	}
	if err != nil {
		keep.Close()
		return fail("raw mode", err)
	}
	return &PTY{Master: master, Path: path, keep: keep}, nil
}

// Close closes both ends. A Link reading Path sees the port vanish, as when a USB adapter is
// pulled.
func (p *PTY) Close() error {
	err := p.Master.Close()
	if kerr := p.keep.Close(); err == nil {
		err = kerr
	}
	return err
}
