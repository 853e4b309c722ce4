package metrics

import (
	"math/rand/v2"
	"regexp"
	"testing"
)

// validName must accept exactly what these expressions accept (the Prometheus name grammar;
// the regexp package stays out of the binary).
func TestValidNameMatchesRegexp(t *testing.T) {
	nameRef := regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelRef := regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	inputs := []string{"", "a", "_", ":", "9", "a9", ":a:9", "__x", "a-b", "é", "a\xff", "faceagent_up"}
	pieces := []string{"a", "Z", "_", ":", "0", "9", "-", ".", "é", "\xff", "@", "[", "`", "{", "/"}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		s := ""
		for k := r.IntN(6); k > 0; k-- {
			s += pieces[r.IntN(len(pieces))]
		}
		inputs = append(inputs, s)
	}
	for _, s := range inputs {
		if got, want := validName(s, true), nameRef.MatchString(s); got != want {
			t.Fatalf("validName(%q, metric) = %v, regexp says %v", s, got, want)
		}
		if got, want := validName(s, false), labelRef.MatchString(s); got != want {
			t.Fatalf("validName(%q, label) = %v, regexp says %v", s, got, want)
		}
	}
}
