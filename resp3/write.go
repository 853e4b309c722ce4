package resp3

import (
	"math"
	"strconv"
)

// The writers append one RESP3 token to dst and return the extended slice, like
// strconv.AppendInt. They never allocate when dst has room. They do not check their input:
// a simple string or error containing "\r" or "\n" produces bytes no reader accepts — use
// AppendBlob / AppendBlobError for arbitrary bytes.

// AppendArrayHeader appends "*n\r\n". The n elements are appended after it by the caller.
// A negative n appends the RESP2 null array "*-1\r\n".
func AppendArrayHeader(dst []byte, n int) []byte {
	// Spelled out rather than calling appendHeader so that it stays within the inliner's
	// budget: commands are encoded on every request, the other aggregates rarely.
	if uint(n) < 10 {
		return append(dst, '*', byte('0'+n), '\r', '\n')
	}
	return appendHeaderSlow(dst, Array, n)
}

// AppendMapHeader appends "%n\r\n"; n is the number of key/value pairs that follow.
func AppendMapHeader(dst []byte, n int) []byte { return appendHeader(dst, Map, n) }

// AppendSetHeader appends "~n\r\n".
func AppendSetHeader(dst []byte, n int) []byte { return appendHeader(dst, Set, n) }

// AppendPushHeader appends ">n\r\n".
func AppendPushHeader(dst []byte, n int) []byte { return appendHeader(dst, Push, n) }

// AppendAttributeHeader appends "|n\r\n"; n pairs follow, then the value they annotate.
func AppendAttributeHeader(dst []byte, n int) []byte { return appendHeader(dst, Attribute, n) }

// AppendBlob appends b as a blob string: "$len\r\n" b "\r\n".
//
// It is small enough for the compiler to inline, and its body is plain code rather than a
// generic shared by the string variant: a generic instantiation is called through a
// dictionary and never inlined, which cost a third of the time of encoding a whole SET.
func AppendBlob(dst, b []byte) []byte {
	dst = appendBlobHeader(dst, BlobString, len(b))
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}

// AppendBlobString is AppendBlob for a string.
func AppendBlobString(dst []byte, s string) []byte {
	dst = appendBlobHeader(dst, BlobString, len(s))
	dst = append(dst, s...)
	return append(dst, '\r', '\n')
}

// appendBlobHeader writes a length prefix. The lengths of keys and values are usually
// below 100, so their digits are written inline.
func appendBlobHeader(dst []byte, k Kind, n int) []byte {
	if n < 10 {
		return append(dst, byte(k), byte('0'+n), '\r', '\n')
	}
	if n < 100 {
		return append(dst, byte(k), byte('0'+n/10), byte('0'+n%10), '\r', '\n')
	}
	return appendHeaderSlow(dst, k, n)
}

// AppendSimpleString appends "+s\r\n", e.g. "+OK\r\n". s must not contain CR or LF.
func AppendSimpleString(dst []byte, s string) []byte {
	dst = append(dst, '+')
	dst = append(dst, s...)
	return append(dst, '\r', '\n')
}

// AppendError appends the simple error "-msg\r\n". The state store's errors are
// "-ERR <text>" (docs/design.md, wire fact 6), so callers pass "ERR syntax error". msg must not
// contain CR or LF.
func AppendError(dst []byte, msg string) []byte {
	dst = append(dst, '-')
	dst = append(dst, msg...)
	return append(dst, '\r', '\n')
}

// AppendBlobError appends "!len\r\n" msg "\r\n".
func AppendBlobError(dst []byte, msg []byte) []byte {
	dst = appendBlobHeader(dst, BlobError, len(msg))
	dst = append(dst, msg...)
	return append(dst, '\r', '\n')
}

// AppendVerbatim appends "=len\r\nfmt:text\r\n". format should be three bytes ("txt",
// "mkd"); it is written as given.
func AppendVerbatim(dst []byte, format string, text []byte) []byte {
	dst = appendHeader(dst, VerbatimString, len(format)+1+len(text))
	dst = append(dst, format...)
	dst = append(dst, ':')
	dst = append(dst, text...)
	return append(dst, '\r', '\n')
}

// AppendInt appends the integer ":n\r\n", e.g. ":-1\r\n".
func AppendInt(dst []byte, n int64) []byte {
	dst = append(dst, ':')
	if n < 0 {
		dst = append(dst, '-')
		dst = appendUint(dst, uint64(-n)) // math.MinInt64 negates to itself; as uint64 it is 1<<63
	} else {
		dst = appendUint(dst, uint64(n))
	}
	return append(dst, '\r', '\n')
}

