package serial

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// Config describes one serial port and the terminal on it. The zero value of every field but
// Port and DeviceID means its default.
type Config struct {
	Port     string // e.g. /dev/ttyS1, /dev/ttyUSB0, or a PTY's Path
	DeviceID string // the terminal on this port (a port carries exactly one)

	Baud     int    // default 115200
	DataBits int    // 5..8, default 8
	Parity   string // "none" (default), "odd", "even", "mark", "space"
	StopBits string // "1" (default; "" and "0" too), "1.5", "2"

	// ReadTimeout bounds each read of the port, so the reader notices a cut frame (and
	// nothing waits on the port forever). Default 100ms.
	ReadTimeout time.Duration
	// FrameTimeout is how long a partial frame may wait for its next byte before it is
	// dropped as cut. Default: 100ms plus twice the time the largest frame takes at Baud.
	FrameTimeout time.Duration
	// MaxPayload bounds a frame's payload in both directions. Default DefaultMaxPayload.
	MaxPayload int
	// ReopenMin and ReopenMax bound the exponential backoff between attempts to open the port
	// after it failed or vanished. Defaults 100ms and 5s.
	ReopenMin, ReopenMax time.Duration
	// WriteGrace is how long Close waits for a Send blocked in a write before it closes the
	// port anyway. Default 1s.
	WriteGrace time.Duration
	// EventBuffer is the capacity of the Events channel. Default 64.
	EventBuffer int
	Logger      *slog.Logger // default: discard
}

// lineMode is how the port is set up: rate, character size, parity and stop bits.
type lineMode struct {
	baud, dataBits int
	parity         parity
	stopBits       stopBits
}

type parity uint8

const (
	parityNone parity = iota
	parityOdd
	parityEven
	parityMark
	paritySpace
)

type stopBits uint8

const (
	stopOne stopBits = iota
	stopOnePointFive
	stopTwo
)

