package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	bugserial "go.bug.st/serial"

	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// Exit codes.
const (
	exitOK        = 0
	exitRuntime   = 1
	exitUsage     = 2
	exitViolation = 3 // strict mode saw a command while another was unacked
)

// ready describes a started simulation, for tests.
type ready struct {
	BrokerURL string            // MQTT: where the terminals are connected
	Ports     map[string]string // serial: device id → the path the agent opens
	Fleet     *sim.Fleet
}

// Run is facesim's main, with its streams injected; stdin is read only with -stdin.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(ctx, args, stdin, stdout, stderr, nil)
}

type config struct {
	transport, url, listen, devices, prefix, ports, linkDir, logLevel string
	n, baud                                                           int
	stdin, pace                                                       bool
	summary, duration                                                 time.Duration
	latency                                                           string
	opts                                                              sim.Options
}

func newFlags(stderr io.Writer, c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("facesim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageHeader)
		fs.PrintDefaults()
		fmt.Fprint(stderr, usageFooter)
	}
	o := &c.opts
	fs.StringVar(&c.transport, "transport", "mqtt", "`mqtt` or serial")
	fs.StringVar(&c.url, "url", "", "MQTT: external broker, e.g. mqtt://127.0.0.1:1883 (default: start an embedded broker on -listen)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:1883", "MQTT: `address` of the embedded broker when -url is empty (port 0: any free port)")
	fs.StringVar(&c.devices, "devices", "", "comma-separated device `ids` (default: -n ids made from -prefix)")
	fs.IntVar(&c.n, "n", 3, "number of terminals when -devices is empty")
	fs.StringVar(&c.prefix, "prefix", "sim-", "device id prefix when -devices is empty: sim-1, sim-2, …")
	fs.StringVar(&c.ports, "ports", "", "serial: comma-separated serial `ports`, one per device, opened with go.bug.st/serial (default: a new pseudo-terminal per device, its path printed)")
	fs.StringVar(&c.linkDir, "link-dir", "", "serial: also create `dir`/<device id> symlinks to the pseudo-terminals, stable names for the agent's config")
	fs.IntVar(&c.baud, "baud", 115200, "serial: baud rate of -ports (8N1), and of the pacing of -pace")
	fs.BoolVar(&c.pace, "pace", false, "serial: pace each terminal to -baud/10 bytes a second each way, as a UART does; pseudo-terminals do not")
	fs.Uint64Var(&o.Seed, "seed", 1, "random seed: the same seed and command order give the same fates")
	fs.StringVar(&c.latency, "ack-latency", "0s", "ack `latency`: 50ms (fixed), uniform:10ms-200ms, exp:50ms (mean), normal:100ms,20ms (mean,stddev)")
	fs.Float64Var(&o.AckLoss, "ack-loss", 0, "probability an ack is never sent although the command was applied")
	fs.Float64Var(&o.RefuseRate, "refuse-rate", 0, "probability a command is refused (not applied, acked with -refuse-code)")
	fs.IntVar(&o.RefuseCode, "refuse-code", 17, "ack code of a refusal (non-zero)")
	fs.IntVar(&o.Protocol, "protocol", 2, "protocol `version` the terminals speak: 2 (persons with revs, digest and serial in heartbeats, ListPersons) or 1")
	fs.IntVar(&o.Capacity, "capacity", 0, "most persons a terminal holds, reported in v2 heartbeats; a new person beyond it is refused with code 23 (0: no limit)")
	fs.IntVar(&o.Batch, "batch", 0, "most persons one AddPersons may carry, reported in v2 heartbeats (0: no batches, AddPersons refused as an unknown op)")
	fs.DurationVar(&o.PersonTime, "person-time", 0, "time one person takes to store, added to the ack latency: an AddPersons of n persons acks n times later")
	fs.IntVar(&o.CutFace, "cut-face", 0, "cut the first transfer of each face once the terminal holds this many `bytes` of it: it crashes before acking, and resumes from there (0: never)")
	fs.BoolVar(&c.stdin, "stdin", false, "read control commands from standard input while running (reset, replace, hand edits…; listed below)")
	fs.DurationVar(&o.HeartbeatInterval, "heartbeat", 5*time.Second, "heartbeat interval (0: none)")
	fs.StringVar(&o.Firmware, "firmware", "facesim-1", "firmware string in heartbeats")
	fs.DurationVar(&o.OfflineEvery, "offline-every", 0, "mean time between offline periods, exponentially distributed (0: never)")
	fs.DurationVar(&o.OfflineFor, "offline-for", 5*time.Second, "length of each offline period")
	fs.Float64Var(&o.GarbageRate, "garbage-rate", 0, "probability an ack is preceded by garbage (serial: random bytes; MQTT: a malformed ack)")
	fs.Float64Var(&o.CrashRate, "crash-rate", 0, "probability a command crashes the terminal mid-command (no ack, cut frame on serial, offline for -crash-downtime)")
	fs.DurationVar(&o.CrashDowntime, "crash-downtime", time.Second, "how long a crashed terminal stays down")
	fs.BoolVar(&o.Strict, "strict", false, "fail loudly (log, count, exit status 3) when a command arrives while another is unacked")
	fs.StringVar(&o.CommandTopic, "topic-command", "dev/face/{id}", "MQTT: command topic template")
	fs.StringVar(&o.AckTopic, "topic-ack", "dev/face/{id}/Ack", "MQTT: ack topic template")
	fs.StringVar(&o.HeartbeatTopic, "topic-heartbeat", "dev/face/{id}/heartbeat", "MQTT: heartbeat topic template")
	fs.DurationVar(&c.summary, "summary", time.Second, "interval of the live per-terminal summary on stdout (0: only at exit)")
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long (0: run until SIGINT/SIGTERM)")
	fs.StringVar(&c.logLevel, "log", "warn", "log `level` on stderr: debug, info, warn, error")
	return fs
}

