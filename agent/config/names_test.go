package config

import (
	"math/rand/v2"
	"regexp"
	"testing"
)

// The hand-written matchers must accept exactly what these expressions accept (the expressions
// they replace; kept here only, so the regexp package stays out of the binary).
var (
	lineErrRef = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)
	quotedRef  = regexp.MustCompile(`"([^"]*)"`)
	idRef      = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
)

// matcherInputs returns the fixed cases plus n strings drawn from pieces that make the
// expressions' edges likely (seeded: the same strings every run).
func matcherInputs(fixed, pieces []string, n int) []string {
	r := rand.New(rand.NewPCG(1, 2))
	out := append([]string(nil), fixed...)
	for range n {
		s := ""
		for k := r.IntN(8); k > 0; k-- {
			s += pieces[r.IntN(len(pieces))]
		}
		out = append(out, s)
	}
	return out
}

func TestSplitLineErrorMatchesRegexp(t *testing.T) {
	fixed := []string{
		"", "toml: line 3 (last key \"a.b\"): expected x",
		"toml: line 12 (last key \"\"): toml: nested",
		"toml: line  3 (last key \"a\"): x", "toml: line 3 (last key \"a\"):x",
		"toml: line 3 (last key \"a\"): two\nlines", "toml: line 3 (last key \"a\"b\"): x",
		"toml: line 3 (last key \"a\"): ", "toml: line x (last key \"a\"): y",
		"xtoml: line 3 (last key \"a\"): y", "toml: line 3 (last key \"ä\xff\"): \xffz",
		"toml: line 99999999999999999999 (last key \"k\"): m",
	}
	pieces := []string{"toml: line ", "1", "42", " (last key \"", "\"", "): ", "a.b", "\n", " ", "x", "toml: ", "\xff", "é"}
	for _, s := range matcherInputs(fixed, pieces, 20000) {
		line, key, msg, ok := splitLineError(s)
		m := lineErrRef.FindStringSubmatch(s)
		if ok != (m != nil) || ok && (line != m[1] || key != m[2] || msg != m[3]) {
			t.Fatalf("splitLineError(%q) = %q %q %q %v; regexp says %q", s, line, key, msg, ok, m)
		}
	}
}

func TestFirstQuotedMatchesRegexp(t *testing.T) {
	fixed := []string{"", `"`, `""`, `a "b" "c"`, `"b`, `x"y"z`, "\"\n\""}
	for _, s := range matcherInputs(fixed, []string{`"`, "a", " ", "\n", "é", "\xff"}, 20000) {
		got, ok := firstQuoted(s)
		m := quotedRef.FindStringSubmatch(s)
		if ok != (m != nil) || ok && got != m[1] {
			t.Fatalf("firstQuoted(%q) = %q %v; regexp says %q", s, got, ok, m)
		}
	}
}

func TestValidIDMatchesRegexp(t *testing.T) {
	fixed := []string{"", "gw-1", "a.b_c-D9", "a/b", "a b", "+", "#", "é", "a\x00", "a\n", "\xff"}
	for _, s := range matcherInputs(fixed, []string{"a", "Z", "9", ".", "_", "-", "/", " ", "é", "\x7f", "\xff", "@", "[", "`", "{"}, 20000) {
		if got, want := validID(s), idRef.MatchString(s); got != want {
			t.Fatalf("validID(%q) = %v, regexp says %v", s, got, want)
		}
	}
}
