// Package mqttwire writes and reads the few MQTT 5 packets (OASIS MQTT 5.0, section 3)
// that the test rig's simple clients need: the simulated terminals of device/sim, the
// benchmarks' back office, and the soak client of internal/soakclient, which looks on the
// wire like the Azure IoT Operations SDK's session client (props.go: properties, DUP, No
// Local). They stand for devices and systems on other machines, and
// paho's per-packet cost (a goroutine hand-off per message, a session store, a growing
// bytes.Buffer per packet read, a context per publish) made them a third of the test
// machine's CPU in the 64-terminal benchmark, slowing what it measures. The bytes are
// the ones paho's packets package writes for the same packets (wire_test.go compares
// them).
//
// Encoders append to dst (AppendX(dst, ...) []byte). ReadPacket reads one packet into a
// caller's buffer; the Parse functions split its remaining part without copying, so what
// they return is valid as long as that buffer is not reused.
package mqttwire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// Packet types, the high nibble of the first byte [MQTT 2.1.2].
const (
	TypeConnect    = 1
	TypeConnack    = 2
	TypePublish    = 3
	TypePuback     = 4
	TypeSubscribe  = 8
	TypeSuback     = 9
	TypePingreq    = 12
	TypePingresp   = 13
	TypeDisconnect = 14
)

// MaxPacket bounds a packet read: commands and acks are a few hundred bytes; anything
// near this is garbage, and the connection is dropped rather than a buffer grown for it.
const MaxPacket = 1 << 20

var (
	// ErrMalformed is returned for a packet that breaks the format: a length over four
	// bytes, a field running past the packet's end, QoS 3.
	ErrMalformed = errors.New("mqttwire: malformed packet")
	// ErrTooLarge is returned by ReadPacket for a packet announcing more than MaxPacket bytes.
	ErrTooLarge = fmt.Errorf("mqttwire: packet over %d bytes", MaxPacket)
)

// appendVBI appends n as a variable byte integer [MQTT 1.5.5].
func appendVBI(dst []byte, n int) []byte {
	for {
		b := byte(n & 0x7f)
		n >>= 7
		if n > 0 {
			b |= 0x80
		}
		dst = append(dst, b)
		if n == 0 {
			return dst
		}
	}
}

// appendString appends a UTF-8 string or binary data with its two-byte length [MQTT 1.5.4].
func appendString(dst []byte, s string) []byte {
	return append(append(dst, byte(len(s)>>8), byte(len(s))), s...)
}

// appendHeader appends a fixed header for a packet whose remaining part is body bytes.
func appendHeader(dst []byte, first byte, body int) []byte {
	return appendVBI(append(dst, first), body)
}

// AppendConnect appends a CONNECT as paho writes it for a client without credentials or
// will: protocol MQTT 5, no properties when sessionExpiry is 0, and otherwise the two
// paho writes for paho.ConnectProperties{SessionExpiryInterval: &sessionExpiry}: Request
// Problem Information 0 (paho's zero value) and the Session Expiry Interval [MQTT 3.1].
func AppendConnect(dst []byte, clientID string, cleanStart bool, keepAlive uint16, sessionExpiry uint32) []byte {
	return AppendConnectAuth(dst, clientID, "", nil, cleanStart, keepAlive, sessionExpiry)
}

// AppendConnectAuth appends a CONNECT like AppendConnect, with a User Name when username
// is not empty and a Password when password is not nil [MQTT 3.1.2.8, 3.1.2.9, 3.1.3.5,
// 3.1.3.6]: the bytes paho writes for Username/UsernameFlag and Password/PasswordFlag.
func AppendConnectAuth(dst []byte, clientID, username string, password []byte, cleanStart bool, keepAlive uint16, sessionExpiry uint32) []byte {
	var flags byte
	if cleanStart {
		flags = 0x02
	}
	props := 0
	if sessionExpiry != 0 {
		props = 2 + 5
	}
	body := 2 + 4 + 1 + 1 + 2 + 1 + props + 2 + len(clientID)
	if username != "" {
		flags |= 0x80
		body += 2 + len(username)
	}
	if password != nil {
		flags |= 0x40
		body += 2 + len(password)
	}
	dst = appendHeader(dst, TypeConnect<<4, body)
	dst = appendString(dst, "MQTT")
	dst = append(dst, 5, flags, byte(keepAlive>>8), byte(keepAlive), byte(props))
	if sessionExpiry != 0 {
		e := sessionExpiry
		dst = append(dst, 0x17, 0, // [MQTT 3.1.2.11.7]
			0x11, byte(e>>24), byte(e>>16), byte(e>>8), byte(e)) // [MQTT 3.1.2.11.2]
	}
	dst = appendString(dst, clientID)
	if username != "" {
		dst = appendString(dst, username)
	}
	if password != nil {
		dst = append(append(dst, byte(len(password)>>8), byte(len(password))), password...)
	}
	return dst
}