const usageHeader = `facesim — simulated face terminals speaking protocol v2 (or v1) over MQTT or a serial line.

Usage: facesim [flags]

  facesim -n 3 -ack-latency exp:80ms -ack-loss 0.05 -strict
      three terminals on an embedded broker at 127.0.0.1:1883
  facesim -url mqtt://127.0.0.1:1883 -devices 2042253,2042254 -offline-every 1m -offline-for 10s
  facesim -transport serial -n 2 -link-dir /tmp/faceports
      two terminals on new pseudo-terminals, linked as /tmp/faceports/sim-1 and sim-2
  facesim -n 2 -protocol 1
      two terminals of the first generation: no digest, no ListPersons
  facesim -transport serial -n 1 -pace -baud 115200 -batch 20 -person-time 5ms -cut-face 6000
      one terminal on a line as slow as a real one, taking batches of 20, cutting each
      face's first transfer after 6,000 bytes
  facesim -n 3 -capacity 1000 -stdin
      then type "reset sim-1", "replace sim-2", "delete sim-3 951": drift for the agent to repair

Flags:
`

const usageFooter = `
Summary columns: online, persons (whitelist size), faces (faces held), recv (commands
received), dup (resends of a known messageId), acked, refused, lost (acks lost), crash, off
(offline periods), drop (commands arriving while offline), junk (garbage sent), hb
(heartbeats), batch (AddPersons applied), cut (face transfers cut), viol (strict-mode
violations).

Exit status: 0 clean stop, 1 runtime failure, 2 bad usage, 3 strict-mode violations.

` + controlHelp

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, onReady func(ready)) int {
	var c config
	fs := newFlags(stderr, &c)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "facesim: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	lat, err := sim.ParseLatency(c.latency)
	if err != nil {
		fmt.Fprintln(stderr, "facesim:", err)
		return exitUsage
	}
	c.opts.AckLatency = lat
	if err := checkRates(&c); err != nil {
		fmt.Fprintln(stderr, "facesim:", err)
		return exitUsage
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		fmt.Fprintln(stderr, "facesim: -log:", err)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	c.opts.Logger = logger
	ids := deviceIDs(&c)

	var fleet *sim.Fleet
	info := ready{Ports: map[string]string{}}
	switch c.transport {
	case "mqtt":
		url := c.url
		if url == "" {
			b, err := startBroker(c.listen, logger)
			if err != nil {
				fmt.Fprintln(stderr, "facesim:", err)
				return exitRuntime
			}
			defer b.Close()
			url = "mqtt://" + b.addr
			fmt.Fprintf(stdout, "facesim: embedded broker listening on %s\n", b.addr)
		}
		info.BrokerURL = url
		fleet, err = sim.StartMQTT(url, ids, c.opts)
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = fleet.WaitReady(wctx)
			cancel()
		}
	case "serial":
		var ports []sim.SerialPort
		var cleanup func()
		ports, cleanup, err = openPorts(&c, ids, info.Ports, stdout)
		defer cleanup()
		if err == nil {
			fleet, err = sim.StartSerial(ports, c.opts)
		}
	default:
		fmt.Fprintf(stderr, "facesim: -transport %q: want mqtt or serial\n", c.transport)
		return exitUsage
	}
	if err != nil {
		if fleet != nil {
			fleet.Close()
		}
		fmt.Fprintln(stderr, "facesim:", err)
		return exitRuntime
	}
	info.Fleet = fleet
	fmt.Fprintf(stdout, "facesim: %d terminals ready over %s (seed %d)\n", len(ids), c.transport, c.opts.Seed)
	if onReady != nil {
		onReady(info)
	}

	if c.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.duration)
		defer cancel()
	}
	var tick <-chan time.Time
	if c.summary > 0 {
		t := time.NewTicker(c.summary)
		defer t.Stop()
		tick = t.C
	}
	var lines chan string // nil without -stdin: never ready
	if c.stdin {
		lines = make(chan string)
		done := make(chan struct{})
		defer close(done)
		go readLines(stdin, lines, done) // may outlive run, blocked in a Read of stdin
	}
