package resp3

import (
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("resp3.seed", 0, "seed for the property tests (default: RESP3_SEED, else time)")

// testSeed picks the property tests' seed — -resp3.seed, else $RESP3_SEED, else the clock —
// and logs it, so a failure can be replayed with `go test -run X ./resp3 -resp3.seed N`.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		if s := os.Getenv("RESP3_SEED"); s != "" {
			var err error
			if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
				t.Fatalf("RESP3_SEED=%q: %v", s, err)
			}
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: -resp3.seed %d or RESP3_SEED=%d)", seed, seed, seed)
	return seed
}

// gen generates random values; value appends the tokens of one whole value in pre-order.
type gen struct {
	rng *rand.Rand
}

func (g gen) bytes(maxLen int, lineSafe bool) []byte {
	b := make([]byte, g.rng.IntN(maxLen+1))
	for i := range b {
		b[i] = byte(g.rng.Uint32())
		if lineSafe {
			for b[i] == '\r' || b[i] == '\n' {
				b[i] = byte(g.rng.Uint32())
			}
		} else if g.rng.IntN(6) == 0 {
			b[i] = "\r\n"[g.rng.IntN(2)]
		}
	}
	return b
}

func (g gen) scalar() Value {
	switch g.rng.IntN(13) {
	case 0:
		return Value{Kind: BlobString, Str: g.bytes(200, false)}
	case 1:
		return Value{Kind: BlobString, Len: -1}
	case 2:
		return Value{Kind: SimpleString, Str: g.bytes(30, true)}
	case 3:
		return Value{Kind: SimpleError, Str: g.bytes(30, true)}
	case 4:
		n := int64(g.rng.Uint64())
		switch g.rng.IntN(4) {
		case 0:
			n = int64(g.rng.IntN(200)) - 100
		case 1:
			n = math.MinInt64 + int64(g.rng.IntN(3))
		case 2:
			n = math.MaxInt64 - int64(g.rng.IntN(3))
		}
		return Value{Kind: Integer, Int: n}
	case 5:
		return Value{Kind: Null}
	case 6:
		return Value{Kind: Boolean, Int: int64(g.rng.IntN(2))}
	case 7:
		f := math.Float64frombits(g.rng.Uint64())
		if g.rng.IntN(2) == 0 {
			f = g.rng.NormFloat64() * 1000
		}
		enc := AppendDouble(nil, f)
		return Value{Kind: Double, Str: enc[1 : len(enc)-2]}
	case 8:
		digits := []byte(strconv.FormatUint(g.rng.Uint64(), 10) + strconv.FormatUint(g.rng.Uint64(), 10))
		if g.rng.IntN(2) == 0 {
			digits = append([]byte{'-'}, digits...)
		}
		return Value{Kind: BigNumber, Str: digits}
	case 9:
		return Value{Kind: BlobError, Str: g.bytes(50, false)}
	case 10:
		formats := []string{"txt", "mkd"}
		return Value{Kind: VerbatimString, Int: verbatimFormat(formats[g.rng.IntN(2)]), Str: g.bytes(50, false)}
	case 11:
		return Value{Kind: Array, Len: -1}
	}
	return Value{Kind: Array} // empty array
}

func (g gen) value(dst []Value, depth int) []Value {
	if depth >= 5 || g.rng.IntN(3) != 0 {
		return append(dst, g.scalar())
	}
	n := g.rng.IntN(5)
	k := []Kind{Array, Map, Set, Push, Attribute}[g.rng.IntN(5)]
	dst = append(dst, Value{Kind: k, Len: n})
	elems := n
	if k == Map || k == Attribute {
		elems = 2 * n
	}
	for range elems {
		dst = g.value(dst, depth+1)
	}
	if k == Attribute {
		dst = g.value(dst, depth) // the annotated value
	}
	return dst
}

// TestRoundTripProperty: encoding random value trees and reading them back gives the same
// tokens, and re-encoding what was read gives the same bytes.
func TestRoundTripProperty(t *testing.T) {
	seed := testSeed(t)
	g := gen{rand.New(rand.NewPCG(seed, 1))}
	for i := range 3000 {
		want := g.value(nil, 0)
		var enc []byte
		for _, v := range want {
			enc = AppendValue(enc, v)
		}
		got, err := ParseTree(enc, nil)
		if err != nil {
			t.Fatalf("seed %d case %d: ParseTree(%q): %v", seed, i, enc, err)
		}
		if len(got) != len(want) {
			t.Fatalf("seed %d case %d: %d tokens, want %d", seed, i, len(got), len(want))
		}
		for j := range got {
			w := want[j]
			if (w.Kind == BlobString || w.Kind == BlobError || w.Kind == VerbatimString) && w.Str == nil && w.Len != -1 {
				w.Str = []byte{}
			}
			if w.Kind == SimpleString || w.Kind == SimpleError {
				if w.Str == nil {
					w.Str = []byte{}
				}
			}
			if !equalValue(got[j], w) {
				t.Fatalf("seed %d case %d token %d: got %+v, want %+v", seed, i, j, got[j], w)
			}
		}
		var again []byte
		for _, v := range got {
			again = AppendValue(again, v)
		}
		if string(again) != string(enc) {
			t.Fatalf("seed %d case %d: re-encoded %q, want %q", seed, i, again, enc)
		}
		if rest, err := Skip(enc); err != nil || len(rest) != 0 {
			t.Fatalf("seed %d case %d: Skip: %v", seed, i, err)
		}
	}
}

// TestCommandRoundTripProperty: random commands encoded with the writers parse back to the
// same arguments.
func TestCommandRoundTripProperty(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	args := make([][]byte, 0, 16)
	for i := range 3000 {
		want := randomArgs(rng)
		enc := appendCommand(nil, want)
		got, err := ParseCommand(enc, args)
		if err != nil || !equalArgs(got, want) {
			t.Fatalf("seed %d case %d: ParseCommand(%q) = %q, %v; want %q", seed, i, enc, got, err, want)
		}
	}
}
