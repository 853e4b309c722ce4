package sim

import (
	"bytes"
	"strconv"
	"unicode/utf8"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// parseCommand decodes a command received over MQTT, as face.ParseCommandJSON does. The
// agent's link writes commands with json.Marshal, whose output has one shape; a command in
// that shape whose strings need no unescaping is read without reflection (encoding/json
// took about 3 % of the CPU of an agent throughput benchmark, in 64 terminals). Anything
// else goes to face.ParseCommandJSON. FuzzParseCommand checks that both agree.
func parseCommand(b []byte) (face.Command, error) {
	c, ok := parsePlainCommand(b)
	if !ok {
		return face.ParseCommandJSON(b)
	}
	if err := c.Validate(); err != nil {
		return face.Command{}, err
	}
	return c, nil
}

// parsePlainCommand reads exactly
//
//	{"messageId":S,"op":S,"person":{"id":S[,"name":S][,"validFrom":S][,"validTo":S]}}
//
// where each S is a JSON string without escapes or control characters, in valid UTF-8: the
// bytes between its quotes are then its value, as encoding/json would decode it. ok is
// false for anything else (other spacing, order or fields, escapes), which the caller
// leaves to encoding/json.
func parsePlainCommand(b []byte) (c face.Command, ok bool) {
	if !utf8.Valid(b) { // encoding/json would replace what is invalid
		return c, false
	}
	p := plainJSON{b: b}
	var op string
	ok = p.lit(`{"messageId":`) && p.str(&c.MessageID) &&
		p.lit(`,"op":`) && p.str(&op) &&
		p.lit(`,"person":{"id":`) && p.str(&c.Person.ID) &&
		p.opt(`,"name":`, &c.Person.Name) &&
		p.opt(`,"validFrom":`, &c.Person.ValidFrom) &&
		p.opt(`,"validTo":`, &c.Person.ValidTo) &&
		p.lit(`}}`) && len(p.b) == 0
	if !ok {
		return face.Command{}, false
	}
	c.Op = face.Op(op)
	return c, true
}

// plainJSON consumes b from the front.
type plainJSON struct{ b []byte }

// lit consumes s if b starts with it.
func (p *plainJSON) lit(s string) bool {
	if len(p.b) < len(s) || string(p.b[:len(s)]) != s {
		return false
	}
	p.b = p.b[len(s):]
	return true
}

// str consumes a string without escapes or control characters into *dst.
func (p *plainJSON) str(dst *string) bool {
	if len(p.b) == 0 || p.b[0] != '"' {
		return false
	}
	end := bytes.IndexByte(p.b[1:], '"')
	if end < 0 {
		return false
	}
	s := p.b[1 : 1+end]
	for _, ch := range s {
		if ch == '\\' || ch < 0x20 {
			return false
		}
	}
	*dst = string(s)
	p.b = p.b[end+2:]
	return true
}

// opt consumes key and a string if b starts with key; true also when it does not.
func (p *plainJSON) opt(key string, dst *string) bool {
	if !p.lit(key) {
		return true
	}
	return p.str(dst)
}

// appendAck appends a as JSON, as a.AppendJSON does (json.Marshal's bytes) when its
// strings are plain (no character that encoding/json escapes): the terminals' acks carry
// the agent's message ids and a fixed refusal text. Anything else goes to a.AppendJSON.
// TestAppendAckSameAsMarshal checks both write the same bytes.
func appendAck(dst []byte, a *face.Ack) ([]byte, error) {
	if !plainJSONString(a.MessageID) || !plainJSONString(a.Message) {
		return a.AppendJSON(dst)
	}
	if err := a.Validate(); err != nil {
		return dst, err
	}
	dst = append(dst, `{"messageId":"`...)
	dst = append(dst, a.MessageID...)
	dst = append(dst, `","code":`...)
	dst = strconv.AppendInt(dst, int64(a.Code), 10)
	dst = append(dst, `,"message":"`...)
	dst = append(dst, a.Message...)
	return append(dst, `"}`...), nil
}

// plainJSONString reports whether json.Marshal writes s as it is between quotes: ASCII
// from space to '~' but for '"', '\\' and the HTML characters '<', '>', '&'.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch < 0x20 || ch > 0x7e, ch == '"', ch == '\\', ch == '<', ch == '>', ch == '&':
			return false
		}
	}
	return true
}
