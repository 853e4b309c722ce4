// Command faceagent is the gateway daemon: it takes whitelist tasks from the back office,
// keeps them in a journal and sends them to face terminals one at a time (see
// agent/doc.go and docs/design.md).
//
//	faceagent -config /etc/faceagent/agent.toml
//	faceagent -config agent.toml -check-config
//	faceagent -version
//
// Exit codes: 0 clean stop (SIGINT/SIGTERM), 1 runtime failure, 2 bad usage or config.
// SIGHUP reloads the config file: a bad file is logged and the running config stays.
// A second SIGINT/SIGTERM during shutdown ends the process at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/seed0e69bba5/faceagent/agent"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/internal/memtrim"
	"github.com/seed0e69bba5/faceagent/internal/sdnotify"
)

// version is stamped at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

// Exit codes (docs/design.md "Commands").
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

const helpIntro = `faceagent — the gateway daemon: takes whitelist tasks from the back office, writes
each to its journal before acknowledging it, and sends the commands to the face terminals
one at a time, retrying what is not acked and reporting every result upstream.

usage: faceagent -config FILE [-check-config] | -version

Flags:
`

const helpOutro = `
Examples:
  faceagent -config /etc/faceagent/agent.toml    run the agent
  faceagent -config agent.toml -check-config     validate; print the effective config
  faceagent -config configs/demo.toml            the embedded default (what make demo runs)
  faceagent -version

configs/agent.toml documents every key with its default. A config with only [broker]
runs the embedded MQTT broker and state store alone.

Signals: SIGTERM or SIGINT stops cleanly (finishes the write in flight, flushes the
journal); a second one ends the process at once. SIGHUP reloads the config file; a file
that does not load changes nothing.

Exit codes: 0 clean stop, 1 runtime failure, 2 bad usage or config.
`

func main() {
	// Nothing reads heap profiles in the daemon: sampling would only cost memory (the
	// profile's bucket table) and time.
	runtime.MemProfileRate = 0
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("faceagent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "the agent's TOML config `FILE` (see configs/agent.toml)")
	check := fs.Bool("check-config", false, "validate the config, print the effective configuration and exit (0 valid, 2 not)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	shortUsage := func() {
		fmt.Fprintf(stderr, "usage: faceagent -config FILE [-check-config] | -version  (faceagent -h: help)\n")
	}
	fs.Usage = func() {} // -h prints the full help to stdout below; errors get shortUsage
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, helpIntro)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			fmt.Fprint(stdout, helpOutro)
			return exitOK
		}
		shortUsage()
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "faceagent: unexpected argument %q\n", fs.Arg(0))
		shortUsage()
		return exitUsage
	}
	if *showVersion {
		fmt.Fprintf(stdout, "faceagent %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	}
	if *configPath == "" {
		fmt.Fprintln(stderr, "faceagent: -config FILE is required")
		shortUsage()
		return exitUsage
	}
	cfg, err := config.Load(*configPath, nil)
	if err != nil {
		fmt.Fprintln(stderr, err) // FILE:LINE: key: what is wrong, one per line
		return exitUsage
	}
	if *check {
		if err := cfg.WriteTOML(stdout); err != nil {
			fmt.Fprintln(stderr, "faceagent:", err)
			return exitFailure
		}
		return exitOK
	}
	return serve(cfg, *configPath, stderr)
}

// serve runs the agent until a signal stops it.
func serve(cfg *config.Config, path string, stderr io.Writer) int {
	log, level := agent.NewLogger(cfg.Log, stderr)
	limit, source := agent.ApplyMemoryLimit(cfg.Agent)
	log.Info("faceagent starting", "version", version, "config", path, "board", cfg.Agent.Board,
		"gomemlimit", limit, "gomemlimit_from", source)

	a, err := agent.New(&agent.Options{Config: cfg, Logger: log, LogLevel: level, Version: version})
	if err != nil {
		log.Error("start", "err", err)
		return exitFailure
	}
	notifier, err := sdnotify.FromEnv()
	if err != nil {
		log.Warn("systemd notify socket unusable", "err", err)
	}

	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	quiet := memtrim.StartQuietRelease(quietRelease, func(r memtrim.Release) {
		log.Debug("free heap returned to the kernel", "free", r.Free, "released", r.Released, "image", r.Image)
		if r.ImageErr != nil {
			log.Debug("the binary's pages were not released", "err", r.ImageErr)
		}
	})
	defer quiet.Stop()

	done := make(chan error, 1) // buffered: Run's goroutine must not block if we left
	go func() { done <- a.Run(ctx) }()
	ready := a.Ready()
	watchdogDone := make(chan struct{})
	close(watchdogDone) // replaced once the watchdog runs
	for {
		select {
		case <-ready:
			ready = nil
			_ = notifier.Ready()
			_ = notifier.Status("running")
			releaseStartupMemory(log) // after READY: reading smaps need not delay it
			if every, ok := sdnotify.WatchdogInterval(); ok {
				watchdogDone = make(chan struct{})
				go func() {
					defer close(watchdogDone)
					_ = notifier.RunWatchdog(ctx, every, a.NeedsRestart)
				}()
			}
		case <-hup:
			reload(a, path, log)
		case <-ctx.Done():
			stopSignals() // a second signal now ends the process the default way
			_ = notifier.Stopping()
			err := <-done
			<-watchdogDone
			if err != nil {
				log.Error("stopped with errors", "err", err)
				return exitFailure
			}
			log.Info("faceagent stopped")
			return exitOK
		case err := <-done:
			<-watchdogDone
			if err == nil {
				return exitOK
			}
			log.Error("faceagent failed", "err", err)
			return exitFailure
		}
	}
}

// quietRelease is how long after its last garbage collection the agent counts as quiet and
// gives its free heap back (internal/memtrim): long enough that a steady flow of work never
// pays for it, short enough that a burst's memory is returned while an operator looks.
const quietRelease = 5 * time.Second

// releaseStartupMemory unmaps the binary's pages that only start-up used (package
// initialisation, config parsing); what the running agent needs faults back in.
func releaseStartupMemory(log *slog.Logger) {
	n, err := memtrim.ReleaseImage()
	if errors.Is(err, fs.ErrNotExist) {
		log.Debug("start-up pages not released: no /proc", "err", err)
		return
	}
	if err != nil {
		log.Warn("start-up pages not released", "err", err)
		return
	}
	log.Debug("start-up pages released", "bytes", n)
}

// reload re-reads the config file on SIGHUP. A file that does not load changes nothing.
func reload(a *agent.Agent, path string, log *slog.Logger) {
	next, err := config.Load(path, nil)
	if err != nil {
		log.Error("reload refused: the running config stays", "err", err.Error())
		return
	}
	if err := a.Reload(next); err != nil {
		log.Warn("config reloaded in part", "err", err.Error())
		return
	}
	log.Info("config reloaded", "config", path)
}
