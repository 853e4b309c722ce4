package resp3

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

// scalarFixtures are single tokens, each commented byte by byte where it matters.
var scalarFixtures = []struct {
	name string
	in   string
	want Value
}{
	// "+" simple string, "OK", CRLF — the state store's SET and KEYNOTIFY success.
	{"ok", "+OK\r\n", Value{Kind: SimpleString, Str: []byte("OK")}},
	{"empty simple", "+\r\n", Value{Kind: SimpleString, Str: []byte{}}},
	// "-" simple error; the text keeps "ERR " (docs/design.md, wire fact 6).
	{"err syntax", "-ERR syntax error\r\n", Value{Kind: SimpleError, Str: []byte("ERR syntax error")}},
	// ":" integer "-1": SET NX/NEX refused, VDEL mismatch (wire fact 1).
	{"int -1", ":-1\r\n", Value{Kind: Integer, Int: -1}},
	// ":1": one key deleted; ":0": none, or KEYNOTIFY STOP of an unwatched key.
	{"int 1", ":1\r\n", Value{Kind: Integer, Int: 1}},
	{"int 0", ":0\r\n", Value{Kind: Integer, Int: 0}},
	{"int plus", ":+42\r\n", Value{Kind: Integer, Int: 42}},
	{"int leading zeros", ":007\r\n", Value{Kind: Integer, Int: 7}},
	{"int max", ":9223372036854775807\r\n", Value{Kind: Integer, Int: math.MaxInt64}},
	{"int min", ":-9223372036854775808\r\n", Value{Kind: Integer, Int: math.MinInt64}},
	// "$-1": GET of a missing key (RESP2 null blob).
	{"null blob", "$-1\r\n", Value{Kind: BlobString, Len: -1}},
	// "$4", CRLF, "1234", CRLF: GET of a key holding 1234.
	{"blob 1234", "$4\r\n1234\r\n", Value{Kind: BlobString, Str: []byte("1234")}},
	// "$0", CRLF, CRLF: an empty value is legal (wire fact 12).
	{"empty blob", "$0\r\n\r\n", Value{Kind: BlobString, Str: []byte{}}},
	// A blob may hold CR and LF.
	{"binary blob", "$4\r\n\r\n\x00\xff\r\n", Value{Kind: BlobString, Str: []byte("\r\n\x00\xff")}},
	{"null array", "*-1\r\n", Value{Kind: Array, Len: -1}},
	{"null", "_\r\n", Value{Kind: Null}},
	{"true", "#t\r\n", Value{Kind: Boolean, Int: 1}},
	{"false", "#f\r\n", Value{Kind: Boolean, Int: 0}},
	{"double", ",1.23\r\n", Value{Kind: Double, Str: []byte("1.23")}},
	{"double exp", ",-1.5e-10\r\n", Value{Kind: Double, Str: []byte("-1.5e-10")}},
	{"double int", ",10\r\n", Value{Kind: Double, Str: []byte("10")}},
	{"double inf", ",inf\r\n", Value{Kind: Double, Str: []byte("inf")}},
	{"double -inf", ",-inf\r\n", Value{Kind: Double, Str: []byte("-inf")}},
	{"double nan", ",nan\r\n", Value{Kind: Double, Str: []byte("nan")}},
	{"big number", "(3492890328409238509324850943850943825024385\r\n",
		Value{Kind: BigNumber, Str: []byte("3492890328409238509324850943850943825024385")}},
	{"big negative", "(-12\r\n", Value{Kind: BigNumber, Str: []byte("-12")}},
	// "!21", CRLF, 21 bytes of error text, CRLF.
	{"blob error", "!21\r\nSYNTAX invalid syntax\r\n", Value{Kind: BlobError, Str: []byte("SYNTAX invalid syntax")}},
	// "=15": 3 format bytes "txt", ':', 11 bytes of text.
	{"verbatim", "=15\r\ntxt:Some string\r\n",
		Value{Kind: VerbatimString, Int: verbatimFormat("txt"), Str: []byte("Some string")}},
	{"array header", "*3\r\n", Value{Kind: Array, Len: 3}},
	{"empty array", "*0\r\n", Value{Kind: Array, Len: 0}},
	{"map header", "%2\r\n", Value{Kind: Map, Len: 2}},
	{"set header", "~5\r\n", Value{Kind: Set, Len: 5}},
	{"attribute header", "|1\r\n", Value{Kind: Attribute, Len: 1}},
	{"push header", ">4\r\n", Value{Kind: Push, Len: 4}},
	{"big count", "*1048576\r\n", Value{Kind: Array, Len: MaxElements}},
}

