package release

import (
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

// TestDaemonSpeaksNotifyProtocol runs the native faceagent the way the unit does (Type=notify,
// WatchdogSec) against a notify socket of our own: READY=1 once it serves, WATCHDOG=1
// keepalives at half of WATCHDOG_USEC, STOPPING=1 on SIGTERM, then exit status 0.
func TestDaemonSpeaksNotifyProtocol(t *testing.T) {
	if !hasGoFiles("agent/cmd/faceagent") {
		t.Skip("SKIPPED: agent/cmd/faceagent has no Go files yet")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "faceagent")
	goBuild(t, bin, "agent/cmd/faceagent", "CGO_ENABLED=0")
	cfg := filepath.Join(dir, "agent.toml")
	config := fmt.Sprintf("[agent]\ngateway_id = \"notify\"\ndata_dir = %q\n\n[broker]\nlisten = %q\n",
		filepath.Join(dir, "data"), testutil.FreeAddr(t))
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()

	agent := exec.Command(bin, "-config", cfg)
	// 400 ms watchdog: keepalives every 200 ms. WATCHDOG_PID is left unset (systemd sets it to
	// the main PID, which we cannot know before the start).
	agent.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=400000")
	run := startAgent(t, agent)

	// expect reads datagrams until one contains want, or fails after a minute.
	expect := func(want string) {
		t.Helper()
		buf := make([]byte, 4096)
		_ = notify.SetReadDeadline(time.Now().Add(time.Minute))
		for {
			n, err := notify.Read(buf)
			if err != nil {
				t.Fatalf("waiting for %s: %v", want, err)
			}
			if strings.Contains(string(buf[:n]), want) {
				return
			}
		}
	}
	expect("READY=1")
	expect("WATCHDOG=1")
	expect("WATCHDOG=1") // keepalives repeat, not a single ping

	run.sigterm(t)
	expect("STOPPING=1")
	run.waitCleanExit(t, time.Minute)
}