// AppendNullBlob appends the RESP2 null blob "$-1\r\n", which the state store answers for a
// missing key.
func AppendNullBlob(dst []byte) []byte { return append(dst, "$-1\r\n"...) }

// AppendNullArray appends the RESP2 null array "*-1\r\n".
func AppendNullArray(dst []byte) []byte { return append(dst, "*-1\r\n"...) }

// AppendNull appends the RESP3 null "_\r\n".
func AppendNull(dst []byte) []byte { return append(dst, "_\r\n"...) }

// AppendBool appends "#t\r\n" or "#f\r\n".
func AppendBool(dst []byte, t bool) []byte {
	if t {
		return append(dst, "#t\r\n"...)
	}
	return append(dst, "#f\r\n"...)
}

// AppendDouble appends f as a RESP3 double in the shortest form that reads back exactly
// (",1.5\r\n", ",inf\r\n", ",-inf\r\n", ",nan\r\n").
func AppendDouble(dst []byte, f float64) []byte {
	dst = append(dst, ',')
	switch {
	case math.IsInf(f, 1):
		dst = append(dst, "inf"...)
	case math.IsInf(f, -1):
		dst = append(dst, "-inf"...)
	case math.IsNaN(f):
		dst = append(dst, "nan"...)
	default:
		// 'g' may write "1e+21", which the reader accepts; never ".5" or "5.".
		dst = strconv.AppendFloat(dst, f, 'g', -1, 64)
	}
	return append(dst, '\r', '\n')
}

// AppendBigNumber appends "(digits\r\n". digits must be [-]digits.
func AppendBigNumber(dst []byte, digits string) []byte {
	dst = append(dst, '(')
	dst = append(dst, digits...)
	return append(dst, '\r', '\n')
}

// AppendValue appends the token v, as ReadValue returned it: for an aggregate only its header
// (the caller appends the elements). Double and BigNumber are written from v.Str. Appending
// every token ReadValue (or ReadTree) read gives back the input bytes exactly, except that an
// Integer is written in canonical form (no '+', no leading zeros, "-0" as "0").
func AppendValue(dst []byte, v Value) []byte {
	switch v.Kind {
	case BlobString:
		if v.Len == -1 {
			return AppendNullBlob(dst)
		}
		return AppendBlob(dst, v.Str)
	case BlobError:
		return AppendBlobError(dst, v.Str)
	case VerbatimString:
		dst = appendHeader(dst, VerbatimString, 4+len(v.Str))
		dst = append(dst, byte(v.Int>>16), byte(v.Int>>8), byte(v.Int))
		dst = append(dst, ':')
		dst = append(dst, v.Str...)
		return append(dst, '\r', '\n')
	case SimpleString, SimpleError, Double, BigNumber:
		dst = append(dst, byte(v.Kind))
		dst = append(dst, v.Str...)
		return append(dst, '\r', '\n')
	case Integer:
		return AppendInt(dst, v.Int)
	case Null:
		return AppendNull(dst)
	case Boolean:
		return AppendBool(dst, v.Int != 0)
	case Array, Map, Set, Attribute, Push:
		return appendHeader(dst, v.Kind, v.Len)
	}
	return dst
}

// appendHeader is split so that its common case (a one-digit count) inlines into the
// writers; the rest goes out of line.
func appendHeader(dst []byte, k Kind, n int) []byte {
	if uint(n) < 10 {
		return append(dst, byte(k), byte('0'+n), '\r', '\n')
	}
	return appendHeaderSlow(dst, k, n)
}

func appendHeaderSlow(dst []byte, k Kind, n int) []byte {
	if n < 0 {
		return append(dst, byte(k), '-', '1', '\r', '\n')
	}
	if n < 100 {
		return append(dst, byte(k), byte('0'+n/10), byte('0'+n%10), '\r', '\n')
	}
	dst = append(dst, byte(k))
	dst = appendUint(dst, uint64(n))
	return append(dst, '\r', '\n')
}

// appendUint writes u in decimal without strconv (which is fast too, but this keeps the
// common short lengths to a couple of instructions).
func appendUint(dst []byte, u uint64) []byte {
	if u < 10 {
		return append(dst, byte('0'+u))
	}
	var buf [20]byte
	i := len(buf)
	for u >= 10 {
		i--
		q := u / 10
		buf[i] = byte('0' + u - q*10)
		u = q
	}
	i--
	buf[i] = byte('0' + u)
	return append(dst, buf[i:]...)
}
