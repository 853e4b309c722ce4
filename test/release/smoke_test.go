package release

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

const repoRoot = "../.."

func hasGoFiles(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
	for _, f := range m {
		if !strings.HasSuffix(f, "_test.go") {
			return true
		}
	}
	return false
}

// goBuild builds pkg (relative to the repository root) into out with extra environment.
func goBuild(t *testing.T, out, pkg string, env ...string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./"+pkg)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s (%v): %v\n%s", pkg, env, err, b)
	}
}

// TestARMSmoke runs the armv7 faceagent under qemu-arm with a broker-only config and checks
// that the embedded state store answers a SET and a GET from tools/sscli (a native client:
// what is under test is the ARM daemon).
func TestARMSmoke(t *testing.T) {
	if os.Getenv("FACEAGENT_ARM_SMOKE") == "" {
		t.Skip("armv7 smoke test runs under `make smoke-arm` (FACEAGENT_ARM_SMOKE=1)")
	}
	for _, dir := range []string{"agent/cmd/faceagent", "tools/sscli"} {
		if !hasGoFiles(dir) {
			t.Skipf("SMOKE SKIPPED: %s has no Go files yet; the armv7 smoke test needs the daemon and the state store CLI", dir)
		}
	}
	qemu := qemuFor(t, "arm")

	began := time.Now()
	dir := t.TempDir()
	agentBin := filepath.Join(dir, "faceagent")
	cliBin := filepath.Join(dir, "sscli")
	goBuild(t, agentBin, "agent/cmd/faceagent", "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm", "GOARM=7")
	goBuild(t, cliBin, "tools/sscli")
	t.Logf("built in %v", time.Since(began).Round(time.Millisecond))
	if err := checkELFMachine(agentBin, 40); err != nil { // EM_ARM
		t.Fatal(err)
	}

	addr := testutil.FreeAddr(t)
	cfg := filepath.Join(dir, "agent.toml")
	config := fmt.Sprintf("[agent]\ngateway_id = \"smoke\"\ndata_dir = %q\n\n[broker]\nlisten = %q\n", filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}

	// Readiness: the agent's READY=1 on a notify socket of our own (the unit is Type=notify).
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "notify"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()

	// The Cortex-A7 is the ARMv7 floor of the boards that run this binary (boards' qemu_cpu).
	agent := exec.Command(qemu, "-cpu", "cortex-a7", agentBin, "-config", cfg)
	agent.Env = append(os.Environ(), "NOTIFY_SOCKET="+filepath.Join(dir, "notify"))
	run := startAgent(t, agent)

	start := time.Now()
	waitReady(t, notify, run)
	t.Logf("READY=1 after %v under qemu", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key, value := "smoke/armv7", fmt.Sprintf("answered-%d", time.Now().UnixNano())
	sscli(ctx, t, cliBin, addr, "set", key, value) // exit 0: applied
	if out := sscli(ctx, t, cliBin, addr, "get", key); strings.TrimSpace(out) != value {
		t.Fatalf("sscli get: %q, want %q", out, value)
	}
	t.Logf("SET and GET answered %v after start", time.Since(start).Round(time.Millisecond))

	// A clean stop: SIGTERM, exit status 0.
	run.sigterm(t)
	run.waitCleanExit(t, 60*time.Second)
}

func sscli(ctx context.Context, t *testing.T, bin, addr string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--url", "mqtt://" + addr}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sscli %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// waitReady returns once the agent sent READY=1 — what systemd waits for with Type=notify —
// and fails if the agent exits first or takes longer than two minutes (qemu is slow).
func waitReady(t *testing.T, notify *net.UnixConn, run *agentRun) {
	t.Helper()
	ready := make(chan struct{})
	go func() { // ends when the deadline passes or the test closes notify
		buf := make([]byte, 1024)
		_ = notify.SetReadDeadline(time.Now().Add(2 * time.Minute))
		for {
			n, err := notify.Read(buf)
			if err != nil {
				return
			}
			if bytes.Contains(buf[:n], []byte("READY=1")) {
				close(ready)
				return
			}
		}
	}()
	select {
	case <-ready:
	case <-run.done:
		t.Fatalf("faceagent exited before it was ready: %v", run.err)
	case <-time.After(2 * time.Minute):
		t.Fatal("no READY=1 from faceagent within 2 minutes under qemu")
	}
}

// checkELFMachine verifies that the binary really is for the expected machine (e_machine),
// so the smoke test cannot pass by running a host binary.
func checkELFMachine(path string, machine uint16) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr := make([]byte, 20)
	if _, err := f.Read(hdr); err != nil {
		return err
	}
	if string(hdr[:4]) != "\x7fELF" {
		return fmt.Errorf("%s is not an ELF file", path)
	}
	if got := uint16(hdr[18]) | uint16(hdr[19])<<8; got != machine {
		return fmt.Errorf("%s: ELF machine %d, want %d", path, got, machine)
	}
	return nil
}
