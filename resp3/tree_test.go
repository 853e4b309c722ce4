package resp3

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// treeFixtures are whole nested values with the tokens ReadTree must produce, in pre-order.
var treeFixtures = []struct {
	name string
	in   string
	want []Value
}{
	{"scalar", "+OK\r\n", []Value{{Kind: SimpleString, Str: []byte("OK")}}},
	// The KEYNOTIFY notification: *4 header, then four blob strings.
	{"notify set", "*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$3\r\nabc\r\n", []Value{
		{Kind: Array, Len: 4},
		{Kind: BlobString, Str: []byte("NOTIFY")},
		{Kind: BlobString, Str: []byte("SET")},
		{Kind: BlobString, Str: []byte("VALUE")},
		{Kind: BlobString, Str: []byte("abc")},
	}},
	// %2: two pairs; "first" => 1, "second" => 2.
	{"map", "%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n", []Value{
		{Kind: Map, Len: 2},
		{Kind: SimpleString, Str: []byte("first")}, {Kind: Integer, Int: 1},
		{Kind: SimpleString, Str: []byte("second")}, {Kind: Integer, Int: 2},
	}},
	// ~3 of mixed types, one of them a null.
	{"set", "~3\r\n#t\r\n,2.5\r\n_\r\n", []Value{
		{Kind: Set, Len: 3}, {Kind: Boolean, Int: 1}, {Kind: Double, Str: []byte("2.5")}, {Kind: Null},
	}},
	// Attribute "|1" with one pair annotating the array that follows it (RESP3 spec example):
	// the attribute and its pairs do not count as an element of anything.
	{"attribute", "|1\r\n+key-popularity\r\n%2\r\n$1\r\na\r\n,0.1923\r\n$1\r\nb\r\n,0.0012\r\n*2\r\n:2039123\r\n:9543892\r\n", []Value{
		{Kind: Attribute, Len: 1},
		{Kind: SimpleString, Str: []byte("key-popularity")},
		{Kind: Map, Len: 2},
		{Kind: BlobString, Str: []byte("a")}, {Kind: Double, Str: []byte("0.1923")},
		{Kind: BlobString, Str: []byte("b")}, {Kind: Double, Str: []byte("0.0012")},
		{Kind: Array, Len: 2}, {Kind: Integer, Int: 2039123}, {Kind: Integer, Int: 9543892},
	}},
	// An attribute inside an array annotates one element and does not count: *2 holds two
	// integers although three top-level tokens precede the second.
	{"attribute in array", "*2\r\n:1\r\n|1\r\n+ttl\r\n:3600\r\n:2\r\n", []Value{
		{Kind: Array, Len: 2}, {Kind: Integer, Int: 1},
		{Kind: Attribute, Len: 1}, {Kind: SimpleString, Str: []byte("ttl")}, {Kind: Integer, Int: 3600},
		{Kind: Integer, Int: 2},
	}},
	// Push ">2" (out-of-band message): "invalidate", then an array of one key.
	{"push", ">2\r\n$10\r\ninvalidate\r\n*1\r\n$3\r\nkey\r\n", []Value{
		{Kind: Push, Len: 2}, {Kind: BlobString, Str: []byte("invalidate")},
		{Kind: Array, Len: 1}, {Kind: BlobString, Str: []byte("key")},
	}},
	{"empty and null aggregates", "*3\r\n*0\r\n*-1\r\n%0\r\n", []Value{
		{Kind: Array, Len: 3}, {Kind: Array, Len: 0}, {Kind: Array, Len: -1}, {Kind: Map, Len: 0},
	}},
	{"errors and verbatim", "*3\r\n-ERR x\r\n!3\r\nbad\r\n=7\r\nmkd:# h\r\n", []Value{
		{Kind: Array, Len: 3}, {Kind: SimpleError, Str: []byte("ERR x")}, {Kind: BlobError, Str: []byte("bad")},
		{Kind: VerbatimString, Int: verbatimFormat("mkd"), Str: []byte("# h")},
	}},
}

