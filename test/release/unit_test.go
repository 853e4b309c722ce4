package release

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/boards"
)

const unitPath = "../../configs/faceagent.service"

// unitKeys parses a unit file into section -> key -> values (keys may repeat).
func unitKeys(t *testing.T, data []byte) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", unitPath, n, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// The requirements for the unit, one by one.
func TestServiceUnitRequirements(t *testing.T) {
	data, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	u := unitKeys(t, data)
	svc := u["Service"]
	want := map[string]string{
		"Type":                "notify",
		"Restart":             "on-failure",
		"NoNewPrivileges":     "yes",
		"ProtectSystem":       "strict",
		"SupplementaryGroups": "dialout",
		"User":                "faceagent",
		"StandardOutput":      "journal",
		"StandardError":       "journal",
		"StateDirectory":      "faceagent",
	}
	for k, v := range want {
		if got := svc[k]; len(got) != 1 || got[0] != v {
			t.Errorf("[Service] %s = %v, want %q", k, got, v)
		}
	}
	if w := svc["WatchdogSec"]; len(w) != 1 || w[0] == "0" || w[0] == "" {
		t.Errorf("WatchdogSec = %v, want a non-zero interval", w)
	}
	if !strings.Contains(strings.Join(svc["ExecStart"], ""), "-config /etc/faceagent/agent.toml") {
		t.Errorf("ExecStart = %v", svc["ExecStart"])
	}
	// Every board's data_dir must be writable under ProtectSystem=strict.
	rw := strings.Fields(strings.Join(svc["ReadWritePaths"], " "))
	all, err := boards.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		found := false
		for _, path := range rw {
			if path == p.DataDir {
				found = true
			}
		}
		if !found {
			t.Errorf("board %s: data_dir %s is not in ReadWritePaths %v", p.Name, p.DataDir, rw)
		}
	}
	if got := u["Install"]["WantedBy"]; len(got) != 1 || got[0] != "multi-user.target" {
		t.Errorf("[Install] WantedBy = %v", got)
	}
}

// systemd-analyze verify accepts the unit without a single warning. ExecStart must name an
// existing executable for verify, so a copy points it at a stand-in binary.
func TestServiceUnitVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed; unit not verified")
	}
	data, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stand := filepath.Join(dir, "faceagent")
	if err := os.WriteFile(stand, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(dir, "faceagent.service")
	patched := bytes.ReplaceAll(data, []byte("/usr/local/bin/faceagent"), []byte(stand))
	if err := os.WriteFile(unit, patched, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", unit).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}

	// The check has teeth: a misspelt key is reported.
	bad := bytes.Replace(patched, []byte("Type=notify"), []byte("Type=notify\nWatchdogSecs=30s"), 1)
	if err := os.WriteFile(unit, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command(sa, "verify", unit).CombinedOutput(); !bytes.Contains(out, []byte("WatchdogSecs")) {
		t.Fatalf("verify did not report an unknown key: %s", out)
	}
}
