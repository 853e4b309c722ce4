package hlc

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, agrees with a slow reference parser built from
// strings.Split and strconv on what it accepts, and round-trips: what parses re-formats (padded)
// and re-parses equal. Seeded from testdata/timestamps.txt.
//
//	go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 20s ./hlc
func FuzzParse(f *testing.F) {
	for _, c := range loadParseCases(f) {
		f.Add([]byte(c.input))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		got, err := Parse(in)
		if !bytes.Equal(in, orig) {
			t.Fatalf("Parse modified its input")
		}
		want, refOK := referenceParse(string(in))
		if (err == nil) != refOK {
			t.Fatalf("Parse(%q) = %+v, %v; reference accepts: %v", in, got, err, refOK)
		}
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || got != (Timestamp{}) {
				t.Fatalf("Parse(%q): error %#v with value %+v", in, err, got)
			}
			return
		}
		if got != want {
			t.Fatalf("Parse(%q) = %+v; reference %+v", in, got, want)
		}
		text := got.AppendText(nil)
		back, err := Parse(text)
		if err != nil || back != got {
			t.Fatalf("Parse(%q) = %+v; its text %q re-parses as %+v, %v", in, got, text, back, err)
		}
		if s, _ := ParseString(got.String()); s != got {
			t.Fatalf("String round trip of %+v gives %+v", got, s)
		}
	})
}

// referenceParse is the obvious, slow parser: three segments, digits only, in range.
func referenceParse(s string) (Timestamp, bool) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 || parts[2] == "" {
		return Timestamp{}, false
	}
	for _, p := range parts[:2] {
		if p == "" || strings.TrimLeft(p, "0123456789") != "" {
			return Timestamp{}, false
		}
	}
	wall, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return Timestamp{}, false
	}
	counter, err := strconv.ParseUint(parts[1], 10, 32)
	if err != nil {
		return Timestamp{}, false
	}
	return Timestamp{Wall: wall, Counter: uint32(counter), Node: parts[2]}, true
}
