package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse: no input panics; every accepted config prints as TOML that loads back to the
// same config; every error names a position in the file ("name:LINE: " or "name: ").
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.toml")
	seeds = append(seeds, filepath.Join("..", "..", "configs", "agent.toml"))
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("[agent]\ngateway_id = \"g\"\n[broker]\n[[devices]]\nid = \"a\"\nretry_interval = \"x\"\n"))
	f.Add([]byte("a = [\n1,\n2]\nb = '''\nx = 1\n'''\n[[c.d]]\n[[c.d]]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fz", data, &Options{
			LookupEnv: noEnv,
			ReadFile:  func(string) ([]byte, error) { return []byte("secret"), nil },
			Board:     func(string) ([]byte, error) { return data, nil },
		})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fz") && !strings.HasPrefix(err.Error(), "board ") {
				t.Fatalf("error without a position: %q", err)
			}
			return
		}
		var out bytes.Buffer
		if err := c.WriteTOML(&out); err != nil {
			t.Fatalf("WriteTOML: %v", err)
		}
		c2, err := Parse("fz", out.Bytes(), &Options{LookupEnv: noEnv, ReadFile: func(string) ([]byte, error) { return []byte("secret"), nil }})
		if err != nil {
			t.Fatalf("printed config does not load: %v\n%s", err, out.String())
		}
		c.Agent.Board, c2.Agent.Board = "", "" // the board was merged in already
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip differs\n%+v\n%+v", c, c2)
		}
	})
}

// FuzzApplyOverrides: no override panics, an error always names a position, and an
// accepted override yields a configuration that prints and loads back.
func FuzzApplyOverrides(f *testing.F) {
	base, err := Load("testdata/serial.toml", &Options{LookupEnv: noEnv})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("[dispatch]\nretry_interval = \"5s\"\n[[devices]]\nid = \"m1\"\nheartbeat = false\n"))
	f.Add([]byte("[dispatch]\nmax_tries = 0\n"))
	f.Add([]byte("[broker]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ApplyOverrides(base, data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "override") {
				t.Fatalf("error without a position: %q", err)
			}
			return
		}
		var out bytes.Buffer
		if err := c.WriteTOML(&out); err != nil {
			t.Fatal(err)
		}
		if _, err := Parse("fz", out.Bytes(), &Options{LookupEnv: noEnv}); err != nil {
			t.Fatalf("overridden config does not load: %v\n%s", err, out.String())
		}
	})
}