func TestReadValueFixtures(t *testing.T) {
	for _, f := range scalarFixtures {
		t.Run(f.name, func(t *testing.T) {
			in := []byte(f.in + "TAIL")
			v, rest, err := ReadValue(in)
			if err != nil {
				t.Fatalf("ReadValue(%q): %v", f.in, err)
			}
			if !equalValue(v, f.want) {
				t.Fatalf("ReadValue(%q) = %+v, want %+v", f.in, v, f.want)
			}
			if string(rest) != "TAIL" {
				t.Fatalf("rest = %q, want TAIL", rest)
			}
			// Canonical fixtures re-encode to the same bytes.
			canonical := !strings.HasPrefix(f.in, ":+") && f.in != ":007\r\n"
			if got := AppendValue(nil, v); canonical && string(got) != f.in {
				t.Fatalf("AppendValue = %q, want %q", got, f.in)
			}
			if _, err := ParseValue([]byte(f.in)); err != nil {
				t.Fatalf("ParseValue: %v", err)
			}
			if _, err := ParseValue(in); !errors.Is(err, ErrTrailingBytes) {
				t.Fatalf("ParseValue with tail: %v, want ErrTrailingBytes", err)
			}
		})
	}
}

func TestIsNull(t *testing.T) {
	for _, in := range []string{"_\r\n", "$-1\r\n", "*-1\r\n"} {
		v, _, err := ReadValue([]byte(in))
		if err != nil || !v.IsNull() {
			t.Errorf("%q: IsNull false (err %v)", in, err)
		}
	}
	for _, in := range []string{"$0\r\n\r\n", "*0\r\n", "+\r\n", ":0\r\n"} {
		v, _, err := ReadValue([]byte(in))
		if err != nil || v.IsNull() {
			t.Errorf("%q: IsNull true (err %v)", in, err)
		}
	}
}

// malformedFixtures break one rule each; off is where the error must point.
var malformedFixtures = []struct {
	name string
	in   string
	want error
	off  int
}{
	{"unknown type", "x\r\n", ErrUnknownType, 0},
	{"streamed blob", "$?\r\n;4\r\nabcd\r\n;0\r\n", ErrInvalidLength, 1},
	{"stream end", ".\r\n", ErrUnknownType, 0},
	{"bare LF simple", "+OK\n", ErrMissingCRLF, 3},
	{"CR without LF", "+OK\rX\r\n", ErrMissingCRLF, 4},
	{"LF inside simple", "+O\nK\r\n", ErrMissingCRLF, 2},
	{"blob wrong terminator", "$3\r\nabcXY", ErrMissingCRLF, 7},
	{"blob LF only", "$3\r\nabc\n\r", ErrMissingCRLF, 7},
	{"blob CR then X", "$3\r\nabc\rX", ErrMissingCRLF, 7},
	{"length bare LF", "$3\nabc\r\n", ErrMissingCRLF, 2},
	{"length letters", "$3a\r\nabc\r\n", ErrInvalidLength, 2},
	{"length empty", "$\r\n", ErrInvalidLength, 1},
	{"length plus", "$+3\r\nabc\r\n", ErrInvalidLength, 1},
	{"length leading zero", "$03\r\nabc\r\n", ErrInvalidLength, 1},
	{"negative blob", "$-2\r\n", ErrNegativeLength, 1},
	{"negative blob -10", "$-10\r\n", ErrNegativeLength, 1},
	{"negative array", "*-5\r\n", ErrNegativeLength, 1},
	{"null map", "%-1\r\n", ErrNegativeLength, 1},
	{"null blob error", "!-1\r\n", ErrNegativeLength, 1},
	{"length overflow", "$99999999999999999999\r\n", ErrOverflow, 1},
	{"blob too large", "$536870913\r\n", ErrTooLarge, 1},
	{"too many elements", "*1048577\r\n", ErrTooManyElements, 1},
	{"int overflow", ":9223372036854775808\r\n", ErrOverflow, 1},
	{"int underflow", ":-9223372036854775809\r\n", ErrOverflow, 1},
	{"int empty", ":\r\n", ErrInvalidInteger, 1},
	{"int sign only", ":-\r\n", ErrInvalidInteger, 2},
	{"int letters", ":12a\r\n", ErrInvalidInteger, 3},
	{"int space", ": 1\r\n", ErrInvalidInteger, 1},
	{"bool other", "#x\r\n", ErrInvalidBoolean, 1},
	{"bool long", "#tt\r\n", ErrInvalidBoolean, 2},
	{"null content", "_x\r\n", ErrInvalidNull, 1},
	{"double empty", ",\r\n", ErrInvalidDouble, 1},
	{"double dot", ",1.\r\n", ErrInvalidDouble, 1},
	{"double leading dot", ",.5\r\n", ErrInvalidDouble, 1},
	{"double word", ",abc\r\n", ErrInvalidDouble, 1},
	{"double -nan", ",-nan\r\n", ErrInvalidDouble, 1},
	{"big number empty", "(\r\n", ErrInvalidBigNumber, 1},
	{"big number plus", "(+1\r\n", ErrInvalidBigNumber, 1},
	{"verbatim short", "=3\r\ntxt\r\n", ErrInvalidVerbatim, 4},
	{"verbatim no colon", "=5\r\ntxtab\r\n", ErrInvalidVerbatim, 4},
}

