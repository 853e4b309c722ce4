package testutil

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// CrashChild runs one round of a crash test: it starts the running test binary again as a
// child (reexec: the binary's TestMain, seeing one of env, runs the child's workload instead
// of the tests). The child must print "ready" as its first line on stdout, within
// readyTimeout; every later line (an id the child has seen acknowledged) is handed to ack.
// killAfter after "ready" the child is sent SIGKILL; CrashChild then waits for it, fails t
// unless the child ended by that SIGKILL, and returns the number of lines handed to ack.
func CrashChild(t testing.TB, env []string, readyTimeout, killAfter time.Duration, ack func(line string)) int {
	t.Helper()
	cmd, out := reexec(t, env)
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case l := <-lines:
		if l != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child %v said %q", env, l)
		}
	case <-time.After(readyTimeout):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child %v did not start", env)
	}
	kill := time.After(killAfter)
	n := 0
collect:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				break collect
			}
			ack(l)
			n++
		case <-kill:
			cmd.Process.Signal(syscall.SIGKILL)
			kill = nil
		}
	}
	cmd.Wait()
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || st.Signal() != syscall.SIGKILL {
		t.Fatalf("child %v ended with %v, not by SIGKILL", env, cmd.ProcessState)
	}
	return n
}

// reexec starts the running test binary again as a child, os.Args[0] with -test.run=^$ so
// that it runs no test (its TestMain or an init function, seeing one of env, runs the
// child's workload), with env added to the parent's environment and its stderr passed
// through, and returns it with its stdout. It fails t if the child cannot start.
//
// The child is started by os.Args[0], not os.Executable: under `make test-arm`,
// .ci/qemu-exec sets argv[0] to a host shim that starts qemu on the ARM binary again, which
// is what lets a test binary running under qemu-user re-execute itself.
func reexec(t testing.TB, env []string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}