func TestReadTreeFixtures(t *testing.T) {
	for _, f := range treeFixtures {
		t.Run(f.name, func(t *testing.T) {
			in := []byte(f.in + ":7\r\n") // a following value must be left in rest
			tree, rest, err := ReadTree(in, nil)
			if err != nil {
				t.Fatalf("ReadTree: %v", err)
			}
			if string(rest) != ":7\r\n" {
				t.Fatalf("rest = %q", rest)
			}
			if len(tree) != len(f.want) {
				t.Fatalf("got %d tokens %+v, want %d", len(tree), tree, len(f.want))
			}
			for i := range tree {
				if !equalValue(tree[i], f.want[i]) {
					t.Fatalf("token %d = %+v, want %+v", i, tree[i], f.want[i])
				}
			}
			var enc []byte
			for _, v := range tree {
				enc = AppendValue(enc, v)
			}
			if string(enc) != f.in {
				t.Fatalf("re-encoded %q, want %q", enc, f.in)
			}
			rest, err = Skip(in)
			if err != nil || string(rest) != ":7\r\n" {
				t.Fatalf("Skip: rest %q, err %v", rest, err)
			}
			if _, err := ParseTree(in, nil); !errors.Is(err, ErrTrailingBytes) {
				t.Fatalf("ParseTree with a tail: %v", err)
			}
			if _, err := ParseTree([]byte(f.in), nil); err != nil {
				t.Fatalf("ParseTree: %v", err)
			}
		})
	}
}

func TestTreeDepth(t *testing.T) {
	nest := func(n int) []byte { return []byte(strings.Repeat("*1\r\n", n) + ":1\r\n") }
	if _, err := Skip(nest(MaxDepth)); err != nil {
		t.Fatalf("%d levels: %v", MaxDepth, err)
	}
	_, err := Skip(nest(MaxDepth + 1))
	var se *SyntaxError
	if !errors.Is(err, ErrTooDeep) || !errors.As(err, &se) || se.Offset != 4*MaxDepth {
		t.Fatalf("%d levels: %v, want ErrTooDeep at offset %d", MaxDepth+1, err, 4*MaxDepth)
	}
	// Attributes nest too.
	if _, err := Skip([]byte(strings.Repeat("|1\r\n", MaxDepth+1) + "_\r\n")); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("nested attributes: %v", err)
	}
	// Very deep input is refused without recursion trouble.
	if _, err := Skip(nest(1 << 16)); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("very deep: %v", err)
	}
	// An empty aggregate at the limit is fine: it has no elements to descend into.
	if _, err := Skip([]byte(strings.Repeat("*1\r\n", MaxDepth) + "*0\r\n")); err != nil {
		t.Fatalf("empty at the limit: %v", err)
	}
}

func TestTreeErrors(t *testing.T) {
	for _, f := range []struct {
		in   string
		want error
	}{
		{"*2\r\n:1\r\n", ErrIncomplete},
		{"*2\r\n:1\r\n$3\r\nab", ErrLengthPastBuffer},
		{"%1\r\n:1\r\n", ErrIncomplete},       // a map's value is missing
		{"|1\r\n:1\r\n:2\r\n", ErrIncomplete}, // the annotated value is missing
		{"*2\r\n:1\r\nx\r\n", ErrUnknownType},
		{"*1\r\n*1\r\n:99999999999999999999\r\n", ErrOverflow},
	} {
		in := []byte(f.in)
		tree, rest, err := ReadTree(in, make([]Value, 0, 4))
		if !errors.Is(err, f.want) || len(tree) != 0 || !bytes.Equal(rest, in) {
			t.Errorf("ReadTree(%q) = %d tokens, %v; want none, %v", f.in, len(tree), err, f.want)
		}
		if _, err := Skip(in); !errors.Is(err, f.want) {
			t.Errorf("Skip(%q) = %v, want %v", f.in, err, f.want)
		}
	}
}
