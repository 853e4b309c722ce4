package testutil

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Child is a re-executed test binary that the test drives while it runs (CrashChild is for
// children that are only killed): its stdout comes line by line, and it is killed when the
// test ends.
type Child struct {
	t     testing.TB
	cmd   *exec.Cmd
	lines chan string
}

// StartChild starts the running test binary again as a child (reexec, as CrashChild: the
// package's TestMain or an init function, seeing one of env, runs the child's workload),
// with env added to the parent's environment and its stderr passed through. The child is
// SIGKILLed and waited for when t ends.
func StartChild(t testing.TB, env ...string) *Child {
	t.Helper()
	cmd, out := reexec(t, env)
	return startedChild(t, cmd, out)
}

// startedChild reads the lines of the started cmd from out, and kills it when t ends.
func startedChild(t testing.TB, cmd *exec.Cmd, out io.Reader) *Child {
	c := &Child{t: t, cmd: cmd, lines: make(chan string, 4096)}
	go func() {
		defer close(c.lines)
		if rc, ok := out.(io.Closer); ok {
			defer rc.Close() // the reading end, once the child closed the writing one
		}
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody waits for that much: dropped
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return c
}

// StartProgram starts the program at path with args as a Child: its stdout and stderr
// (a daemon's log) come line by line to WaitLine, and it is SIGKILLed and waited for when t
// ends. env is added to the parent's environment.
func StartProgram(t testing.TB, path string, args []string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		t.Fatal(err)
	}
	w.Close() // the child holds its own copy: r ends when the child does
	return startedChild(t, cmd, r)
}

// Pid is the child's process id (its /proc/<pid> while it runs).
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Kill sends the child SIGKILL, waits for it, and fails t unless it ended by that signal.
func (c *Child) Kill() {
	c.t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
	if st, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || st.Signal() != syscall.SIGKILL {
		c.t.Fatalf("child ended with %v, not by SIGKILL", c.cmd.ProcessState)
	}
}

// Stop sends the child SIGTERM and waits for it; it fails t unless the child exits with
// status 0 within timeout (then it is SIGKILLed).
func (c *Child) Stop(timeout time.Duration) {
	c.t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			c.t.Fatalf("child stopped with %v", err)
		}
	case <-time.After(timeout):
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-done
		c.t.Fatalf("child did not stop within %v of SIGTERM", timeout)
	}
}

// WaitLine returns the first line from the child, from now on, that contains substr, and
// fails t if none comes within timeout or the child ends first.
func (c *Child) WaitLine(substr string, timeout time.Duration) string {
	c.t.Helper()
	return c.WaitLines(timeout, substr)[0]
}

// WaitLines waits, within timeout, until the child has said a line containing each of
// substrs, in any order, and returns those lines in the order of substrs; it fails t if
// one does not come or the child ends first.
func (c *Child) WaitLines(timeout time.Duration, substrs ...string) []string {
	c.t.Helper()
	found := make([]string, len(substrs))
	missing := len(substrs)
	deadline := time.After(timeout)
	for missing > 0 {
		select {
		case l, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("child ended before saying all of %q", substrs)
			}
			for i, s := range substrs {
				if found[i] == "" && strings.Contains(l, s) {
					found[i] = l
					missing--
				}
			}
		case <-deadline:
			for i, s := range substrs {
				if found[i] == "" {
					c.t.Fatalf("child did not say %q within %v", s, timeout)
				}
			}
		}
	}
	return found
}

// LowerFileLimit sets the process's soft RLIMIT_NOFILE to the descriptors it has open plus
// spare, for a child that must run out of them; it returns the limit set. A descriptor takes
// the lowest free number below the limit, so at least spare more can be opened (more when an
// open one is numbered above the limit, as a shell's 255 can be).
func LowerFileLimit(spare int) (uint64, error) {
	entries, err := os.ReadDir("/proc/self/fd") // its own descriptor, closed by now, counted
	if err != nil {
		return 0, err
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	lim.Cur = uint64(len(entries) + spare)
	return lim.Cur, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}
