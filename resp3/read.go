package resp3

import "math"

// ReadValue reads one RESP3 token from the start of b and returns it with the bytes after it.
// For an aggregate (Array, Map, Set, Attribute, Push) v is the header: v.Len elements (pairs
// for Map and Attribute) follow in rest, each read by further calls. Skip and ReadTree read a
// whole nested value at once.
//
// v.Str is a view into b, valid while b lives and is not modified. ReadValue does not
// allocate, except to build the error for malformed input.
//
// On error, rest is b. ErrIncomplete (errors.Is) means b is a valid prefix and more bytes are
// needed; any other error is a *SyntaxError matching ErrMalformed.
func ReadValue(b []byte) (v Value, rest []byte, err error) {
	next, err := readValueAt(b, 0, &v)
	if err != nil {
		return Value{}, b, err
	}
	return v, b[next:], nil
}

// ParseValue reads exactly one token that must fill all of b: bytes after it are
// ErrTrailingBytes. Meant for scalar replies such as "+OK\r\n" or "$4\r\n1234\r\n".
func ParseValue(b []byte) (Value, error) {
	var v Value
	next, err := readValueAt(b, 0, &v)
	if err != nil {
		return Value{}, err
	}
	if next != len(b) {
		return Value{}, errAt(next, ErrTrailingBytes)
	}
	return v, nil
}

// readValueAt reads the token starting at b[i] into *v and returns the index after it.
// It writes *v in place (every field) rather than returning a Value: returning the struct
// made callers copy it through the stack, which cost more than the parsing.
// Offsets in errors are indexes into b, so nested readers report positions in the whole input.
//
// The common token — a blob string shorter than 100 bytes — takes a short path; everything
// else (and every error) goes through readToken.
func readValueAt(b []byte, i int, v *Value) (int, error) {
	if i+5 < len(b) && b[i] == byte(BlobString) {
		var n, j int
		if c := b[i+1] - '0'; c < 10 && b[i+2] == '\r' && b[i+3] == '\n' {
			n, j = int(c), i+4 // "$d\r\n"
		} else if d := b[i+2] - '0'; c-1 < 9 && d < 10 && b[i+3] == '\r' && b[i+4] == '\n' {
			n, j = int(c)*10+int(d), i+5 // "$dd\r\n", no leading zero
		}
		if j != 0 && n <= len(b)-j-2 && b[j+n] == '\r' && b[j+n+1] == '\n' {
			*v = Value{Kind: BlobString, Str: b[j : j+n : j+n]}
			return j + n + 2, nil
		}
	}
	return readToken(b, i, v)
}

