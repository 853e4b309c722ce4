package serial

import (
	"errors"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// tty is an open serial port: a non-blocking descriptor on the runtime's poller, so a read
// waits with a deadline and Close wakes a blocked Read or Write at once.
type tty struct {
	f           *os.File
	readTimeout time.Duration
}

// openTTY opens path exclusively (TIOCEXCL) in raw mode with m's line settings, no hardware
// or software flow control, a read returning whatever has arrived. Rates without a Bnnn
// constant are set through termios2 (BOTHER); 1.5 stop bits do not exist on Linux and fail.
func openTTY(path string, m *lineMode, readTimeout time.Duration) (*tty, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if err := configure(fd, m); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "configure", Path: path, Err: err}
	}
	if err := unix.IoctlSetInt(fd, unix.TIOCEXCL, 0); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "lock", Path: path, Err: err}
	}
	// The descriptor is non-blocking, so os.NewFile puts it on the poller.
	return &tty{f: os.NewFile(uintptr(fd), path), readTimeout: readTimeout}, nil
}

func configure(fd int, m *lineMode) error {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return err
	}
	t.Cflag |= unix.CREAD | unix.CLOCAL
	t.Cflag &^= unix.CRTSCTS
	t.Lflag &^= unix.ICANON | unix.ECHO | unix.ECHOE | unix.ECHOK | unix.ECHONL | unix.ECHOCTL |
		unix.ECHOPRT | unix.ECHOKE | unix.ISIG | unix.IEXTEN
	t.Iflag &^= unix.IXON | unix.IXOFF | unix.IXANY | unix.INPCK | unix.IGNPAR | unix.PARMRK |
		unix.ISTRIP | unix.IGNBRK | unix.BRKINT | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IUCLC
	t.Oflag &^= unix.OPOST
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0

	t.Cflag &^= unix.PARENB | unix.PARODD | unix.CMSPAR
	switch m.parity {
	case parityNone:
	case parityOdd:
		t.Cflag |= unix.PARENB | unix.PARODD
	case parityEven:
		t.Cflag |= unix.PARENB
	case parityMark:
		t.Cflag |= unix.PARENB | unix.PARODD | unix.CMSPAR
	case paritySpace:
		t.Cflag |= unix.PARENB | unix.CMSPAR
	}
	if m.parity != parityNone {
		t.Iflag |= unix.INPCK
	}
	sizes := [...]uint32{5: unix.CS5, 6: unix.CS6, 7: unix.CS7, 8: unix.CS8}
	if m.dataBits < 5 || m.dataBits > 8 {
		return errors.New("data bits must be 5..8")
	}
	t.Cflag = t.Cflag&^unix.CSIZE | sizes[m.dataBits]
	switch m.stopBits {
	case stopOne:
		t.Cflag &^= unix.CSTOPB
	case stopTwo:
		t.Cflag |= unix.CSTOPB
	default:
		return errors.New("1.5 stop bits are not supported on Linux")
	}
	speed, standard := baudConstant(m.baud)
	if standard {
		t.Cflag = t.Cflag&^unix.CBAUD | speed
		t.Ispeed, t.Ospeed = speed, speed
	}
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
		return err
	}
	if standard {
		return nil
	}
	t2, err := unix.IoctlGetTermios(fd, unix.TCGETS2)
	if err != nil {
		return err
	}
	t2.Cflag = t2.Cflag&^unix.CBAUD | unix.BOTHER
	t2.Ispeed, t2.Ospeed = uint32(m.baud), uint32(m.baud)
	return unix.IoctlSetTermios(fd, unix.TCSETS2, t2)
}

// baudConstant returns the Bnnn constant for a standard rate.
func baudConstant(baud int) (uint32, bool) {
	switch baud {
	case 50:
		return unix.B50, true
	case 75:
		return unix.B75, true
	case 110:
		return unix.B110, true
	case 134:
		return unix.B134, true
	case 150:
		return unix.B150, true
	case 200:
		return unix.B200, true
	case 300:
		return unix.B300, true
	case 600:
		return unix.B600, true
	case 1200:
		return unix.B1200, true
	case 1800:
		return unix.B1800, true
	case 2400:
		return unix.B2400, true
	case 4800:
		return unix.B4800, true
	case 9600:
		return unix.B9600, true
	case 19200:
		return unix.B19200, true
	case 38400:
		return unix.B38400, true
	case 57600:
		return unix.B57600, true
	case 115200:
		return unix.B115200, true
	case 230400:
		return unix.B230400, true
	case 460800:
		return unix.B460800, true
	case 500000:
		return unix.B500000, true
	case 576000:
		return unix.B576000, true
	case 921600:
		return unix.B921600, true
	case 1000000:
		return unix.B1000000, true
	case 1152000:
		return unix.B1152000, true
	case 1500000:
		return unix.B1500000, true
	case 2000000:
		return unix.B2000000, true
	case 2500000:
		return unix.B2500000, true
	case 3000000:
		return unix.B3000000, true
	case 3500000:
		return unix.B3500000, true
	case 4000000:
		return unix.B4000000, true
	}
	return 0, false
}

// errPortClosed is what Read returns when the line ends (the other side hung up).
var errPortClosed = errors.New("serial port closed")

// Read returns what has arrived, waiting at most the read timeout; (0, nil) when nothing
// came in that time.
func (p *tty) Read(b []byte) (int, error) {
	if err := p.f.SetReadDeadline(time.Now().Add(p.readTimeout)); err != nil {
		return 0, err
	}
	n, err := p.f.Read(b)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, nil
	case err == io.EOF || n == 0 && err == nil:
		return 0, errPortClosed
	}
	return n, err
}

// Write writes all of b; it blocks while the line does not drain, until Close.
func (p *tty) Write(b []byte) (int, error) { return p.f.Write(b) }

// Close releases the exclusive lock and closes the port, waking a blocked Read or Write.
func (p *tty) Close() error {
	if rc, err := p.f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.IoctlSetInt(int(fd), unix.TIOCNXCL, 0) })
	}
	return p.f.Close()
}