func (c *Config) fill() (*lineMode, error) {
	if c.Port == "" || c.DeviceID == "" {
		return nil, errors.New("config needs both Port and DeviceID")
	}
	if len(c.DeviceID) > face.MaxIDLen {
		return nil, fmt.Errorf("device id longer than %d bytes", face.MaxIDLen)
	}
	mode := &lineMode{baud: c.Baud, dataBits: c.DataBits}
	if mode.baud == 0 {
		mode.baud, c.Baud = 115200, 115200
	}
	if mode.dataBits == 0 {
		mode.dataBits, c.DataBits = 8, 8
	}
	if mode.dataBits < 5 || mode.dataBits > 8 {
		return nil, fmt.Errorf("data bits %d: want 5..8", mode.dataBits)
	}
	switch c.Parity {
	case "", "none":
		mode.parity = parityNone
	case "odd":
		mode.parity = parityOdd
	case "even":
		mode.parity = parityEven
	case "mark":
		mode.parity = parityMark
	case "space":
		mode.parity = paritySpace
	default:
		return nil, fmt.Errorf("parity %q: want none, odd, even, mark or space", c.Parity)
	}
	switch c.StopBits {
	case "", "0", "1": // "0": an unset integer field rendered as text means the default too
		mode.stopBits = stopOne
	case "1.5":
		mode.stopBits = stopOnePointFive
	case "2":
		mode.stopBits = stopTwo
	default:
		return nil, fmt.Errorf("stop bits %q: want 1, 1.5 or 2", c.StopBits)
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = DefaultMaxPayload
	}
	if c.MaxPayload > MaxPayloadWire {
		return nil, fmt.Errorf("max payload %d: at most %d", c.MaxPayload, MaxPayloadWire)
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 100 * time.Millisecond
	}
	if c.FrameTimeout <= 0 {
		wire := time.Duration(c.MaxPayload+Overhead) * 10 * time.Second / time.Duration(c.Baud)
		c.FrameTimeout = 100*time.Millisecond + 2*wire
	}
	if c.ReopenMin <= 0 {
		c.ReopenMin = 100 * time.Millisecond
	}
	if c.ReopenMax < c.ReopenMin {
		c.ReopenMax = max(5*time.Second, c.ReopenMin)
	}
	if c.WriteGrace <= 0 {
		c.WriteGrace = time.Second
	}
	if c.EventBuffer <= 0 {
		c.EventBuffer = 64
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return mode, nil
}

// Link is a device.Link over one serial port carrying one terminal.
type Link struct {
	cfg    Config
	mode   *lineMode
	events chan device.Event
	done   chan struct{}
	wsem   chan struct{} // a mutex for writers that can be waited on with a timeout

	mu   sync.Mutex
	port *tty // nil while the port is closed

	closeOnce sync.Once
	wg        sync.WaitGroup
}

var _ device.Link = (*Link)(nil)

// New validates cfg and starts the link. It does not block: the port is opened (and
// reopened with backoff whenever it fails) in the background; an Up event says it is open.
func New(cfg Config) (*Link, error) {
	mode, err := cfg.fill()
	if err != nil {
		return nil, &Error{Code: device.ErrConfig, Port: cfg.Port, DeviceID: cfg.DeviceID, Err: err}
	}
	l := &Link{
		cfg:    cfg,
		mode:   mode,
		events: make(chan device.Event, cfg.EventBuffer),
		done:   make(chan struct{}),
		wsem:   make(chan struct{}, 1),
	}
	l.wg.Add(1)
	go l.run()
	return l, nil
}

// Events implements device.Link.
func (l *Link) Events() <-chan device.Event { return l.events }

func (l *Link) err(code device.Code, cause error) error {
	return &Error{Code: code, Port: l.cfg.Port, DeviceID: l.cfg.DeviceID, Err: cause}
}

// Send implements device.Link: it frames cmd and writes it to the port. ctx bounds both the
// wait for an earlier Send's write and this write; when ctx ends first, Send returns an
// ErrTransport wrapping ctx.Err() while the write goes on in the background (the command may
// still reach the terminal, as with any timeout). Send returns device.ErrNotConnected at once
// while the port is closed.
func (l *Link) Send(ctx context.Context, deviceID string, cmd face.Command) error {
	if deviceID != l.cfg.DeviceID {
		return l.err(device.ErrUnknownDevice, fmt.Errorf("this port carries %q, not %q", l.cfg.DeviceID, deviceID))
	}
	frame, err := AppendMessage(make([]byte, 0, 128), KindCommand, &cmd)
	if err != nil {
		return l.err(device.ErrInvalid, err)
	}
	if len(frame)-Overhead > l.cfg.MaxPayload {
		return l.err(device.ErrInvalid, ErrTooLarge)
	}
	select {
	case l.wsem <- struct{}{}:
	case <-ctx.Done():
		return l.err(device.ErrTransport, ctx.Err())
	case <-l.done:
		return l.err(device.ErrClosed, nil)
	}
	release := true
	defer func() {
		if release {
			<-l.wsem
		}
	}()
	select {
	case <-l.done:
		return l.err(device.ErrClosed, nil)
	default:
	}
	l.mu.Lock()
	port := l.port
	l.mu.Unlock()
	if port == nil {
		return l.err(device.ErrNotConnected, nil)
	}
	// A port write blocks with no timeout. On a real UART a write drains at the
	// baud rate; on a line nobody reads (a pty, a wedged adapter) it may block until the
	// port goes away. So the write runs on its own goroutine, which owns the write lock
	// until the write ends, and Send waits for it only as long as ctx allows.
	result := make(chan error, 1) // buffered: the writer may finish after Send returned
	release = false
	go func() {
		defer func() { <-l.wsem }()
		var err error
		for len(frame) > 0 && err == nil {
			var n int
			n, err = port.Write(frame)
			frame = frame[n:]
			if len(frame) > 0 && err == nil && !l.current(port) {
				// Closed meanwhile: its descriptor number may already belong to another file.
				err = errors.New("port closed during the write")
			}
		}
		result <- err
	}()
	select {
	case err := <-result:
		if err != nil {
			return l.err(device.ErrTransport, err)
		}
		return nil
	case <-ctx.Done():
		return l.err(device.ErrTransport, fmt.Errorf("write still in progress: %w", ctx.Err()))
	}
}

// current reports whether port is still the link's open port.
func (l *Link) current(port *tty) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.done:
		return false
	default:
		return l.port == port
	}
}

// Close implements device.Link. It closes the port, which wakes the blocked read, and waits
// for the reader. A Send blocked writing to a port nobody drains is given WriteGrace.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		close(l.done)
		grace := time.NewTimer(l.cfg.WriteGrace)
		select {
		case l.wsem <- struct{}{}: // no write in progress: closing cannot pull an fd from under one
			defer func() { <-l.wsem }()
		case <-grace.C:
		}
		grace.Stop()
		l.mu.Lock()
		if l.port != nil {
			l.port.Close() // wakes the reader
		}
		l.mu.Unlock()
		l.wg.Wait()
		close(l.events)
	})
	return nil
}

