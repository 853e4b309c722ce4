package agent

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/config"
)

// agent.gomemlimit (the file's or the board's) becomes the runtime's soft memory limit;
// without it the runtime's own setting stays.
func TestApplyMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	t.Setenv("GOMEMLIMIT", "")

	limit, source := ApplyMemoryLimit(config.Agent{GoMemLimit: 48 << 20})
	if limit != 48<<20 || source != "config" || debug.SetMemoryLimit(-1) != 48<<20 {
		t.Errorf("from config: %d %s (runtime %d)", limit, source, debug.SetMemoryLimit(-1))
	}

	debug.SetMemoryLimit(math.MaxInt64)
	if limit, source := ApplyMemoryLimit(config.Agent{}); limit != math.MaxInt64 || source != "unset" {
		t.Errorf("unset: %d %s", limit, source)
	}

	// The environment wins (the runtime read it at start; the agent leaves it alone).
	t.Setenv("GOMEMLIMIT", "100MiB")
	debug.SetMemoryLimit(100 << 20)
	if limit, source := ApplyMemoryLimit(config.Agent{GoMemLimit: 48 << 20}); limit != 100<<20 || source != "GOMEMLIMIT" {
		t.Errorf("environment: %d %s", limit, source)
	}
}

// A board profile's gomemlimit reaches agent.gomemlimit, and the file's own value wins.
func TestMemoryLimitFromBoard(t *testing.T) {
	c, err := config.Parse("b.toml", []byte("[agent]\ngateway_id = \"g\"\nboard = \"imx6ull-armv7\"\n[broker]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.GoMemLimit != 96<<20 {
		t.Errorf("imx6ull-armv7: gomemlimit %d, want 96MiB", c.Agent.GoMemLimit)
	}
	c, err = config.Parse("b.toml", []byte("[agent]\ngateway_id = \"g\"\nboard = \"imx6ull-armv7\"\ngomemlimit = \"64MiB\"\n[broker]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.GoMemLimit != 64<<20 {
		t.Errorf("file over board: gomemlimit %d, want 64MiB", c.Agent.GoMemLimit)
	}
}
