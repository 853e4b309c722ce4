package attack

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// binary is the faceagent under attack, built once by TestMain as it ships (no race
// detector: its memory and descriptors are what the bounds are about).
var binary string

// long is the long form (FACEAGENT_ATTACK_LONG=1, make attack): more of every attack.
var long = os.Getenv("FACEAGENT_ATTACK_LONG") != ""

// scale returns short in the short form and long in the long form.
func scale(short, longN int) int {
	if long {
		return longN
	}
	return short
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "faceagent-attack")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "faceagent")
	build := exec.Command("go", "build", "-o", binary, "../../agent/cmd/faceagent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build faceagent:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