func (l *Link) emit(ev device.Event) {
	ev.At = time.Now()
	if ev.DeviceID == "" && ev.Kind != device.Error {
		ev.DeviceID = l.cfg.DeviceID
	}
	select {
	case l.events <- ev:
	case <-l.done:
	}
}

func (l *Link) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.done:
		return false
	}
}

// run opens the port, reads until it fails, and reopens it with exponential backoff.
func (l *Link) run() {
	defer l.wg.Done()
	backoff := l.cfg.ReopenMin
	reportedDown := false
	for {
		port, err := openTTY(l.cfg.Port, l.mode, l.cfg.ReadTimeout)
		if err != nil {
			if !reportedDown { // one Down per outage, not one per attempt
				l.emit(device.Event{Kind: device.Down, Err: l.err(device.ErrNotConnected, err)})
				reportedDown = true
			}
			l.cfg.Logger.Debug("serial open failed", "port", l.cfg.Port, "err", err, "retry", backoff)
			if !l.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, l.cfg.ReopenMax)
			continue
		}
		l.mu.Lock()
		select {
		case <-l.done:
			l.mu.Unlock()
			port.Close()
			return
		default:
		}
		l.port = port
		l.mu.Unlock()
		backoff = l.cfg.ReopenMin
		reportedDown = false
		l.cfg.Logger.Info("serial port open", "port", l.cfg.Port, "device", l.cfg.DeviceID)
		l.emit(device.Event{Kind: device.Up})

		err = l.read(port)

		// Take the writers' lock so no Send writes to a descriptor being closed.
		select {
		case l.wsem <- struct{}{}:
		case <-l.done:
			return // Close owns the port now
		}
		l.mu.Lock()
		l.port = nil
		l.mu.Unlock()
		port.Close()
		<-l.wsem
		select {
		case <-l.done:
			return
		default:
		}
		l.cfg.Logger.Warn("serial port lost", "port", l.cfg.Port, "err", err)
		l.emit(device.Event{Kind: device.Down, Err: l.err(device.ErrTransport, err)})
		reportedDown = true
		if !l.sleep(backoff) {
			return
		}
	}
}

// read decodes frames until the port fails. Timeouts are explicit: the port returns (0, nil)
// when ReadTimeout passes, which is when a stalled partial frame is dropped.
func (l *Link) read(port *tty) error {
	dec := Decoder{MaxPayload: l.cfg.MaxPayload, FrameTimeout: l.cfg.FrameTimeout}
	buf := make([]byte, 1024)
	// After a rejected frame the bytes skipped up to the next SOF are mostly that frame's
	// remains: one Error event covers them. Garbage between good frames gets its own.
	afterReject := false
	for {
		n, err := port.Read(buf)
		if err != nil {
			return err
		}
		now := time.Now()
		dec.Write(buf[:n], now)
		for {
			f, skipped, err := dec.Next(now)
			if skipped > 0 && !afterReject && (err == nil || err == ErrIncomplete) {
				l.emit(device.Event{Kind: device.Error, DeviceID: l.cfg.DeviceID,
					Err: l.err(device.ErrFrame, fmt.Errorf("skipped %d bytes of garbage", skipped))})
			}
			if err == ErrIncomplete {
				break
			}
			if err != nil {
				afterReject = true
				l.emit(device.Event{Kind: device.Error, DeviceID: l.cfg.DeviceID, Err: l.err(device.ErrFrame, err)})
				continue
			}
			afterReject = false
			l.handle(f)
		}
	}
}

func (l *Link) handle(f Frame) {
	msg, err := f.Decode()
	if err != nil {
		l.emit(device.Event{Kind: device.Error, DeviceID: l.cfg.DeviceID, Err: l.err(device.ErrInvalid, err)})
		return
	}
	switch m := msg.(type) {
	case face.Ack:
		l.emit(device.Event{Kind: device.Ack, Ack: m})
	case face.Heartbeat:
		if m.DeviceID != "" && m.DeviceID != l.cfg.DeviceID {
			l.emit(device.Event{Kind: device.Error, DeviceID: l.cfg.DeviceID, Err: l.err(device.ErrInvalid,
				fmt.Errorf("heartbeat names device %.64q on the port of %q", m.DeviceID, l.cfg.DeviceID))})
			return
		}
		m.DeviceID = l.cfg.DeviceID
		l.emit(device.Event{Kind: device.Heartbeat, Heartbeat: m})
	default:
		l.emit(device.Event{Kind: device.Error, DeviceID: l.cfg.DeviceID,
			Err: l.err(device.ErrInvalid, errors.New("the terminal sent a command frame"))})
	}
}
