package resp3

import (
	"math"
	"testing"
)

// TestWriters checks every writer against the bytes the protocol document and RESP3 specify,
// and that the reader accepts each result.
func TestWriters(t *testing.T) {
	for _, f := range []struct {
		name string
		got  []byte
		want string
	}{
		{"ok", AppendSimpleString(nil, "OK"), "+OK\r\n"},
		{"err", AppendError(nil, "ERR syntax error"), "-ERR syntax error\r\n"},
		{"not applied", AppendInt(nil, -1), ":-1\r\n"},
		{"deleted", AppendInt(nil, 1), ":1\r\n"},
		{"zero", AppendInt(nil, 0), ":0\r\n"},
		{"int max", AppendInt(nil, math.MaxInt64), ":9223372036854775807\r\n"},
		{"int min", AppendInt(nil, math.MinInt64), ":-9223372036854775808\r\n"},
		{"int 1234567", AppendInt(nil, 1234567), ":1234567\r\n"},
		{"missing key", AppendNullBlob(nil), "$-1\r\n"},
		{"value 1234", AppendBlob(nil, []byte("1234")), "$4\r\n1234\r\n"},
		{"empty value", AppendBlob(nil, nil), "$0\r\n\r\n"},
		{"blob string", AppendBlobString(nil, "abc"), "$3\r\nabc\r\n"},
		{"null", AppendNull(nil), "_\r\n"},
		{"null array", AppendNullArray(nil), "*-1\r\n"},
		{"array 4", AppendArrayHeader(nil, 4), "*4\r\n"},
		{"array 42", AppendArrayHeader(nil, 42), "*42\r\n"},
		{"array 1000", AppendArrayHeader(nil, 1000), "*1000\r\n"},
		{"array -1", AppendArrayHeader(nil, -1), "*-1\r\n"},
		{"map", AppendMapHeader(nil, 2), "%2\r\n"},
		{"set", AppendSetHeader(nil, 3), "~3\r\n"},
		{"push", AppendPushHeader(nil, 3), ">3\r\n"},
		{"attribute", AppendAttributeHeader(nil, 1), "|1\r\n"},
		{"true", AppendBool(nil, true), "#t\r\n"},
		{"false", AppendBool(nil, false), "#f\r\n"},
		{"double", AppendDouble(nil, 1.5), ",1.5\r\n"},
		{"double big", AppendDouble(nil, 1e21), ",1e+21\r\n"},
		{"double inf", AppendDouble(nil, math.Inf(1)), ",inf\r\n"},
		{"double -inf", AppendDouble(nil, math.Inf(-1)), ",-inf\r\n"},
		{"double nan", AppendDouble(nil, math.NaN()), ",nan\r\n"},
		{"big number", AppendBigNumber(nil, "-123456789012345678901234567890"), "(-123456789012345678901234567890\r\n"},
		{"blob error", AppendBlobError(nil, []byte("SYNTAX invalid syntax")), "!21\r\nSYNTAX invalid syntax\r\n"},
		{"verbatim", AppendVerbatim(nil, "txt", []byte("Some string")), "=15\r\ntxt:Some string\r\n"},
		{"appends", AppendSimpleString([]byte("x"), "OK"), "x+OK\r\n"},
	} {
		if string(f.got) != f.want {
			t.Errorf("%s: got %q, want %q", f.name, f.got, f.want)
			continue
		}
		tail := f.got
		if f.name == "appends" {
			tail = tail[1:]
		}
		if _, err := ParseValue(tail); err != nil {
			t.Errorf("%s: reader rejects %q: %v", f.name, tail, err)
		}
	}
}
