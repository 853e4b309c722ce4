package config

import (
	"strings"
	"testing"
	"time"
)

func TestApplyOverrides(t *testing.T) {
	base, err := Parse("f.toml", []byte("[agent]\ngateway_id = \"g\"\n[broker]\n[dispatch]\nmax_tries = 3\n[[devices]]\nid = \"a\"\n[[devices]]\nid = \"b\"\n"), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ApplyOverrides(base, []byte("[dispatch]\nretry_interval = \"5s\"\n[[devices]]\nid = \"b\"\nheartbeat = false\nmax_tries = 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Dispatch.RetryInterval.Duration != 5*time.Second || got.Dispatch.MaxTries != 3 {
		t.Errorf("dispatch = %+v (max_tries must keep the file's 3)", got.Dispatch)
	}
	if b := got.Device("b"); b.HasHeartbeat() || b.MaxTries != 2 {
		t.Errorf("device b = %+v", b)
	}
	if base.Device("b").HasHeartbeat() != true || base.Dispatch.RetryInterval.Duration != 2*time.Second {
		t.Error("base was changed")
	}
	if same, err := ApplyOverrides(base, nil); err != nil || same.Dispatch != base.Dispatch {
		t.Errorf("empty override: %v", err)
	}

	for _, tt := range []struct{ in, want string }{
		{"[broker]\nlisten = \"x\"\n", "override:1: broker: cannot be overridden remotely"},
		{"[dispatch]\nmax_tries = 0\n", "override:2: dispatch.max_tries: 0 is out of range (1..1000)"},
		{"[dispatch]\nretry_interval = \"soon\"\n", `override:2: dispatch.retry_interval: invalid duration "soon"`},
		{"[[devices]]\nid = \"zz\"\n", `override:2: devices[0].id: "zz" is not a configured device`},
		{"[[devices]]\nid = \"a\"\nport = \"/dev/ttyS0\"\n", "override:3: devices.port: cannot be overridden remotely"},
		{"x = = 1", "override:1: "},
	} {
		_, err := ApplyOverrides(base, []byte(tt.in))
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%q: %v, want prefix %q", tt.in, err, tt.want)
		}
	}
}
