package boards

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// lowerName must accept exactly what these expressions accept (the regexp package stays out of
// the binary).
func TestLowerNameMatchesRegexp(t *testing.T) {
	nameRef := regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	cpuRef := regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,31}$`)
	inputs := []string{"", "a", "-", "-a", "rpi3-armv7", "cortex-a7", "cortex.a7", "A", "é",
		strings.Repeat("a", 32), strings.Repeat("a", 33), strings.Repeat("a", 63), strings.Repeat("a", 64),
		"a" + strings.Repeat("-", 62), "a" + strings.Repeat(".", 31)}
	pieces := []string{"a", "z", "0", "9", "-", ".", "_", "A", "é", "\xff", "/", "aaaaaaaaaaaaaaaa"}
	r := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		s := ""
		for k := r.IntN(8); k > 0; k-- {
			s += pieces[r.IntN(len(pieces))]
		}
		inputs = append(inputs, s)
	}
	for _, s := range inputs {
		if got, want := lowerName(s, "-", 63), nameRef.MatchString(s); got != want {
			t.Fatalf("board name %q: lowerName = %v, regexp says %v", s, got, want)
		}
		if got, want := lowerName(s, ".-", 32), cpuRef.MatchString(s); got != want {
			t.Fatalf("qemu cpu %q: lowerName = %v, regexp says %v", s, got, want)
		}
	}
}
