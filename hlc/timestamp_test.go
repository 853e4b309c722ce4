package hlc

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// parseCase is one line of testdata/timestamps.txt.
type parseCase struct {
	line  int
	input string
	want  Timestamp // when err is nil
	err   error
}

var sentinels = map[string]error{
	"ErrSegmentCount": ErrSegmentCount,
	"ErrNotNumber":    ErrNotNumber,
	"ErrNegative":     ErrNegative,
	"ErrOverflow":     ErrOverflow,
	"ErrEmptyNode":    ErrEmptyNode,
	"ErrNodeColon":    ErrNodeColon,
}

func loadParseCases(tb testing.TB) []parseCase {
	tb.Helper()
	f, err := os.Open("testdata/timestamps.txt")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var cases []parseCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c := parseCase{line: n}
		kind, _, _ := strings.Cut(line, " ")
		if kind == "ok" {
			_, err = fmt.Sscanf(line, "ok %q %d %d %q", &c.input, &c.want.Wall, &c.want.Counter, &c.want.Node)
		} else {
			var ok bool
			if c.err, ok = sentinels[kind]; !ok {
				tb.Fatalf("timestamps.txt:%d: unknown kind %q", n, kind)
			}
			_, err = fmt.Sscanf(line, kind+" %q", &c.input)
		}
		if err != nil {
			tb.Fatalf("timestamps.txt:%d: %v", n, err)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return cases
}

func TestParseTable(t *testing.T) {
	cases := loadParseCases(t)
	if len(cases) < 30 {
		t.Fatalf("only %d cases loaded", len(cases))
	}
	for _, c := range cases {
		got, err := ParseString(c.input)
		if c.err != nil {
			var pe *ParseError
			if !errors.Is(err, c.err) || !errors.As(err, &pe) {
				t.Errorf("line %d: Parse(%q) = %v, %v; want a *ParseError wrapping %v", c.line, c.input, got, err, c.err)
			}
			if got != (Timestamp{}) {
				t.Errorf("line %d: Parse(%q) returned %v with its error", c.line, c.input, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("line %d: Parse(%q) = %+v, %v; want %+v", c.line, c.input, got, err, c.want)
		}
		// Parse and ParseString agree.
		if got2, err2 := Parse([]byte(c.input)); got2 != got || err2 != nil {
			t.Errorf("line %d: Parse = %+v, %v; ParseString = %+v", c.line, got2, err2, got)
		}
	}
}

func TestParseErrorNamesSegment(t *testing.T) {
	for _, c := range []struct {
		in  string
		seg Segment
	}{
		{"x:0:n", SegmentWall},
		{"1:x:n", SegmentCounter},
		{"1:0:", SegmentNode},
		{"1:0:a:b", SegmentNode},
		{"1", SegmentNone},
	} {
		_, err := ParseString(c.in)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Segment != c.seg || pe.Input != c.in {
			t.Errorf("Parse(%q) error = %#v; want segment %v and the input", c.in, err, c.seg)
		}
		if !strings.Contains(err.Error(), c.seg.String()) {
			t.Errorf("Parse(%q) error %q does not name %v", c.in, err, c.seg)
		}
	}
	// A long bad input is cut in the error, so a hostile peer cannot inflate logs.
	long := strings.Repeat("9", 10000) + ":0:n"
	_, err := ParseString(long)
	var pe *ParseError
	if !errors.As(err, &pe) || len(pe.Input) != maxQuoted || !errors.Is(err, ErrOverflow) {
		t.Errorf("long input: %v (input %d bytes)", err, len(pe.Input))
	}
}

// TestAppendTextMatchesFmt checks AppendText against the SDKs' own formatting verb, for
// boundary and random values, including negative walls that only a Timestamp built in code has.
func TestAppendTextMatchesFmt(t *testing.T) {
	walls := []int64{0, 1, 9, 10, 99999999999999, 100000000000000, 999999999999999,
		1000000000000000, 1696374425000, math.MaxInt64, -1, -12345, math.MinInt64}
	counters := []uint32{0, 1, 9999, 99999, 100000, math.MaxInt32, math.MaxUint32}
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		walls = append(walls, r.Int64N(1<<50), r.Int64())
		counters = append(counters, r.Uint32N(100000), r.Uint32())
	}
	var buf []byte
	for _, w := range walls {
		for _, c := range counters {
			ts := Timestamp{Wall: w, Counter: c, Node: "n-1"}
			want := fmt.Sprintf("%015d:%05d:%s", w, c, "n-1")
			buf = ts.AppendText(buf[:0])
			if string(buf) != want || ts.String() != want {
				t.Fatalf("AppendText(%d, %d) = %q, String %q; want %q", w, c, buf, ts.String(), want)
			}
			if w < 0 {
				continue
			}
			back, err := Parse(buf)
			if err != nil || back != ts {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", buf, back, err, ts)
			}
		}
	}
}

func TestAppendTextAppends(t *testing.T) {
	ts := Timestamp{Wall: 1696374425000, Counter: 1, Node: "StateStore"}
	got := ts.AppendText([]byte("__ts="))
	if string(got) != "__ts=001696374425000:00001:StateStore" {
		t.Fatalf("got %q", got)
	}
}

func TestTextMarshaling(t *testing.T) {
	ts := Timestamp{Wall: 1696374425000, Counter: 3, Node: "CLIENT"}
	b, err := ts.MarshalText()
	if err != nil || string(b) != "001696374425000:00003:CLIENT" {
		t.Fatalf("MarshalText = %q, %v", b, err)
	}
	var back Timestamp
	if err := back.UnmarshalText(b); err != nil || back != ts {
		t.Fatalf("UnmarshalText = %+v, %v", back, err)
	}
	back = ts
	if err := back.UnmarshalText([]byte("1:2")); !errors.Is(err, ErrSegmentCount) || back != ts {
		t.Fatalf("UnmarshalText of bad text = %v and changed the value to %+v", err, back)
	}
}

func TestIsZero(t *testing.T) {
	if !(Timestamp{}).IsZero() {
		t.Error("zero Timestamp is not IsZero")
	}
	for _, ts := range []Timestamp{{Wall: 1}, {Counter: 1}, {Node: "n"}} {
		if ts.IsZero() {
			t.Errorf("%+v IsZero", ts)
		}
	}
}

func TestCompare(t *testing.T) {
	// Sorted ascending; each differs from the next in one part only.
	ordered := []Timestamp{
		{},
		{Wall: 0, Counter: 0, Node: "a"},
		{Wall: 0, Counter: 1, Node: ""},
		{Wall: 0, Counter: math.MaxUint32, Node: "z"},
		{Wall: 1, Counter: 0, Node: "A"},
		{Wall: 1, Counter: 0, Node: "B"},
		{Wall: 1, Counter: 0, Node: "BB"},
		{Wall: 1, Counter: 0, Node: "a"},
		{Wall: 1696374425000, Counter: 0, Node: "StateStore"},
		{Wall: 1696374425000, Counter: 1, Node: "CLIENT"},
		{Wall: 1696374425000, Counter: 1, Node: "StateStore"},
		{Wall: math.MaxInt64, Counter: 0, Node: "a"},
	}
	for i, a := range ordered {
		for j, b := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := Compare(a, b); got != want {
				t.Errorf("Compare(%+v, %+v) = %d; want %d", a, b, got, want)
			}
			if a.Before(b) != (want < 0) || a.After(b) != (want > 0) {
				t.Errorf("Before/After(%+v, %+v) disagree with %d", a, b, want)
			}
		}
	}
}

// TestCompareMatchesPaddedText: for walls of at most 15 digits and counters of at most 5, the
// padded text sorts like Compare (what the SDK authors relied on when they chose the padding).
func TestCompareMatchesPaddedText(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	nodes := []string{"CLIENT", "StateStore", "a", "b"}
	for range 5000 {
		a := Timestamp{Wall: r.Int64N(1e15), Counter: r.Uint32N(1e5), Node: nodes[r.IntN(4)]}
		b := Timestamp{Wall: a.Wall + r.Int64N(3) - 1, Counter: r.Uint32N(3), Node: nodes[r.IntN(4)]}
		if b.Wall < 0 {
			b.Wall = 0
		}
		if got, want := Compare(a, b), strings.Compare(a.String(), b.String()); got != want {
			t.Fatalf("Compare(%v, %v) = %d; text order %d", a, b, got, want)
		}
	}
}

func TestParseAllocs(t *testing.T) {
	inputs := []string{"001696374425000:00001:StateStore", "1696374425000:0:CLIENT",
		"001732271234567:00042:01934f5e-7a2b-7c3d-8e4f-5a6b7c8d9e0f"}
	for _, in := range inputs {
		b := []byte(in)
		if _, err := Parse(b); err != nil { // first sight interns the node id
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = Parse(b) }); n != 0 {
			t.Errorf("Parse(%q): %v allocs; want 0", in, n)
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = ParseString(in) }); n != 0 {
			t.Errorf("ParseString(%q): %v allocs; want 0", in, n)
		}
	}
	ts := Timestamp{Wall: 1696374425000, Counter: 1, Node: "StateStore"}
	buf := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { buf = ts.AppendText(buf[:0]) }); n != 0 {
		t.Errorf("AppendText: %v allocs; want 0", n)
	}
}
