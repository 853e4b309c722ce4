package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/boards"
)

func qemuFor(t *testing.T, arch string) string {
	t.Helper()
	env, name := "QEMU_ARM", "qemu-arm-static"
	if arch == "arm64" {
		env, name = "QEMU_ARM64", "qemu-aarch64-static"
	}
	if q := os.Getenv(env); q != "" {
		return q
	}
	q, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: apt-get install qemu-user-static", name)
	}
	return q
}

// TestBoardCPUs builds each board's faceagent with the board's own GOOS/GOARCH/GOARM and runs
// `faceagent -version` on the board's emulated core (boards' qemu_cpu). A profile with a GOARM
// too new for its CPU fails here with SIGILL. The negative control shows the check has teeth:
// the GOARM=7 binary must not run on the Pi Zero's ARM1176.
func TestBoardCPUs(t *testing.T) {
	if os.Getenv("FACEAGENT_ARM_SMOKE") == "" {
		t.Skip("runs under `make smoke-arm` (FACEAGENT_ARM_SMOKE=1)")
	}
	if !hasGoFiles("agent/cmd/faceagent") {
		t.Skip("SKIPPED: agent/cmd/faceagent has no Go files yet")
	}
	all, err := boards.All()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	built := map[string]string{} // target -> binary
	for _, p := range all {
		bin, ok := built[p.Target()]
		if !ok {
			bin = filepath.Join(dir, strings.ReplaceAll(p.Target(), "/", "-"))
			goBuild(t, bin, "agent/cmd/faceagent", p.Environ()...)
			built[p.Target()] = bin
		}
		out, err := exec.Command(qemuFor(t, p.GOARCH), "-cpu", p.QEMUCPU, bin, "-version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "linux/"+p.GOARCH) {
			t.Errorf("%s: faceagent for %s on %s: %v\n%s", p.Name, p.Target(), p.QEMUCPU, err, out)
			continue
		}
		t.Logf("%s: %s on %s: %s", p.Name, p.Target(), p.QEMUCPU, strings.TrimSpace(string(out)))
	}
	if armv7, ok := built["linux/arm/7"]; ok {
		if out, err := exec.Command(qemuFor(t, "arm"), "-cpu", "arm1176", armv7, "-version").CombinedOutput(); err == nil {
			t.Errorf("the GOARM=7 binary ran on an ARM1176 (%s): the CPU check cannot catch a wrong GOARM", out)
		}
	}
}
