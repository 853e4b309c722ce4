package hlc

import (
	"errors"
	"strconv"
)

// Every error Parse returns is a *ParseError wrapping exactly one of the Err… sentinels below,
// so callers test with errors.Is and never match message text.
var (
	// ErrSegmentCount is returned by Parse when the text has fewer than three ':'-separated
	// segments ("1696374425000:0" or "").
	ErrSegmentCount = errors.New("hlc: want three ':'-separated segments wall:counter:node")

	// ErrNotNumber is returned by Parse when the wall clock or counter segment is empty or holds
	// anything but ASCII digits (a '+' sign, spaces, hex).
	ErrNotNumber = errors.New("hlc: segment is not a decimal number")

	// ErrNegative is returned by Parse when the wall clock or counter segment starts with '-'.
	ErrNegative = errors.New("hlc: segment is negative")

	// ErrOverflow is returned by Parse when the wall clock does not fit an int64 (milliseconds)
	// or the counter does not fit a uint32.
	ErrOverflow = errors.New("hlc: segment out of range")

	// ErrEmptyNode is returned by Parse when the node id segment is empty ("1:0:").
	ErrEmptyNode = errors.New("hlc: empty node id")

	// ErrNodeColon is returned by Parse when the node id contains ':' (the text has more than
	// three segments). Node ids never contain ':' (docs/design.md, wire fact 7).
	ErrNodeColon = errors.New("hlc: node id contains ':'")

	// ErrTooFarAhead is returned (wrapped, test with errors.Is) by Clock.Update and
	// Clock.CheckDrift when a remote timestamp's wall clock is more than the clock's max drift
	// ahead of the local physical clock. The clock is not changed. The state store answers such
	// a request with its "too far in the future" error.
	ErrTooFarAhead = errors.New("hlc: remote timestamp too far in the future")
)

// Segment names a part of the text form, for ParseError.
type Segment uint8

// The three segments of "{wall}:{counter}:{node}"; SegmentNone for errors about the whole text.
const (
	SegmentNone Segment = iota
	SegmentWall
	SegmentCounter
	SegmentNode
)

func (s Segment) String() string {
	switch s {
	case SegmentWall:
		return "wall clock"
	case SegmentCounter:
		return "counter"
	case SegmentNode:
		return "node id"
	}
	return "timestamp"
}

// maxQuoted bounds how much of a bad input a ParseError keeps: the text comes off the wire and
// may be large; the error is for logs.
const maxQuoted = 64

// ParseError describes why Parse refused its input. Err is one of the Err… sentinels.
type ParseError struct {
	Input   string  // the input, cut to 64 bytes
	Segment Segment // which part is wrong
	Err     error
}

func (e *ParseError) Error() string {
	return e.Err.Error() + " (" + e.Segment.String() + ") in " + strconv.Quote(e.Input)
}

func (e *ParseError) Unwrap() error { return e.Err }

func parseError(in []byte, seg Segment, err error) error {
	if len(in) > maxQuoted {
		in = in[:maxQuoted]
	}
	return &ParseError{Input: string(in), Segment: seg, Err: err}
}
