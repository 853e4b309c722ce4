// Package jsonplain scans the plain subset of JSON the agent's own messages are written in,
// so that they can be read without encoding/json's reflection: objects, white space where
// JSON allows it, strings in valid UTF-8 with no escape and no control character, and
// integers without fraction, exponent or leading zero.
//
// A Scanner never decides what an input means. Each method reports whether the next
// token is in the plain subset; a parser built on it gives up (ok false) on anything else
// and leaves that input to encoding/json, which then gives its usual answer. The parsers
// (device/face's terminal protocol, agent/wire's results) are fuzzed against
// encoding/json on arbitrary bytes.
//
// Tutorial:
//
//	p := jsonplain.NewScanner(b, 1024)
//	p.Space()
//	if !p.Byte('{') { return false }
//	key, ok := p.Key()         // a member name and its colon
//	var s string
//	ok = ok && p.Str(&s)       // a plain string
//	...
//	return p.End()             // only white space left
//
// Caveats: Key's name aliases the input. Str's strings share one copy of the whole input
// when it is at most shareUpTo bytes (one allocation a message instead of one a field); a
// larger input gets a copy per string, so that padding cannot keep a big buffer alive.
package jsonplain

import (
	"math"
	"unicode/utf8"
)

// Scanner reads plain JSON tokens from the front of its input.
type Scanner struct {
	b      []byte
	i      int
	shared string // string(b) when len(b) <= shareUpTo, else ""
}

// NewScanner scans b; strings share one copy of b when len(b) <= shareUpTo.
func NewScanner(b []byte, shareUpTo int) Scanner {
	p := Scanner{b: b}
	if len(b) > 0 && len(b) <= shareUpTo {
		p.shared = string(b)
	}
	return p
}

// Space skips white space.
func (p *Scanner) Space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// Byte consumes c if it comes next.
func (p *Scanner) Byte(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// End reports whether only white space is left.
func (p *Scanner) End() bool {
	p.Space()
	return p.i == len(p.b)
}

// Key reads a member name (a plain string) and its colon, with the white space around
// the colon; the name aliases the input.
func (p *Scanner) Key() ([]byte, bool) {
	start, end, ok := p.raw()
	if !ok {
		return nil, false
	}
	p.Space()
	if !p.Byte(':') {
		return nil, false
	}
	p.Space()
	return p.b[start:end], true
}

// Str reads a plain string into *dst.
func (p *Scanner) Str(dst *string) bool {
	start, end, ok := p.raw()
	if !ok {
		return false
	}
	switch {
	case start == end:
		*dst = ""
	case p.shared != "":
		*dst = p.shared[start:end]
	default:
		*dst = string(p.b[start:end])
	}
	return true
}

// RawStr reads a plain string and returns its contents, aliasing the input: for a value
// the caller decodes further (base64, say) without a copy of the text.
func (p *Scanner) RawStr() ([]byte, bool) {
	start, end, ok := p.raw()
	if !ok {
		return nil, false
	}
	return p.b[start:end], true
}

// raw finds a plain string's contents, b[start:end].
func (p *Scanner) raw() (start, end int, ok bool) {
	if !p.Byte('"') {
		return 0, 0, false
	}
	start = p.i
	ascii := true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			end = p.i
			p.i++
			// encoding/json replaces invalid UTF-8 with U+FFFD: not plain.
			return start, end, ascii || utf8.Valid(p.b[start:end])
		case c == '\\' || c < 0x20:
			return 0, 0, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		p.i++
	}
	return 0, 0, false
}

// Object reads an object whose members member consumes one at a time (the key is given,
// the scanner stands at the value); member returns false for a key it does not know, or
// a value it cannot read.
func (p *Scanner) Object(member func(key []byte) bool) bool {
	p.Space()
	if !p.Byte('{') {
		return false
	}
	p.Space()
	if p.Byte('}') {
		return true
	}
	for {
		key, ok := p.Key()
		if !ok || !member(key) {
			return false
		}
		p.Space()
		if p.Byte('}') {
			return true
		}
		if !p.Byte(',') {
			return false
		}
		p.Space()
	}
}

// Int64 reads an integer in JSON's plain form that fits an int64.
func (p *Scanner) Int64() (int64, bool) {
	neg := p.Byte('-')
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
		return -int64(n), true // n = 1<<63 wraps to MinInt64, whose negation is MinInt64
	case !neg && n <= math.MaxInt64:
		return int64(n), true
	}
	return 0, false
}

// Int reads an integer in JSON's plain form that fits an int into *dst (32 bits on 32-bit
// ARM: encoding/json refuses what overflows the field).
func (p *Scanner) Int(dst *int) bool {
	n, ok := p.Int64()
	if !ok || n < math.MinInt || n > math.MaxInt {
		return false
	}
	*dst = int(n)
	return true
}
