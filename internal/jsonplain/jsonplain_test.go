package jsonplain

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

// parseFlat reads an object of plain strings and integers into a map, the values as
// encoding/json with UseNumber gives them (string, or json.Number); the last of a
// repeated key wins.
func parseFlat(b []byte) (map[string]any, bool) {
	m := map[string]any{}
	p := NewScanner(b, 64)
	ok := p.Object(func(key []byte) bool {
		if p.i < len(p.b) && p.b[p.i] == '"' {
			var s string
			if !p.Str(&s) {
				return false
			}
			m[string(key)] = s
			return true
		}
		n, ok := p.Int64()
		m[string(key)] = json.Number(strconv.FormatInt(n, 10))
		return ok
	})
	return m, ok && p.End()
}

// FuzzScannerSameAsEncodingJSON: what the scanner accepts, encoding/json reads to the same
// values.
func FuzzScannerSameAsEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, ` { "a" : "b" , "n" : -12 } `, `{"a":"é","a":"x"}`, `{"n":9223372036854775807,"m":-9223372036854775808}`,
		`{"n":01}`, `{"n":1e3}`, `{"s":"a\"b"}`, "{\"s\":\"\xff\"}", `{"s":"a` + "\x01" + `"}`, `{"n":-0}`, `[1]`, `{"a":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parseFlat(b)
		if !ok {
			return
		}
		var want map[string]any
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if err := d.Decode(&want); err != nil || d.More() {
			t.Fatalf("scanner took %q, encoding/json refuses it: %v", b, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: scanner %v, encoding/json %v", b, got, want)
		}
		for k, v := range want {
			if n, isNum := v.(json.Number); isNum {
				i, err := n.Int64()
				if err != nil || got[k] != json.Number(strconv.FormatInt(i, 10)) {
					t.Fatalf("%q: %s: scanner %v, encoding/json %v", b, k, got[k], v)
				}
				continue
			}
			if got[k] != v {
				t.Fatalf("%q: %s: scanner %v, encoding/json %v", b, k, got[k], v)
			}
		}
	})
}

// TestStrSharesSmallInputs: the strings of an input up to shareUpTo share one copy of it;
// a larger one gets a copy per string.
func TestStrSharesSmallInputs(t *testing.T) {
	b := []byte(`{"a":"xy","b":"zw"}`)
	parse := func(shareUpTo int) func() {
		return func() {
			var x, y string
			p := NewScanner(b, shareUpTo)
			ok := p.Object(func(key []byte) bool {
				if string(key) == "a" {
					return p.Str(&x)
				}
				return p.Str(&y)
			})
			if !ok || !p.End() || x != "xy" || y != "zw" {
				t.Fatalf("parsed %q, %q (ok %v)", x, y, ok)
			}
		}
	}
	if n := testing.AllocsPerRun(100, parse(64)); n > 2 { // the shared copy (and the closure)
		t.Errorf("%v allocations when shared", n)
	}
	if n := testing.AllocsPerRun(100, parse(0)); n < 2 {
		t.Errorf("%v allocations when not shared: want a copy per string", n)
	}
}

// RawStr gives a plain string's contents without a copy, and refuses what Str refuses.
func TestRawStr(t *testing.T) {
	b := []byte(`"aGVsbG8="`)
	p := NewScanner(b, 0)
	raw, ok := p.Raw()
	if !ok || string(raw) != "aGVsbG8=" || !p.End() || &raw[0] != &b[1] {
		t.Fatalf("RawStr: %q %v", raw, ok)
	}
	for _, bad := range []string{`"a\nb"`, `"cut`, `7`, `"\xff"`} {
		p := NewScanner([]byte(bad), 0)
		if raw, ok := p.Raw(); ok {
			t.Errorf("RawStr(%q) = %q", bad, raw)
		}
	}
}
