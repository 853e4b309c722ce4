package resp3

import (
	"math"
	"strconv"
)

// Kind is a RESP3 type: the byte that starts a value on the wire.
type Kind byte

// The RESP3 types (https://github.com/redis/redis-specifications/blob/master/protocol/RESP3.md).
const (
	Array          Kind = '*'
	BlobString     Kind = '$'
	SimpleString   Kind = '+'
	SimpleError    Kind = '-'
	Integer        Kind = ':'
	Null           Kind = '_'
	Boolean        Kind = '#'
	Double         Kind = ','
	BigNumber      Kind = '('
	BlobError      Kind = '!'
	VerbatimString Kind = '='
	Map            Kind = '%'
	Set            Kind = '~'
	Attribute      Kind = '|'
	Push           Kind = '>'
)

// Bounds the reader enforces. They keep a hostile peer from making a reader promise memory
// (a huge declared length) or stack (deep nesting).
const (
	// MaxBlobLen bounds a blob's declared length (512 MiB, Redis's proto-max-bulk-len).
	MaxBlobLen = 512 << 20
	// MaxElements bounds an aggregate's declared element count (pairs for Map and Attribute).
	MaxElements = 1 << 20
	// MaxDepth bounds how deeply Skip and ReadTree follow nested aggregates.
	MaxDepth = 64
)

// String returns the type's name, such as "blob string".
func (k Kind) String() string {
	switch k {
	case Array:
		return "array"
	case BlobString:
		return "blob string"
	case SimpleString:
		return "simple string"
	case SimpleError:
		return "simple error"
	case Integer:
		return "integer"
	case Null:
		return "null"
	case Boolean:
		return "boolean"
	case Double:
		return "double"
	case BigNumber:
		return "big number"
	case BlobError:
		return "blob error"
	case VerbatimString:
		return "verbatim string"
	case Map:
		return "map"
	case Set:
		return "set"
	case Attribute:
		return "attribute"
	case Push:
		return "push"
	}
	return "kind(" + strconv.Quote(string(rune(k))) + ")"
}

// IsAggregate reports whether values of this kind are followed by elements: Array, Map, Set,
// Attribute and Push.
func (k Kind) IsAggregate() bool {
	switch k {
	case Array, Map, Set, Attribute, Push:
		return true
	}
	return false
}

// Value is one RESP3 token as read by ReadValue. For aggregates it is only the header; the
// elements follow in the input.
//
// Str is a view into the input: it is valid while the input slice lives and is not modified.
// Copy it (string(v.Str), bytes.Clone) to keep it longer.
type Value struct {
	Kind Kind
	// Str holds the bytes of string-like kinds (BlobString, SimpleString, SimpleError,
	// BlobError; VerbatimString: the text after "xxx:"), and the text of Double and
	// BigNumber values. Nil for a "$-1" null.
	Str []byte
	// Int is an Integer's value, 1/0 for a Boolean, and a VerbatimString's three format
	// bytes ("txt", "mkd") packed big-endian — use VerbatimFormat. (A [3]byte field would
	// keep Value out of registers in every call.)
	Int int64
	// Len is an aggregate's element count (Map and Attribute: the number of pairs), or -1 for
	// the RESP2 nulls "$-1" and "*-1".
	Len int
}

// IsNull reports whether v is a null: "_", "$-1" or "*-1".
func (v Value) IsNull() bool {
	return v.Kind == Null || (v.Len == -1 && (v.Kind == BlobString || v.Kind == Array))
}

// VerbatimFormat returns a VerbatimString's format, such as "txt".
func (v Value) VerbatimFormat() [3]byte {
	return [3]byte{byte(v.Int >> 16), byte(v.Int >> 8), byte(v.Int)}
}

// Bool reports a Boolean's value.
func (v Value) Bool() bool { return v.Int != 0 }

// Float parses a Double's text ("inf", "-inf" and "nan" included).
func (v Value) Float() (float64, error) {
	switch string(v.Str) {
	case "inf", "+inf":
		return math.Inf(1), nil
	case "-inf":
		return math.Inf(-1), nil
	case "nan":
		return math.NaN(), nil
	}
	return strconv.ParseFloat(string(v.Str), 64)
}

// Elements returns how many tokens directly follow this header as its elements: Len for
// Array, Set and Push, 2*Len for Map and Attribute, 0 otherwise (nulls included).
func (v Value) Elements() int {
	switch v.Kind {
	case Array, Set, Push:
		if v.Len > 0 {
			return v.Len
		}
	case Map, Attribute:
		return 2 * v.Len
	}
	return 0
}