// readToken is readValueAt for every kind, with the precise errors.
func readToken(b []byte, i int, v *Value) (int, error) {
	if i >= len(b) {
		return i, ErrIncomplete
	}
	k := Kind(b[i])
	switch k {
	case BlobString, BlobError, VerbatimString:
		n, j, err := readLength(b, i+1)
		if err != nil {
			return i, err
		}
		if n < 0 {
			// protocol (RESP2 compatibility): "$-1" is a null blob string.
			if k != BlobString {
				return i, errAt(i+1, ErrNegativeLength)
			}
			*v = Value{Kind: BlobString, Len: -1}
			return j, nil
		}
		if n > MaxBlobLen {
			return i, errAt(i+1, ErrTooLarge)
		}
		if n > len(b)-j-2 {
			// Report a wrong terminator as soon as its byte is in view, so that malformed
			// input is not mistaken for a prefix.
			if n < len(b)-j && b[j+n] != '\r' {
				return i, errAt(j+n, ErrMissingCRLF)
			}
			return i, ErrLengthPastBuffer
		}
		end := j + n
		if b[end] != '\r' || b[end+1] != '\n' {
			return i, errAt(end, ErrMissingCRLF)
		}
		*v = Value{Kind: k, Str: b[j:end:end]}
		if k == VerbatimString {
			// protocol: "=15\r\ntxt:Some string\r\n" — three format bytes, a colon, the text.
			if n < 4 || b[j+3] != ':' {
				return i, errAt(j, ErrInvalidVerbatim)
			}
			v.Int = int64(b[j])<<16 | int64(b[j+1])<<8 | int64(b[j+2])
			v.Str = b[j+4 : end : end]
		}
		return end + 2, nil

	case Array, Map, Set, Attribute, Push:
		n, j, err := readLength(b, i+1)
		if err != nil {
			return i, err
		}
		if n < 0 && k != Array {
			// protocol: only "*-1" survives from RESP2; RESP3 nulls are "_".
			return i, errAt(i+1, ErrNegativeLength)
		}
		if n > MaxElements {
			return i, errAt(i+1, ErrTooManyElements)
		}
		*v = Value{Kind: k, Len: n}
		return j, nil

	case SimpleString, SimpleError:
		j, err := lineEnd(b, i+1)
		if err != nil {
			return i, err
		}
		*v = Value{Kind: k, Str: b[i+1 : j : j]}
		return j + 2, nil

	case Integer:
		n, j, err := readInt(b, i+1)
		if err != nil {
			return i, err
		}
		*v = Value{Kind: Integer, Int: n}
		return j, nil

	case Null:
		// protocol: "_\r\n"
		j, err := expectCRLF(b, i+1, ErrInvalidNull)
		if err != nil {
			return i, err
		}
		*v = Value{Kind: Null}
		return j, nil

	case Boolean:
		// protocol: "#t\r\n" or "#f\r\n"
		if i+1 >= len(b) {
			return i, ErrIncomplete
		}
		var t int64
		switch b[i+1] {
		case 't':
			t = 1
		case 'f':
		default:
			return i, errAt(i+1, ErrInvalidBoolean)
		}
		j, err := expectCRLF(b, i+2, ErrInvalidBoolean)
		if err != nil {
			return i, err
		}
		*v = Value{Kind: Boolean, Int: t}
		return j, nil

	case Double, BigNumber:
		j, err := lineEnd(b, i+1)
		if err != nil {
			return i, err
		}
		text := b[i+1 : j : j]
		if k == Double {
			if !validDouble(text) {
				return i, errAt(i+1, ErrInvalidDouble)
			}
		} else if !validBigNumber(text) {
			return i, errAt(i+1, ErrInvalidBigNumber)
		}
		*v = Value{Kind: k, Str: text}
		return j + 2, nil
	}
	return i, errAt(i, ErrUnknownType)
}

// readLength parses a length or count starting at b[i] up to and including its CRLF and
// returns it with the index after the CRLF. Accepted: "0", a decimal without sign or leading
// zeros, and "-1" (the caller decides whether a null is allowed here).
func readLength(b []byte, i int) (n, next int, err error) {
	if i >= len(b) {
		return 0, i, ErrIncomplete
	}
	c := b[i]
	if c == '-' {
		// Only "-1" is a legal negative length.
		if i+1 >= len(b) {
			return 0, i, ErrIncomplete
		}
		if b[i+1] != '1' {
			if b[i+1] >= '0' && b[i+1] <= '9' {
				return 0, i, errAt(i, ErrNegativeLength)
			}
			return 0, i, errAt(i, ErrInvalidLength)
		}
		if i+2 < len(b) && b[i+2] >= '0' && b[i+2] <= '9' {
			return 0, i, errAt(i, ErrNegativeLength)
		}
		j, err := expectCRLF(b, i+2, ErrInvalidLength)
		return -1, j, err
	}
	if c < '0' || c > '9' {
		return 0, i, errAt(i, ErrInvalidLength) // empty, a sign, "?" (streamed), or junk
	}
	n = int(c - '0')
	j := i + 1
	if c == '0' {
		// "0" alone; "0" followed by digits is a non-canonical leading zero.
		if j < len(b) && b[j] >= '0' && b[j] <= '9' {
			return 0, i, errAt(i, ErrInvalidLength)
		}
	} else {
		for ; j < len(b); j++ {
			d := b[j] - '0'
			if d > 9 {
				break
			}
			if n > (math.MaxInt-9)/10 {
				if n > (math.MaxInt-int(d))/10 {
					return 0, i, errAt(i, ErrOverflow)
				}
			}
			n = n*10 + int(d)
		}
	}
	if j+1 < len(b) && b[j] == '\r' && b[j+1] == '\n' {
		return n, j + 2, nil
	}
	j, err = expectCRLF(b, j, ErrInvalidLength)
	return n, j, err
}

