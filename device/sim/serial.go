package sim

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
)

// SerialPort is the terminal's end of a serial line: a PTY's Master, or a port opened with
// go.bug.st/serial. The fleet closes it.
type SerialPort struct {
	DeviceID string
	Port     io.ReadWriteCloser
}

type serialTerm struct {
	t    *Terminal
	port io.ReadWriteCloser
	wmu  sync.Mutex
}

func (s *serialTerm) read() {
	d := serial.Decoder{FrameTimeout: 500 * time.Millisecond}
	buf := make([]byte, 1024)
	for {
		n, err := s.port.Read(buf)
		if err != nil {
			return // closed
		}
		now := time.Now()
		d.Write(buf[:n], now)
		for {
			f, _, err := d.Next(now)
			if err == serial.ErrIncomplete {
				break
			}
			if err != nil || f.Kind != serial.KindCommand {
				continue
			}
			cmd, err := face.ParseCommandMsg(f.Payload)
			if errors.Is(err, face.ErrUnknownOp) {
				s.t.receive(cmd) // refused by its messageId
				continue
			}
			if err != nil {
				s.t.opts.Logger.Warn("terminal got a bad command", "device", s.t.id, "err", err)
				continue
			}
			s.t.receive(cmd)
		}
	}
}

func (s *serialTerm) write(b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.port.Write(b)
	return err
}

func (s *serialTerm) sendAck(a *face.Ack) error {
	b, err := serial.AppendMessage(nil, serial.KindAck, a)
	if err != nil {
		return err
	}
	return s.write(b)
}

func (s *serialTerm) sendHeartbeat(h *face.Heartbeat) error {
	b, err := serial.AppendMessage(nil, serial.KindHeartbeat, h)
	if err != nil {
		return err
	}
	return s.write(b)
}

func (s *serialTerm) sendGarbage(r *rand.Rand) error {
	b := make([]byte, 1+r.IntN(32))
	for i := range b {
		b[i] = []byte{0xFA, 0xCE, 0x12, 0x00, byte(r.IntN(256))}[r.IntN(5)]
	}
	return s.write(b)
}

// crash leaves a frame cut in the middle, as a terminal losing power while writing does.
func (s *serialTerm) crash(r *rand.Rand) {
	h := face.Heartbeat{DeviceID: s.t.id}
	b, err := serial.AppendMessage(nil, serial.KindHeartbeat, &h)
	if err == nil {
		_ = s.write(b[:1+r.IntN(len(b)-1)])
	}
}

func (s *serialTerm) setOnline(bool) {} // offline: Terminal drops what arrives and sends nothing

func (s *serialTerm) close() { s.port.Close() }

// StartSerial starts one simulated terminal per port.
func StartSerial(ports []SerialPort, opts Options) (*Fleet, error) {
	ids := make([]string, len(ports))
	for i, p := range ports {
		ids[i] = p.DeviceID
	}
	f, err := newFleet(ids, opts)
	if err != nil {
		return nil, err
	}
	for i, t := range f.terms {
		port := ports[i].Port
		if opts.Baud > 0 {
			port = newPacedPort(port, opts.Baud)
		}
		s := &serialTerm{t: t, port: port}
		t.tr = s
		if !f.g.run(s.read) {
			return nil, fmt.Errorf("sim: fleet closed")
		}
	}
	f.start()
	return f, nil
}

// pacedPort paces a port to a UART's speed: baud/10 bytes a second each way (a start bit,
// eight data bits, a stop bit), which a pty does not. A write returns once its last byte
// would have left the line; a read returns its bytes once they would have arrived, so
// that what the other side wrote at once reaches the terminal at the line's speed. Bytes
// move in pieces of paceChunk, so that a long frame trickles as on a real line.
type pacedPort struct {
	io.ReadWriteCloser
	read, write pacer
	wmu         sync.Mutex // one write at a time: they share the line
	readFull    bool       // the last read filled a whole piece: more was waiting
}

const paceChunk = 64

func newPacedPort(p io.ReadWriteCloser, baud int) *pacedPort {
	return &pacedPort{ReadWriteCloser: p, read: pacer{baud: int64(baud)}, write: pacer{baud: int64(baud)}}
}

// Read is called by one goroutine at a time (the terminal's reader).
func (p *pacedPort) Read(b []byte) (int, error) {
	n, err := p.ReadWriteCloser.Read(b[:min(len(b), paceChunk)])
	if n > 0 {
		// A piece read right after a full one was waiting in the pty: on the line it
		// follows the previous piece without a gap.
		time.Sleep(p.read.take(time.Now(), n, p.readFull))
		p.readFull = n == paceChunk
	}
	return n, err
}

func (p *pacedPort) Write(b []byte) (int, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	written := 0
	for i := 0; len(b) > 0; i++ {
		n := min(len(b), paceChunk)
		time.Sleep(p.write.take(time.Now(), n, i > 0)) // the piece is on the line until then
		m, err := p.ReadWriteCloser.Write(b[:n])
		written += m
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

// pacer is one direction of a line. Its busy period began at start and has carried
// bytes since: the line is free again at start + bytes×10 s/baud, rounded up, so that
// pieces add up to the exact time of the whole.
type pacer struct {
	baud  int64
	mu    sync.Mutex
	start time.Time
	bytes int64
}

// take books n bytes on the line and returns how long after now they have crossed it.
// Bytes that follow the previous ones without a pause (follow: the rest of one write, or
// the next piece of what was waiting in the pty) go on the line when it frees, even when
// now is already past that: the lateness is this process's sleep overshooting, not a gap
// on the line, and starting afresh at now would add every overshoot to the line's time
// (about 0.7 ms a piece, 12% on a long frame). A follower that comes more than a piece's
// time late is a real pause. Other bytes start a new busy period at now if the line is
// free by then.
func (p *pacer) take(now time.Time, n int, follow bool) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	free := p.free()
	late := now.Sub(free)
	if late > 0 && (!follow || late > p.duration(paceChunk)) {
		p.start, p.bytes = now, 0
	}
	p.bytes += int64(n)
	return p.free().Sub(now)
}

func (p *pacer) free() time.Time { return p.start.Add(p.duration(p.bytes)) }

// duration is the time n bytes take on the line, rounded up to the nanosecond.
func (p *pacer) duration(n int64) time.Duration {
	return time.Duration((n*10*int64(time.Second) + p.baud - 1) / p.baud)
}
