package faces

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// Sum is a face's SHA-256: its name in the store and on the wire (String, 64 lower-case
// hex digits).
type Sum [sha256.Size]byte

// ErrBadSum is returned by ParseSum for anything but 64 lower-case hex digits.
var ErrBadSum = errors.New("faces: a face's sha256 must be 64 lower-case hex digits")

// ParseSum parses a face's SHA-256 in its wire form.
func ParseSum(s string) (Sum, error) {
	var sum Sum
	if len(s) != 2*len(sum) {
		return sum, ErrBadSum
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return sum, ErrBadSum
		}
	}
	_, _ = hex.Decode(sum[:], []byte(s))
	return sum, nil
}

// String is the wire form: 64 lower-case hex digits.
func (s Sum) String() string { return hex.EncodeToString(s[:]) }

// short is the first 16 hex digits, for log lines and error texts.
func (s Sum) short() string { return hex.EncodeToString(s[:8]) }