func TestReadValueMalformed(t *testing.T) {
	for _, f := range malformedFixtures {
		t.Run(f.name, func(t *testing.T) {
			in := []byte(f.in)
			v, rest, err := ReadValue(in)
			if !errors.Is(err, f.want) {
				t.Fatalf("ReadValue(%q) = %+v, %v; want %v", f.in, v, err, f.want)
			}
			if !errors.Is(err, ErrMalformed) || !IsMalformed(err) || errors.Is(err, ErrIncomplete) {
				t.Fatalf("%v must be malformed and not incomplete", err)
			}
			var se *SyntaxError
			if !errors.As(err, &se) || se.Offset != f.off {
				t.Fatalf("error %v: want *SyntaxError at offset %d", err, f.off)
			}
			if !bytes.Equal(rest, in) {
				t.Fatalf("rest = %q, want the input back", rest)
			}
		})
	}
}

func TestIncompleteIsNotMalformed(t *testing.T) {
	for _, in := range []string{"", "+", "+OK", "+OK\r", "$", "$4", "$4\r", "$4\r\n12", "$4\r\n1234\r",
		"$-", "$-1", "$-1\r", ":", ":-", ":12", "#", "#t", "#t\r", "_", "_\r", "=15\r\ntxt:", "*", "*3\r"} {
		_, rest, err := ReadValue([]byte(in))
		if !errors.Is(err, ErrIncomplete) {
			t.Errorf("ReadValue(%q): %v, want ErrIncomplete", in, err)
		}
		if IsMalformed(err) {
			t.Errorf("ReadValue(%q): %v is malformed", in, err)
		}
		if string(rest) != in {
			t.Errorf("rest = %q", rest)
		}
	}
	// A declared length past the end says so, and still is "incomplete".
	_, _, err := ReadValue([]byte("$10\r\nabc"))
	if !errors.Is(err, ErrLengthPastBuffer) || !errors.Is(err, ErrIncomplete) {
		t.Fatalf("got %v, want ErrLengthPastBuffer matching ErrIncomplete", err)
	}
}

func TestDoubleFloat(t *testing.T) {
	for in, want := range map[string]float64{",1.5\r\n": 1.5, ",-2e3\r\n": -2000, ",inf\r\n": math.Inf(1), ",-inf\r\n": math.Inf(-1)} {
		v, _, err := ReadValue([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		f, err := v.Float()
		if err != nil || f != want {
			t.Errorf("%q: Float = %v, %v; want %v", in, f, err, want)
		}
	}
	v, _, _ := ReadValue([]byte(",nan\r\n"))
	if f, err := v.Float(); err != nil || !math.IsNaN(f) {
		t.Errorf("nan: %v %v", f, err)
	}
}

func equalValue(a, b Value) bool {
	return a.Kind == b.Kind && bytes.Equal(a.Str, b.Str) &&
		(a.Str == nil) == (b.Str == nil) && a.Int == b.Int && a.Len == b.Len
}

func verbatimFormat(f string) int64 { return int64(f[0])<<16 | int64(f[1])<<8 | int64(f[2]) }

func TestVerbatimFormat(t *testing.T) {
	v, err := ParseValue([]byte("=8\r\nmkd:# hi\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f := v.VerbatimFormat(); string(f[:]) != "mkd" || string(v.Str) != "# hi" {
		t.Fatalf("format %q text %q", f, v.Str)
	}
	if got := AppendValue(nil, v); string(got) != "=8\r\nmkd:# hi\r\n" {
		t.Fatalf("re-encoded %q", got)
	}
}

func TestKindHelpers(t *testing.T) {
	for in, want := range map[string]int{"*3\r\n": 3, "%2\r\n": 4, "|1\r\n": 2, "~0\r\n": 0, ">5\r\n": 5, "*-1\r\n": 0, ":9\r\n": 0} {
		v, err := ParseValue([]byte(in))
		if err != nil || v.Elements() != want || v.Kind.IsAggregate() != (in[0] != ':') {
			t.Errorf("%q: Elements %d (want %d), IsAggregate %v, err %v", in, v.Elements(), want, v.Kind.IsAggregate(), err)
		}
	}
	if BlobString.String() != "blob string" || Kind('x').String() != `kind("x")` {
		t.Errorf("String: %q %q", BlobString.String(), Kind('x').String())
	}
}
