package testutil

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FreeAddr returns a loopback address with a port that was free a moment ago. The port is
// released before returning, so a racing process could take it; tests that start a server on
// it should fail loudly rather than retry forever.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// MosquittoPath finds Debian's mosquitto binary. In CI (CI=true) a missing binary fails
// the test, because .ci/run installs it; elsewhere the test is skipped with the reason.
func MosquittoPath(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"mosquitto", "/usr/sbin/mosquitto"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("mosquitto not found: .ci/run should have installed Debian's mosquitto package")
	}
	t.Skip("mosquitto not found (apt-get install mosquitto); interop test skipped")
	return ""
}

// Mosquitto is a mosquitto process started for one test.
type Mosquitto struct {
	Addr string // host:port on 127.0.0.1
	URL  string // mqtt://host:port
	cmd  *exec.Cmd
	conf string
	log  *os.File
	t    testing.TB
}

// StartMosquitto starts mosquitto on a free loopback port with anonymous access and waits
// until it accepts connections. It is stopped when the test ends.
func StartMosquitto(t testing.TB) *Mosquitto {
	t.Helper()
	bin := MosquittoPath(t)
	m := &Mosquitto{t: t}
	m.start(bin, FreeAddr(t))
	t.Cleanup(m.Stop)
	return m
}

func (m *Mosquitto) start(bin, addr string) {
	t := m.t
	dir := t.TempDir()
	_, port, _ := net.SplitHostPort(addr)
	m.conf = filepath.Join(dir, "mosquitto.conf")
	conf := strings.Join([]string{
		"listener " + port + " 127.0.0.1",
		"allow_anonymous true",
		"persistence false",
		"log_dest stderr",
		"max_inflight_messages 0",
		"max_queued_messages 100000",
	}, "\n") + "\n"
	if err := os.WriteFile(m.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "mosquitto.log"))
	if err != nil {
		t.Fatal(err)
	}
	m.log = logf
	m.Addr = addr
	m.URL = "mqtt://" + addr
	m.cmd = exec.Command(bin, "-c", m.conf)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start mosquitto: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			m.Stop()
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("mosquitto did not accept connections on %s: %v\n%s", addr, err, log)
		}
		time.Sleep(20 * time.Millisecond) // polling a port that has no readiness event
	}
}

// Stop kills mosquitto and waits for it. Safe to call twice.
func (m *Mosquitto) Stop() {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
	m.cmd = nil
	m.log.Close()
}

// Restart stops mosquitto and starts it again on the same address, for tests of reconnects.
func (m *Mosquitto) Restart() {
	m.t.Helper()
	bin := MosquittoPath(m.t)
	m.Stop()
	m.start(bin, m.Addr)
}

// String names the broker in test logs.
func (m *Mosquitto) String() string { return fmt.Sprintf("mosquitto@%s", m.Addr) }
