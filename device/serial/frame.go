package serial

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Frame layout (see doc.go for the reasoning):
//
//	off  size  field
//	0    2     SOF 0xFA 0xCE
//	2    1     kind: version 1 in the high nibble, message kind in the low nibble
//	3    2     payload length, big endian, at most the decoder's bound
//	5    1     header check: low byte of CRC-32C over bytes 2..4
//	6    n     payload: one msgp-encoded protocol v1 message
//	6+n  4     CRC-32C over bytes 2..6+n-1 (kind, length, header check, payload), big endian
const (
	sof0, sof1     = 0xFA, 0xCE
	headerLen      = 6
	trailerLen     = 4
	Overhead       = headerLen + trailerLen // bytes a frame adds to its payload
	MaxPayloadWire = 0xFFFF                 // what the length field can say
	// DefaultMaxPayload bounds a frame's payload unless configured otherwise: a command
	// with every field at its bound (face.MaxIDLen, face.MaxTextLen) fits, and so does a
	// PutFace carrying 4,096 bytes of face with every other field at its bound
	// (face.ChunkLimitFor(4608) is 4,347).
	DefaultMaxPayload = 4608
)

var sof = []byte{sof0, sof1}

// Kind says which protocol v1 message a frame carries.
type Kind byte

// Frame kinds; version 1 lives in the high nibble so a future version is told apart.
const (
	KindCommand   Kind = 0x11
	KindAck       Kind = 0x12
	KindHeartbeat Kind = 0x13
)

func (k Kind) valid() bool { return k == KindCommand || k == KindAck || k == KindHeartbeat }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Framing errors. ErrIncomplete means "feed more bytes"; the others mean the bytes at the
// start of a candidate frame were not a frame, and ReadFrame's rest skips past its SOF.
var (
	ErrIncomplete = errors.New("serial: incomplete frame")
	ErrHeader     = errors.New("serial: bad frame header (unknown kind or header check)")
	ErrTooLarge   = errors.New("serial: frame payload over the size bound")
	ErrChecksum   = errors.New("serial: frame checksum mismatch")
	ErrCutFrame   = errors.New("serial: frame cut short (no more bytes within the frame timeout)")
)

// Frame is one decoded frame. Payload is a view into the buffer given to ReadFrame, valid
// until that buffer is modified.
type Frame struct {
	Kind    Kind
	Payload []byte
}

// AppendFrame appends a frame carrying payload to dst. It returns ErrTooLarge, with dst
// unchanged, for a payload over MaxPayloadWire or an invalid kind.
func AppendFrame(dst []byte, kind Kind, payload []byte) ([]byte, error) {
	if len(payload) > MaxPayloadWire || !kind.valid() {
		return dst, ErrTooLarge
	}
	start := len(dst)
	dst = appendHeader(dst, kind, len(payload))
	dst = append(dst, payload...)
	return appendTrailer(dst, start), nil
}

func appendHeader(dst []byte, kind Kind, n int) []byte {
	dst = append(dst, sof0, sof1, byte(kind), byte(n>>8), byte(n))
	return append(dst, byte(crc32.Checksum(dst[len(dst)-3:], castagnoli)))
}

// appendTrailer appends the CRC of the frame that starts at dst[start].
func appendTrailer(dst []byte, start int) []byte {
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start+2:], castagnoli))
}

// Message is a protocol v1 message that knows its msgp encoding (face.Command, face.Ack,
// face.Heartbeat).
type Message interface {
	AppendMsg(dst []byte) ([]byte, error)
}

// AppendMessage validates m, encodes it with msgp straight into a frame of the given kind
// and appends the frame to dst. No allocation when dst has room.
func AppendMessage(dst []byte, kind Kind, m Message) ([]byte, error) {
	if !kind.valid() {
		return dst, ErrHeader
	}
	start := len(dst)
	dst = append(dst, sof0, sof1, byte(kind), 0, 0, 0)
	out, err := m.AppendMsg(dst)
	if err != nil {
		return dst[:start], err
	}
	n := len(out) - start - headerLen
	if n > MaxPayloadWire {
		return dst[:start], ErrTooLarge
	}
	out[start+3], out[start+4] = byte(n>>8), byte(n)
	out[start+5] = byte(crc32.Checksum(out[start+2:start+5], castagnoli))
	return appendTrailer(out, start), nil
}

// ReadFrame finds and decodes the first frame in b, skipping anything before its SOF.
// maxPayload bounds the payload (0 means DefaultMaxPayload).
//
// On success rest follows the frame. On ErrIncomplete rest starts at the candidate frame
// (or is the last byte of b when it could begin a SOF): keep it and append more bytes. On
// ErrHeader, ErrTooLarge and ErrChecksum rest starts one byte after the rejected SOF, so the
// next call resynchronises on the next SOF — even one inside the rejected frame, which is
// how a frame cut short by a newer one is recovered. len(b)-len(rest) bytes were skipped.
// ReadFrame does not allocate.
func ReadFrame(b []byte, maxPayload int) (f Frame, rest []byte, err error) {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	i := bytes.Index(b, sof)
	if i < 0 {
		if len(b) > 0 && b[len(b)-1] == sof0 {
			return Frame{}, b[len(b)-1:], ErrIncomplete
		}
		return Frame{}, b[len(b):], ErrIncomplete
	}
	c := b[i:]
	if len(c) < headerLen {
		return Frame{}, c, ErrIncomplete
	}
	kind := Kind(c[2])
	if !kind.valid() || c[5] != byte(crc32.Checksum(c[2:5], castagnoli)) {
		return Frame{}, b[i+1:], ErrHeader
	}
	n := int(binary.BigEndian.Uint16(c[3:5]))
	if n > maxPayload {
		return Frame{}, b[i+1:], ErrTooLarge
	}
	total := headerLen + n + trailerLen
	if len(c) < total {
		return Frame{}, c, ErrIncomplete
	}
	if binary.BigEndian.Uint32(c[headerLen+n:]) != crc32.Checksum(c[2:headerLen+n], castagnoli) {
		return Frame{}, b[i+1:], ErrChecksum
	}
	return Frame{Kind: kind, Payload: c[headerLen : headerLen+n]}, c[total:], nil
}

// Decode turns a frame into the protocol v1 message it carries: a face.Command, face.Ack
// or face.Heartbeat, or a *face.Error.
func (f Frame) Decode() (any, error) {
	switch f.Kind {
	case KindCommand:
		return face.ParseCommandMsg(f.Payload)
	case KindAck:
		return face.ParseAckMsg(f.Payload)
	case KindHeartbeat:
		return face.ParseHeartbeatMsg(f.Payload)
	}
	return nil, ErrHeader
}
