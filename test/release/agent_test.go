package release

import (
	"bytes"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// agentRun is a started faceagent: done closes once it has exited, err then holds Wait's result.
type agentRun struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startAgent starts cmd with its output captured. At cleanup it kills the agent if it still
// runs (a no-op after a clean stop) and logs the output if the test failed.
func startAgent(t *testing.T, cmd *exec.Cmd) *agentRun {
	t.Helper()
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &agentRun{cmd: cmd, done: make(chan struct{})}
	go func() { a.err = cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-a.done
		if t.Failed() {
			t.Logf("faceagent output:\n%s", logs.String())
		}
	})
	return a
}

// sigterm sends SIGTERM, what systemd sends on stop.
func (a *agentRun) sigterm(t *testing.T) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

// waitCleanExit fails unless the agent exits with status 0 within the timeout.
func (a *agentRun) waitCleanExit(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-a.done:
		if a.err != nil {
			t.Fatalf("faceagent did not exit cleanly on SIGTERM: %v", a.err)
		}
	case <-time.After(within):
		t.Fatalf("faceagent did not stop within %v of SIGTERM", within)
	}
}