loop:
	for {
		select {
		case <-tick:
			writeSummary(stdout, fleet.Stats())
		case line, ok := <-lines:
			if !ok {
				lines = nil // stdin ended: run on without commands
				continue
			}
			control(fleet, line, stdout)
		case <-ctx.Done():
			break loop
		}
	}
	fleet.Close()
	writeSummary(stdout, fleet.Stats())
	if err := fleet.Violations(); err != nil {
		fmt.Fprintf(stderr, "facesim: STRICT MODE VIOLATIONS:\n%v\n", err)
		return exitViolation
	}
	return exitOK
}

func checkRates(c *config) error {
	for name, p := range map[string]float64{"-ack-loss": c.opts.AckLoss, "-refuse-rate": c.opts.RefuseRate,
		"-garbage-rate": c.opts.GarbageRate, "-crash-rate": c.opts.CrashRate} {
		if p < 0 || p > 1 {
			return fmt.Errorf("%s %v: want a probability in [0, 1]", name, p)
		}
	}
	if c.opts.RefuseCode == 0 {
		return errors.New("-refuse-code must not be 0 (0 is success)")
	}
	if c.opts.Protocol != 1 && c.opts.Protocol != 2 {
		return fmt.Errorf("-protocol %d: want 1 or 2", c.opts.Protocol)
	}
	if c.opts.Capacity < 0 {
		return fmt.Errorf("-capacity %d: want 0 or more", c.opts.Capacity)
	}
	if c.opts.Batch < 0 || c.opts.Batch > face.MaxBatch {
		return fmt.Errorf("-batch %d: want 0 to %d", c.opts.Batch, face.MaxBatch)
	}
	if c.opts.PersonTime < 0 {
		return fmt.Errorf("-person-time %v: want 0 or more", c.opts.PersonTime)
	}
	if c.opts.CutFace < 0 {
		return fmt.Errorf("-cut-face %d: want 0 or more", c.opts.CutFace)
	}
	if c.baud <= 0 {
		return fmt.Errorf("-baud %d: want a positive rate", c.baud)
	}
	if c.pace {
		c.opts.Baud = c.baud
	}
	if c.n < 1 && c.devices == "" {
		return errors.New("-n must be at least 1")
	}
	return nil
}

func deviceIDs(c *config) []string {
	if c.devices != "" {
		ids := strings.Split(c.devices, ",")
		for i := range ids {
			ids[i] = strings.TrimSpace(ids[i])
		}
		return ids
	}
	ids := make([]string, c.n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", c.prefix, i+1)
	}
	return ids
}

// openPorts opens -ports, or one new PTY per device; it records and prints the paths the
// agent should open.
func openPorts(c *config, ids []string, paths map[string]string, stdout io.Writer) ([]sim.SerialPort, func(), error) {
	var ports []sim.SerialPort
	var links []string
	cleanup := func() {
		for _, l := range links {
			os.Remove(l)
		}
	}
	if c.ports != "" {
		names := strings.Split(c.ports, ",")
		if len(names) != len(ids) {
			return nil, cleanup, fmt.Errorf("-ports names %d ports for %d devices", len(names), len(ids))
		}
		for i, name := range names {
			p, err := bugserial.Open(name, &bugserial.Mode{BaudRate: c.baud})
			if err != nil {
				for _, sp := range ports {
					sp.Port.Close()
				}
				return nil, cleanup, fmt.Errorf("open %s: %w", name, err)
			}
			ports = append(ports, sim.SerialPort{DeviceID: ids[i], Port: p})
			paths[ids[i]] = name
		}
		return ports, cleanup, nil
	}
	for _, id := range ids {
		p, err := serial.OpenPTY()
		if err != nil {
			for _, sp := range ports {
				sp.Port.Close()
			}
			return nil, cleanup, err
		}
		// The fleet closes Master; the PTY's own keep-alive descriptor goes with the process.
		ports = append(ports, sim.SerialPort{DeviceID: id, Port: ptyCloser{p}})
		path := p.Path
		if c.linkDir != "" {
			link := filepath.Join(c.linkDir, id)
			os.Remove(link)
			if err := os.Symlink(p.Path, link); err != nil {
				return nil, cleanup, err
			}
			links = append(links, link)
			path = link
		}
		paths[id] = path
		fmt.Fprintf(stdout, "facesim: device %s on %s\n", id, path)
	}
	return ports, cleanup, nil
}

// ptyCloser makes closing the terminal's end close the whole pseudo-terminal pair.
type ptyCloser struct{ *serial.PTY }

func (p ptyCloser) Read(b []byte) (int, error)  { return p.Master.Read(b) }
func (p ptyCloser) Write(b []byte) (int, error) { return p.Master.Write(b) }
func (p ptyCloser) Close() error                { return p.PTY.Close() }
