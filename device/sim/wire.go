package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// The MQTT 5 packets a simulated terminal sends and reads (OASIS MQTT 5.0, section 3),
// written here rather than through paho: a terminal in a benchmark stands for a device on
// another machine, and paho's per-packet cost (a goroutine hand-off per message, a session
// store, a growing bytes.Buffer per packet read, a context per publish) was a third of the
// test machine's CPU in the 64-terminal benchmark. The bytes are the ones paho's packets
// package writes for the same packets (wire_test.go compares them); the connection's
// behaviour (keepalive, reconnect, clean start) is autopaho's, see mqtt.go.

// Packet types, the high nibble of the first byte [MQTT 2.1.2].
const (
	typeConnect    = 1
	typeConnack    = 2
	typePublish    = 3
	typePuback     = 4
	typeSubscribe  = 8
	typeSuback     = 9
	typePingreq    = 12
	typePingresp   = 13
	typeDisconnect = 14
)

// maxPacket bounds a packet read: commands and acks are a few hundred bytes; anything
// near this is garbage, and the connection is dropped rather than a buffer grown for it.
const maxPacket = 1 << 20

var (
	errMalformed = errors.New("sim: malformed MQTT packet")
	errTooLarge  = fmt.Errorf("sim: MQTT packet over %d bytes", maxPacket)
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

// appendConnect appends a CONNECT as autopaho builds it for a terminal: protocol MQTT 5,
// no credentials, no will, no properties [MQTT 3.1].
func appendConnect(dst []byte, clientID string, cleanStart bool, keepAlive uint16) []byte {
	var flags byte
	if cleanStart {
		flags = 0x02
	}
	body := 2 + 4 + 1 + 1 + 2 + 1 + 2 + len(clientID)
	dst = appendHeader(dst, typeConnect<<4, body)
	dst = appendString(dst, "MQTT")
	dst = append(dst, 5, flags, byte(keepAlive>>8), byte(keepAlive), 0)
	return appendString(dst, clientID)
}

// appendSubscribe appends a SUBSCRIBE of one topic filter at QoS 1, no other option
// [MQTT 3.8].
func appendSubscribe(dst []byte, id uint16, filter string) []byte {
	dst = appendHeader(dst, typeSubscribe<<4|0x02, 2+1+2+len(filter)+1)
	dst = append(dst, byte(id>>8), byte(id), 0)
	return append(appendString(dst, filter), 1)
}

// appendPublish appends a PUBLISH without properties; id is used only when qos > 0
// [MQTT 3.3].
func appendPublish(dst []byte, topic string, qos byte, id uint16, payload []byte) []byte {
	body := 2 + len(topic) + 1 + len(payload)
	if qos > 0 {
		body += 2
	}
	dst = appendHeader(dst, typePublish<<4|qos<<1, body)
	dst = appendString(dst, topic)
	if qos > 0 {
		dst = append(dst, byte(id>>8), byte(id))
	}
	return append(append(dst, 0), payload...)
}

// appendPuback appends a PUBACK with reason code 0 and no properties, the long form paho
// writes [MQTT 3.4].
func appendPuback(dst []byte, id uint16) []byte {
	return append(dst, typePuback<<4, 4, byte(id>>8), byte(id), 0, 0)
}

// appendPingreq appends a PINGREQ [MQTT 3.12].
func appendPingreq(dst []byte) []byte { return append(dst, typePingreq<<4, 0) }

// appendDisconnect appends a DISCONNECT with reason 0 (normal) and no properties, as
// paho writes it [MQTT 3.14].
func appendDisconnect(dst []byte) []byte { return append(dst, typeDisconnect<<4, 2, 0, 0) }

// readPacket reads one packet into buf (grown when too small) and returns its first byte
// and its remaining part, which aliases buf and is valid until the next call. A packet
// over maxPacket or a malformed length is an error; the connection is then dropped.
func readPacket(r *bufio.Reader, buf []byte) (first byte, body, grown []byte, err error) {
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
			return 0, nil, buf, errMalformed // [MQTT 1.5.5]: at most four bytes
		}
	}
	if n > maxPacket {
		return 0, nil, buf, errTooLarge
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

// publish is a PUBLISH read; topic and payload alias the packet's body.
type publish struct {
	qos     byte
	id      uint16
	topic   []byte
	payload []byte
}

// parsePublish splits a PUBLISH's remaining part [MQTT 3.3.2, 3.3.3].
func parsePublish(first byte, body []byte) (publish, error) {
	p := publish{qos: first >> 1 & 3}
	if p.qos == 3 || len(body) < 2 {
		return p, errMalformed
	}
	n := int(body[0])<<8 | int(body[1])
	if len(body) < 2+n {
		return p, errMalformed
	}
	p.topic, body = body[2:2+n], body[2+n:]
	if p.qos > 0 {
		if len(body) < 2 {
			return p, errMalformed
		}
		p.id, body = uint16(body[0])<<8|uint16(body[1]), body[2:]
	}
	_, payload, err := splitProperties(body)
	if err != nil {
		return p, err
	}
	p.payload = payload
	return p, nil
}

// splitProperties splits a property block (its VBI length and the properties) from what
// follows [MQTT 2.2.2].
func splitProperties(b []byte) (props, rest []byte, err error) {
	n := 0
	for i := 0; ; i++ {
		if i == len(b) || i == 4 {
			return nil, nil, errMalformed
		}
		n |= int(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			b = b[i+1:]
			break
		}
	}
	if n > len(b) {
		return nil, nil, errMalformed
	}
	return b[:n], b[n:], nil
}

// parseAck reads a PUBACK's or SUBACK's packet id and first reason code (0 when a PUBACK
// leaves it out) [MQTT 3.4.2, 3.9.2, 3.9.3].
func parseAck(typ byte, body []byte) (id uint16, code byte, err error) {
	if len(body) < 2 {
		return 0, 0, errMalformed
	}
	id = uint16(body[0])<<8 | uint16(body[1])
	rest := body[2:]
	switch typ {
	case typePuback:
		if len(rest) > 0 {
			code = rest[0]
		}
	case typeSuback:
		_, codes, err := splitProperties(rest)
		if err != nil || len(codes) == 0 {
			return 0, 0, errMalformed
		}
		code = codes[0]
	}
	return id, code, nil
}

// parseConnack returns a CONNACK's reason code [MQTT 3.2.2].
func parseConnack(body []byte) (byte, error) {
	if len(body) < 2 {
		return 0, errMalformed
	}
	return body[1], nil
}
