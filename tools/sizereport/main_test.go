package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestSymbolPackage(t *testing.T) {
	cases := map[string]string{
		"github.com/mochi-mqtt/server/v2/packets.init":                  "github.com/mochi-mqtt/server/v2/packets",
		"github.com/mochi-mqtt/server/v2.(*Server).Serve":               "github.com/mochi-mqtt/server/v2",
		"go:itab.*github.com/a/b.T,io.Reader":                           "github.com/a/b",
		"type:.eq.go.etcd.io/bbolt.node":                                "go.etcd.io/bbolt",
		"runtime.mallocgc":                                              "runtime",
		"slices.SortFunc[go.shape.[]string,go.shape.string]":            "slices",
		"crypto/internal/fips140/drbg.memory":                           "crypto/internal/fips140/drbg",
		"github.com/seed0e69bba5/faceagent/agent.(*Agent).Run.func1":    "github.com/seed0e69bba5/faceagent/agent",
		"vendor/golang.org/x/net/idna.idnaValues":                       "vendor/golang.org/x/net/idna",
		"github.com/tinylib/msgp/msgp.(*Reader).ReadString":             "github.com/tinylib/msgp/msgp",
		"type:*github.com/BurntSushi/toml.Decoder":                      "github.com/BurntSushi/toml",
		"github.com/seed0e69bba5/faceagent/resp3.AppendBlob":            "github.com/seed0e69bba5/faceagent/resp3",
		"go.uber.org/goleak.Find":                                       "go.uber.org/goleak",
		"github.com/eclipse/paho.golang/paho.(*Client).Connect":         "github.com/eclipse/paho.golang/paho",
		"github.com/eclipse/paho.golang/autopaho.NewConnection.func2.1": "github.com/eclipse/paho.golang/autopaho",
		"go:func.*": "go:func.*",
		"main.main": "main",
		"github.com/seed0e69bba5/faceagent/internal/sdnotify.(*Notifier).Ready": "github.com/seed0e69bba5/faceagent/internal/sdnotify",
	}
	for in, want := range cases {
		if got := symbolPackage(in); got != want {
			t.Errorf("symbolPackage(%q) = %q, want %q", in, got, want)
		}
	}
}

// Builds this very command for linux/arm and reports on it: the table must charge bytes to the
// standard library and the runtime, and the attributed sizes must not exceed the file (bss
// symbols excluded — crypto alone has a 32 MiB one in every binary that imports crypto/rand).
func TestReportOnRealBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm", "GOARM=7")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	mods := filepath.Join(dir, "mods")
	list := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{if .Module}}{{.Module.Path}}{{else}}std{{end}}", ".")
	list.Env = build.Env
	out, err := list.Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mods, out, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := readModules(mods)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := report(&buf, m, bin); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(bin)
	modTable, _, _ := strings.Cut(buf.String(), "largest packages")
	rows := regexp.MustCompile(`(?m)^\| ([^|]+) \| (-?\d+) \|`).FindAllStringSubmatch(modTable, -1)
	got := map[string]int64{}
	for _, r := range rows {
		n, _ := strconv.ParseInt(r[2], 10, 64)
		got[r[1]] = n
	}
	if got["std"] <= 0 || got["runtime"] <= 0 || got["github.com/seed0e69bba5/faceagent"] <= 0 {
		t.Fatalf("missing rows:\n%s", buf.String())
	}
	var sum int64
	for name, n := range got {
		if n < 0 {
			t.Errorf("negative row %q", name)
		}
		if name != "**file (unstripped)**" {
			sum += n
		}
	}
	if sum != st.Size() || got["**file (unstripped)**"] != st.Size() {
		t.Fatalf("rows add up to %d, file is %d bytes:\n%s", sum, st.Size(), buf.String())
	}
	if !strings.Contains(buf.String(), "| runtime | ") {
		t.Fatalf("no package table:\n%s", buf.String())
	}
	t.Logf("\n%s", buf.String())
}
