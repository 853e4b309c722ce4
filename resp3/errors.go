package resp3

import (
	"errors"
	"strconv"
)

// Every error the reader returns is one of three things:
//
//   - ErrIncomplete (or ErrLengthPastBuffer, which matches ErrIncomplete): the bytes so far are
//     a valid prefix and more bytes are needed. Every proper prefix of a valid message yields
//     this, never a malformed error. A caller that holds a whole message (an MQTT payload) must
//     treat it as "truncated".
//   - a *SyntaxError wrapping one of the sentinels below: the input can never become valid.
//     errors.Is(err, ErrMalformed) is true for all of them; errors.Is with the sentinel tells
//     which rule was broken; errors.As gives the byte offset.
//
// The sentinels are returned wrapped, so compare with errors.Is, not ==.
var (
	// ErrIncomplete is returned when the input ends before the value does. It is returned
	// bare (not wrapped), so reading byte by byte costs no allocation.
	ErrIncomplete error = incompleteError{}

	// ErrLengthPastBuffer is returned when a blob's declared length (plus its CRLF) runs past
	// the end of the input. It matches ErrIncomplete: for a stream it means "read more"; for a
	// whole message it means the declared length is a lie.
	ErrLengthPastBuffer error = lengthPastBufferError{}

	// ErrMalformed matches (errors.Is) every error below: the input is not RESP3, whatever
	// follows it.
	ErrMalformed = errors.New("resp3: malformed input")

	// ErrUnknownType is returned when a value starts with a byte that is not a RESP3 type.
	// Streamed strings and aggregates ("$?", ";", ".") are not supported and land here or in
	// ErrInvalidLength.
	ErrUnknownType = malformed("unknown type byte")
	// ErrMissingCRLF is returned when a line or a blob is not terminated by "\r\n", or a bare
	// "\r" or "\n" appears inside a line.
	ErrMissingCRLF = malformed("missing CRLF")
	// ErrInvalidLength is returned when a length or count is not a decimal number: empty,
	// non-digits, a '+' sign, or leading zeros ("$04").
	ErrInvalidLength = malformed("invalid length")
	// ErrNegativeLength is returned for a negative length or count other than the RESP2 nulls
	// "$-1" and "*-1" (and for "-1" on any other aggregate or blob kind).
	ErrNegativeLength = malformed("negative length")
	// ErrOverflow is returned when an integer does not fit in int64 or a length does not fit
	// in int.
	ErrOverflow = malformed("integer overflow")
	// ErrTooLarge is returned when a blob's declared length exceeds MaxBlobLen.
	ErrTooLarge = malformed("blob longer than MaxBlobLen")
	// ErrTooManyElements is returned when an aggregate declares more than MaxElements
	// elements, or a command more arguments than the caller's slice can hold.
	ErrTooManyElements = malformed("too many elements")
	// ErrTooDeep is returned by Skip and ReadTree when aggregates nest deeper than MaxDepth.
	ErrTooDeep = malformed("nesting deeper than MaxDepth")
	// ErrInvalidInteger is returned for an Integer that is not [+-]digits.
	ErrInvalidInteger = malformed("invalid integer")
	// ErrInvalidBoolean is returned for a Boolean other than "#t" or "#f".
	ErrInvalidBoolean = malformed("invalid boolean")
	// ErrInvalidNull is returned for a Null with content ("_x").
	ErrInvalidNull = malformed("invalid null")
	// ErrInvalidDouble is returned for a Double that is not a decimal floating-point number,
	// "inf", "-inf" or "nan".
	ErrInvalidDouble = malformed("invalid double")
	// ErrInvalidBigNumber is returned for a BigNumber that is not [-]digits.
	ErrInvalidBigNumber = malformed("invalid big number")
	// ErrInvalidVerbatim is returned for a verbatim string without its "xxx:" format prefix.
	ErrInvalidVerbatim = malformed("invalid verbatim string")
	// ErrNotCommand is returned by ParseCommand and ReadCommand when the input is not a
	// non-empty array of non-null blob strings.
	ErrNotCommand = malformed("not a command (array of blob strings)")
	// ErrTrailingBytes is returned by ParseCommand, ParseValue and ParseTree when bytes follow
	// the value.
	ErrTrailingBytes = malformed("trailing bytes after the value")
)

// SyntaxError reports a malformed input and where the reader found the problem. Err is one
// of the sentinels above; Unwrap makes errors.Is work.
type SyntaxError struct {
	Offset int   // byte offset into the input passed to the function that failed
	Err    error // the rule broken (ErrMissingCRLF, ErrOverflow, …)
}

func (e *SyntaxError) Error() string {
	return e.Err.Error() + " at offset " + strconv.Itoa(e.Offset)
}

func (e *SyntaxError) Unwrap() error { return e.Err }

// errAt builds the error for a malformed input. Kept out of line so the hot paths stay small;
// it allocates, but only on the error path.
//
//go:noinline
func errAt(off int, err error) error {
	return &SyntaxError{Offset: off, Err: err}
}

type malformedError struct{ msg string }

func malformed(msg string) error { return &malformedError{msg} }

func (e *malformedError) Error() string        { return "resp3: " + e.msg }
func (e *malformedError) Is(target error) bool { return target == ErrMalformed }

type incompleteError struct{}

func (incompleteError) Error() string { return "resp3: incomplete value, more bytes needed" }

type lengthPastBufferError struct{}

func (lengthPastBufferError) Error() string {
	return "resp3: declared length runs past the end of the input"
}
func (lengthPastBufferError) Is(target error) bool { return target == ErrIncomplete }

// IsMalformed reports whether err says the input can never become valid RESP3 (as opposed to
// ErrIncomplete, "more bytes needed").
func IsMalformed(err error) bool { return errors.Is(err, ErrMalformed) }
