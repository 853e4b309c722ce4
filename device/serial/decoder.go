package serial

import "time"

// Decoder turns a byte stream into frames, resynchronising after garbage, corrupt frames and
// cut frames. It is not safe for concurrent use.
type Decoder struct {
	// MaxPayload bounds a frame's payload; 0 means DefaultMaxPayload.
	MaxPayload int
	// FrameTimeout is how long a partial frame may wait for its next byte before it is
	// abandoned as cut (and the stream rescanned from the byte after its SOF); 0 disables it.
	FrameTimeout time.Duration

	store     []byte // backing array; buf is always a prefix-trimmed window of it
	buf       []byte
	lastWrite time.Time
}

// Write appends bytes read from the line at time now.
func (d *Decoder) Write(p []byte, now time.Time) {
	if len(p) == 0 {
		return
	}
	n := copy(d.store, d.buf) // slide what is pending to the front
	d.buf = append(d.store[:n], p...)
	d.store = d.buf[:cap(d.buf)]
	d.lastWrite = now
}

// Buffered returns the number of bytes waiting for the rest of a frame.
func (d *Decoder) Buffered() int { return len(d.buf) }

// Next returns the next frame. skipped counts bytes dropped on the way (garbage before a
// SOF, or the SOF of a rejected frame). err is ErrIncomplete when more bytes are needed;
// ErrHeader, ErrTooLarge, ErrChecksum or ErrCutFrame report one rejected frame, after
// which Next may be called again at once. The frame's Payload is valid until the next
// Write.
func (d *Decoder) Next(now time.Time) (f Frame, skipped int, err error) {
	f, rest, err := ReadFrame(d.buf, d.MaxPayload)
	consumed := len(d.buf) - len(rest)
	d.buf = rest
	switch err {
	case nil:
		return f, consumed - Overhead - len(f.Payload), nil
	case ErrIncomplete:
		if len(rest) > 0 && d.FrameTimeout > 0 && now.Sub(d.lastWrite) >= d.FrameTimeout &&
			len(rest) > 1 { // a lone 0xFA at the end is not a frame yet
			d.buf = rest[1:]
			return Frame{}, consumed + 1, ErrCutFrame
		}
		return Frame{}, consumed, ErrIncomplete
	default:
		return Frame{}, consumed, err
	}
}
