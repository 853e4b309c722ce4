package intake

import (
	"math"
	"unicode/utf8"
)

// parseResultPlain decodes a result message written the way the agent writes it: one
// object whose members are the Result fields by their exact names, strings without
// escapes or control characters, integers without fraction or exponent. It gives up
// (ok false) on anything else — another spelling of a key, an unknown member, an escape,
// null, a number that is not a plain integer, malformed JSON — and ParseResult then
// decodes with encoding/json, which handles all of it; where it succeeds it gives what
// encoding/json gives (FuzzParseResultPlain). A back office reads one result per task:
// this keeps it from spending more on reflection than the agent spent writing it.
func parseResultPlain(b []byte) (r Result, ok bool) {
	p := plainScanner{b: b}
	p.space()
	if !p.byte('{') {
		return r, false
	}
	p.space()
	if p.byte('}') {
		return r, p.end()
	}
	for {
		key, ok := p.raw()
		if !ok {
			return r, false
		}
		p.space()
		if !p.byte(':') {
			return r, false
		}
		p.space()
		switch string(key) { // compared without a copy
		case "taskId":
			r.TaskID, ok = p.str()
		case "deviceId":
			r.DeviceID, ok = p.str()
		case "messageId":
			r.MessageID, ok = p.str()
		case "status":
			var s string
			s, ok = p.str()
			r.Status = Status(s)
		case "error":
			r.Error, ok = p.str()
		case "tries":
			var n int64
			n, ok = p.int()
			r.Tries = int(n)
			ok = ok && int64(r.Tries) == n // encoding/json refuses what overflows int (32-bit ARM)
		case "durationMs":
			r.DurationMs, ok = p.int()
		default:
			return r, false
		}
		if !ok {
			return r, false
		}
		p.space()
		if p.byte('}') {
			return r, p.end()
		}
		if !p.byte(',') {
			return r, false
		}
		p.space()
	}
}

// plainScanner reads the plain JSON subset parseResultPlain accepts.
type plainScanner struct {
	b []byte
	i int
}

func (p *plainScanner) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *plainScanner) byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (p *plainScanner) end() bool {
	p.space()
	return p.i == len(p.b)
}

// str reads a string with no escapes, no control characters and valid UTF-8.
func (p *plainScanner) str() (string, bool) {
	s, ok := p.raw()
	return string(s), ok
}

// raw is str's bytes, aliasing the input.
func (p *plainScanner) raw() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// int reads an integer in JSON's form (no leading zeros) that fits an int64.
func (p *plainScanner) int() (int64, bool) {
	neg := p.byte('-')
	digits := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		if n > (math.MaxUint64-9)/10 {
			return 0, false // far beyond int64: left to encoding/json's error
		}
		n = n*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	switch {
	case p.i == digits:
		return 0, false
	case p.b[digits] == '0' && p.i-digits > 1:
		return 0, false
	case p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E'):
		return 0, false
	case neg && n <= 1<<63:
		return -int64(n), true
	case !neg && n <= math.MaxInt64:
		return int64(n), true
	}
	return 0, false
}
