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
		s := &serialTerm{t: t, port: ports[i].Port}
		t.tr = s
		if !f.g.run(s.read) {
			return nil, fmt.Errorf("sim: fleet closed")
		}
	}
	f.start()
	return f, nil
}
