package hlc

import (
	"bytes"
	"math"
	"strings"
	"unsafe"
)

// Timestamp is one hybrid logical clock value, "{wall}:{counter}:{node}" on the wire.
// The zero value is "no timestamp" (IsZero).
type Timestamp struct {
	Wall    int64  // milliseconds since the Unix epoch; Parse accepts 0 … math.MaxInt64
	Counter uint32 // logical counter within one Wall millisecond; Parse accepts 0 … math.MaxUint32
	Node    string // node id: not empty, never contains ':'
}

// Parse reads the text form of a timestamp: the padded form the SDKs write
// ("001696374425000:00001:StateStore", fmt "%015d:%05d:%s") or the unpadded form of the
// protocol document ("1696374425000:1:StateStore"). Any number of leading zeros is accepted.
//
// Errors are *ParseError wrapping ErrSegmentCount, ErrNotNumber, ErrNegative, ErrOverflow,
// ErrEmptyNode or ErrNodeColon. The node id may be any bytes except ':'.
//
// Parse does not keep b. The returned Node is interned (see the package Caveats): Parse does not
// allocate for a node id it has seen recently, and is safe for concurrent use.
func Parse(b []byte) (Timestamp, error) {
	i := bytes.IndexByte(b, ':')
	if i < 0 {
		return Timestamp{}, parseError(b, SegmentNone, ErrSegmentCount)
	}
	j := bytes.IndexByte(b[i+1:], ':')
	if j < 0 {
		return Timestamp{}, parseError(b, SegmentNone, ErrSegmentCount)
	}
	j += i + 1
	node := b[j+1:]
	if len(node) == 0 {
		return Timestamp{}, parseError(b, SegmentNode, ErrEmptyNode)
	}
	if bytes.IndexByte(node, ':') >= 0 {
		return Timestamp{}, parseError(b, SegmentNode, ErrNodeColon)
	}
	wall, err := parseDecimal(b[:i], math.MaxInt64)
	if err != nil {
		return Timestamp{}, parseError(b, SegmentWall, err)
	}
	counter, err := parseDecimal(b[i+1:j], math.MaxUint32)
	if err != nil {
		return Timestamp{}, parseError(b, SegmentCounter, err)
	}
	return Timestamp{Wall: int64(wall), Counter: uint32(counter), Node: internNode(node)}, nil
}

// ParseString is Parse for a string (an MQTT user property value); it does not allocate either.
func ParseString(s string) (Timestamp, error) {
	// Parse never keeps or writes b, so viewing s's bytes is safe.
	return Parse(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// parseDecimal parses ASCII digits into a value <= limit. It is stricter than strconv: no sign,
// no underscores, no empty input. Any number of leading zeros is fine.
func parseDecimal(b []byte, limit uint64) (uint64, error) {
	if len(b) == 0 {
		return 0, ErrNotNumber
	}
	if b[0] == '-' {
		return 0, ErrNegative
	}
	i := 0
	for i < len(b)-1 && b[i] == '0' {
		i++
	}
	// Up to 19 significant digits cannot overflow a uint64 (10¹⁹-1 < 2⁶⁴), so the loop needs no
	// per-digit range check; one comparison with limit at the end does.
	const maxDigits = 19
	var v uint64
	for _, c := range b[i:min(len(b), i+maxDigits)] {
		d := uint64(c) - '0'
		if d > 9 {
			return 0, ErrNotNumber
		}
		v = v*10 + d
	}
	if len(b)-i > maxDigits {
		for _, c := range b[i+maxDigits:] {
			if c < '0' || c > '9' {
				return 0, ErrNotNumber
			}
		}
		return 0, ErrOverflow
	}
	if v > limit {
		return 0, ErrOverflow
	}
	return v, nil
}

// AppendText appends the padded text form, exactly fmt.Sprintf("%015d:%05d:%s", t.Wall,
// t.Counter, t.Node), to dst and returns the extended slice. It does not allocate when dst has
// room (31 bytes plus the node id for walls before the year 33658). A negative Wall is written
// as fmt would; Parse refuses it.
func (t Timestamp) AppendText(dst []byte) []byte {
	dst = appendPadded(dst, t.Wall, 15)
	dst = append(dst, ':')
	dst = appendPadded(dst, int64(t.Counter), 5)
	dst = append(dst, ':')
	return append(dst, t.Node...)
}

// appendPadded is strconv.AppendInt zero-padded to width, like fmt's %0{width}d (the sign counts
// towards the width).
func appendPadded(dst []byte, v int64, width int) []byte {
	u := uint64(v)
	if v < 0 {
		dst = append(dst, '-')
		width--
		u = -u // two's complement: right for math.MinInt64 too
	}
	var buf [20]byte
	i := len(buf)
	for u >= 10 {
		i--
		buf[i] = byte('0' + u%10)
		u /= 10
	}
	i--
	buf[i] = byte('0' + u)
	for i > len(buf)-width { // width <= 15 here
		i--
		buf[i] = '0'
	}
	return append(dst, buf[i:]...)
}

// String returns the padded text form.
func (t Timestamp) String() string {
	var buf [64]byte
	return string(t.AppendText(buf[:0]))
}

// MarshalText implements encoding.TextMarshaler with the padded form.
func (t Timestamp) MarshalText() ([]byte, error) {
	return t.AppendText(make([]byte, 0, 32+len(t.Node))), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with Parse.
func (t *Timestamp) UnmarshalText(b []byte) error {
	v, err := Parse(b)
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// IsZero reports whether t is the zero Timestamp, which stands for "no timestamp".
func (t Timestamp) IsZero() bool { return t == Timestamp{} }

// Compare orders timestamps totally: by Wall, then Counter, then Node (byte-wise). It returns
// -1, 0 or +1. Two timestamps compare equal only when all three parts are equal.
func Compare(a, b Timestamp) int {
	switch {
	case a.Wall < b.Wall:
		return -1
	case a.Wall > b.Wall:
		return 1
	case a.Counter < b.Counter:
		return -1
	case a.Counter > b.Counter:
		return 1
	}
	return strings.Compare(a.Node, b.Node)
}

// After reports whether t is later than u in the order of Compare.
func (t Timestamp) After(u Timestamp) bool { return Compare(t, u) > 0 }

// Before reports whether t is earlier than u in the order of Compare.
func (t Timestamp) Before(u Timestamp) bool { return Compare(t, u) < 0 }
