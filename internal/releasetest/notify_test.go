package releasetest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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

	var logs bytes.Buffer
	agent := exec.Command(bin, "-config", cfg)
	// 400 ms watchdog: keepalives every 200 ms. WATCHDOG_PID is left unset (systemd sets it to
	// the main PID, which we cannot know before the start).
	agent.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=400000")
	agent.Stdout, agent.Stderr = &logs, &logs
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = agent.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("faceagent output:\n%s", logs.String())
		}
	}()

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

	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expect("STOPPING=1")
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("faceagent did not exit within a minute of SIGTERM")
	}
}
