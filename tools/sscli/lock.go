package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/store"
)

// runLock: sscli lock NAME [--ttl 10s] [--holder ID] [--wait=true] -- CMD [ARGS...]. It waits
// for the lease, runs CMD while renewing it, and stops CMD (SIGTERM, then SIGKILL after
// --grace) the moment the lease is lost. It exits with CMD's exit code, or 2 when the lease
// was lost.
func runLock(ctx context.Context, a *app, args []string) error {
	fs := flag.NewFlagSet("lock", flag.ContinueOnError)
	ttl := fs.Duration("ttl", 10*time.Second, "lease time to live; renewed every ttl/3")
	holder := fs.String("holder", "", "value stored in the lease (default: the client id)")
	wait := fs.Bool("wait", true, "wait for the lease; false: exit 1 at once when it is held")
	grace := fs.Duration("grace", 5*time.Second, "time CMD gets after SIGTERM before SIGKILL")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return usagef("want NAME -- CMD [ARGS...]")
	}
	if *ttl < 10*time.Millisecond {
		return usagef("--ttl %v is too short", *ttl)
	}
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	opts := &store.LeaseOptions{TTL: *ttl, Holder: *holder}
	var l *store.Lease
	if *wait {
		l, err = c.Acquire(ctx, pos[0], opts)
	} else {
		l, err = c.TryAcquire(ctx, pos[0], opts)
	}
	if err != nil {
		return err
	}
	defer l.Release(context.WithoutCancel(ctx))
	fmt.Fprintf(a.Stderr, "sscli lock: holding %s (token %s)\n", pos[0], l.Token())

	cmd := exec.Command(pos[1], pos[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.Stdin, a.Stdout, a.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var lost error
	select {
	case err = <-done:
	case <-l.Lost():
		lost = fmt.Errorf("lease %s lost: %w; stopping the command", pos[0], l.Err())
		err = stop(cmd, done, *grace)
	case <-ctx.Done():
		err = stop(cmd, done, *grace)
	}
	if lost != nil {
		return lost
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if code := ee.ExitCode(); code >= 0 {
			return errExit{code}
		}
		return errExit{exitError} // killed by a signal
	}
	return err
}

// stop sends SIGTERM, then SIGKILL after grace, and returns the command's end.
func stop(cmd *exec.Cmd, done <-chan error, grace time.Duration) error {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		_ = cmd.Process.Kill()
		return <-done
	}
}