// expectCRLF checks for "\r\n" at b[i] and returns the index after it. A byte other than
// '\r' or '\n' there is reported as bad (the content of the line was wrong); a lone '\n' or
// a '\r' followed by something else is ErrMissingCRLF.
func expectCRLF(b []byte, i int, bad error) (int, error) {
	if i >= len(b) {
		return i, ErrIncomplete
	}
	switch b[i] {
	case '\r':
		if i+1 >= len(b) {
			return i, ErrIncomplete
		}
		if b[i+1] != '\n' {
			return i, errAt(i+1, ErrMissingCRLF)
		}
		return i + 2, nil
	case '\n':
		return i, errAt(i, ErrMissingCRLF)
	}
	return i, errAt(i, bad)
}

// lineEnd finds the "\r\n" that ends the line starting at b[i] and returns the index of its
// '\r'. A bare '\r' or '\n' inside the line is ErrMissingCRLF.
func lineEnd(b []byte, i int) (int, error) {
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '\r':
			if j+1 >= len(b) {
				return j, ErrIncomplete
			}
			if b[j+1] != '\n' {
				return j, errAt(j+1, ErrMissingCRLF)
			}
			return j, nil
		case '\n':
			return j, errAt(j, ErrMissingCRLF)
		}
	}
	return len(b), ErrIncomplete
}

// readInt parses an Integer's text at b[i] ([+-]digits, int64 range) and its CRLF.
func readInt(b []byte, i int) (int64, int, error) {
	start := i
	neg := false
	if i < len(b) && (b[i] == '-' || b[i] == '+') {
		neg = b[i] == '-'
		i++
	}
	if i >= len(b) {
		return 0, i, ErrIncomplete
	}
	if b[i] < '0' || b[i] > '9' {
		if b[i] == '\n' || (b[i] == '\r' && i+1 < len(b) && b[i+1] != '\n') {
			return 0, i, errAt(i, ErrMissingCRLF)
		}
		return 0, i, errAt(i, ErrInvalidInteger)
	}
	// Magnitude in uint64: up to 1<<63 for a negative number, 1<<63-1 for a positive one.
	limit := uint64(math.MaxInt64)
	if neg {
		limit++
	}
	var u uint64
	for ; i < len(b); i++ {
		d := b[i] - '0'
		if d > 9 {
			break
		}
		if u > (limit-uint64(d))/10 {
			return 0, i, errAt(start, ErrOverflow)
		}
		u = u*10 + uint64(d)
	}
	j, err := expectCRLF(b, i, ErrInvalidInteger)
	if err != nil {
		return 0, i, err
	}
	if neg {
		return int64(-u), j, nil // -(1<<63) wraps to math.MinInt64, as intended
	}
	return int64(u), j, nil
}

// validDouble reports whether s is a RESP3 double: [+-]digits[.digits][(e|E)[+-]digits],
// or [+-]inf, or nan.
func validDouble(s []byte) bool {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	switch string(s[i:]) {
	case "inf":
		return true
	case "nan":
		return i == 0
	}
	digits := func() bool {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i > start
	}
	if !digits() {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			i++
		}
		if !digits() {
			return false
		}
	}
	return i == len(s)
}

// validBigNumber reports whether s is [-]digits.
func validBigNumber(s []byte) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