// AppendSubscribe appends a SUBSCRIBE of the filters, each at QoS 1 with no other
// option [MQTT 3.8].
func AppendSubscribe(dst []byte, id uint16, filters ...string) []byte {
	body := 2 + 1
	for _, f := range filters {
		body += 2 + len(f) + 1
	}
	dst = appendHeader(dst, TypeSubscribe<<4|0x02, body)
	dst = append(dst, byte(id>>8), byte(id), 0)
	for _, f := range filters {
		dst = append(appendString(dst, f), 1)
	}
	return dst
}

// AppendPublish appends a PUBLISH without properties; id is used only when qos > 0
// [MQTT 3.3].
func AppendPublish(dst []byte, topic string, qos byte, id uint16, payload []byte) []byte {
	body := 2 + len(topic) + 1 + len(payload)
	if qos > 0 {
		body += 2
	}
	dst = appendHeader(dst, TypePublish<<4|qos<<1, body)
	dst = appendString(dst, topic)
	if qos > 0 {
		dst = append(dst, byte(id>>8), byte(id))
	}
	return append(append(dst, 0), payload...)
}

// AppendPuback appends a PUBACK with reason code 0 and no properties, the long form paho
// writes [MQTT 3.4].
func AppendPuback(dst []byte, id uint16) []byte {
	return append(dst, TypePuback<<4, 4, byte(id>>8), byte(id), 0, 0)
}

// AppendPingreq appends a PINGREQ [MQTT 3.12].
func AppendPingreq(dst []byte) []byte { return append(dst, TypePingreq<<4, 0) }

// AppendDisconnect appends a DISCONNECT with reason 0 (normal) and no properties, as
// paho writes it [MQTT 3.14].
func AppendDisconnect(dst []byte) []byte { return append(dst, TypeDisconnect<<4, 2, 0, 0) }

// ReadPacket reads one packet into buf (replaced by a larger one when too small: grown is
// the buffer to pass next time) and returns its first byte and its remaining part, which
// aliases grown. A length over four bytes or over MaxPacket is an error, and the stream
// is then out of step: drop the connection.
func ReadPacket(r *bufio.Reader, buf []byte) (first byte, body, grown []byte, err error) {
	if first, err = r.ReadByte(); err != nil {
		return 0, nil, buf, err
	}
	n := 0
	for i := 0; ; i++ {
		b, err := r.ReadByte()
		if err != nil {
			return 0, nil, buf, err
		}
		n |= int(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			break
		}
		if i == 3 {
			return 0, nil, buf, ErrMalformed // [MQTT 1.5.5]: at most four bytes
		}
	}
	if n > MaxPacket {
		return 0, nil, buf, ErrTooLarge
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	body = buf[:n]
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, buf, err
	}
	return first, body, buf, nil
}

// Publish is a PUBLISH read; Topic, Props and Payload alias the packet's remaining part.
type Publish struct {
	QoS     byte
	Dup     bool
	ID      uint16 // when QoS > 0
	Topic   []byte
	Props   []byte // the property block, for ParseProperties
	Payload []byte
}

// ParsePublish splits a PUBLISH's remaining part [MQTT 3.3.2, 3.3.3].
func ParsePublish(first byte, body []byte) (Publish, error) {
	p := Publish{QoS: first >> 1 & 3, Dup: first&0x08 != 0}
	if p.QoS == 3 || len(body) < 2 {
		return p, ErrMalformed
	}
	n := int(body[0])<<8 | int(body[1])
	if len(body) < 2+n {
		return p, ErrMalformed
	}
	p.Topic, body = body[2:2+n], body[2+n:]
	if p.QoS > 0 {
		if len(body) < 2 {
			return p, ErrMalformed
		}
		p.ID, body = uint16(body[0])<<8|uint16(body[1]), body[2:]
	}
	props, payload, err := splitProperties(body)
	if err != nil {
		return p, err
	}
	p.Props, p.Payload = props, payload
	return p, nil
}

// splitProperties splits a property block (its VBI length and the properties) from what
// follows [MQTT 2.2.2].
func splitProperties(b []byte) (props, rest []byte, err error) {
	n := 0
	for i := 0; ; i++ {
		if i == len(b) || i == 4 {
			return nil, nil, ErrMalformed
		}
		n |= int(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			b = b[i+1:]
			break
		}
	}
	if n > len(b) {
		return nil, nil, ErrMalformed
	}
	return b[:n], b[n:], nil
}

// ParseAck reads a PUBACK's or SUBACK's packet id and first reason code (0 when a PUBACK
// leaves it out) [MQTT 3.4.2, 3.9.2, 3.9.3].
func ParseAck(typ byte, body []byte) (id uint16, code byte, err error) {
	if len(body) < 2 {
		return 0, 0, ErrMalformed
	}
	id = uint16(body[0])<<8 | uint16(body[1])
	rest := body[2:]
	switch typ {
	case TypePuback:
		if len(rest) > 0 {
			code = rest[0]
		}
	case TypeSuback:
		_, codes, err := splitProperties(rest)
		if err != nil || len(codes) == 0 {
			return 0, 0, ErrMalformed
		}
		code = codes[0]
	}
	return id, code, nil
}

// ParseConnack returns a CONNACK's reason code [MQTT 3.2.2].
func ParseConnack(body []byte) (byte, error) {
	if len(body) < 2 {
		return 0, ErrMalformed
	}
	return body[1], nil
}
