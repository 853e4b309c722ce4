// Command taskctl submits whitelist tasks to a faceagent and follows their progress.
//
//	taskctl submit [flags] FILE.jsonl     # tasks from a file (JSON Lines: a task or an array per line)
//	taskctl submit [flags] -              # … from standard input
//	taskctl submit -generate 10000 -devices 64 [-device-prefix term-]
//	taskctl submit -set-whitelist PERSONS.jsonl -device 2042253   # a terminal's whole list
//	taskctl states -config configs/demo.toml   # each terminal's state from the state store
//	taskctl status -w -config configs/demo.toml  # the gateway's overview, redrawn on every change
//
// Tasks go to faceagent/{gw}/tasks with QoS 1 (in messages of -batch tasks, each
// terminal's tasks in order); results are followed on faceagent/{gw}/results and
// faceagent/{gw}/deadletter with a progress bar per terminal (redrawn in place on a
// terminal), then a summary: done, failed, superseded, missing, p50/p99 per terminal, the
// counts of each SetWhitelist, and the whitelist sync reports seen on
// faceagent/{gw}/devices/+/sync.
//
// Exit status: 0 when every task has an outcome (succeeded or not), 1 when following
// timed out or the broker was lost, 2 for bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, isTerminal(os.Stdout))
	stop()
	os.Exit(code)
}

const usage = `usage: taskctl submit [flags] FILE.jsonl | -
       taskctl submit [flags] -generate N -devices M
       taskctl submit [flags] -set-whitelist PERSONS.jsonl -device ID
       taskctl states [-config FILE | -url URL -gateway GW] [DEVICE...]
       taskctl status [-w] [-config FILE | -url URL -gateway GW] [DEVICE...]
       taskctl watch-sync [-url URL -gateway GW] DEVICE
`

const help = `taskctl — submit whitelist tasks to a faceagent and follow them to their results.

` + usage + `
Commands:
  submit  publish tasks to faceagent/{gw}/tasks (QoS 1, -batch tasks a message), then
          follow faceagent/{gw}/results and /deadletter with a progress bar per terminal
          and print a summary: done, failed, superseded, missing, p50/p99 per terminal.
          Tasks come from a JSON Lines file (a task or an array of tasks per line; "-" is
          standard input) or are generated (-generate N -devices M). -set-whitelist
          sends one SetWhitelist task: the terminal's whole list, from a JSON Lines file
          of persons (one person object per line). Following also shows the whitelist
          sync reports (faceagent/{gw}/devices/+/sync) and each SetWhitelist's counts.
  states  read each terminal's state from the state store (faceagent/{gw}/devices/{id})
          and print it as a table, with whether it is in sync.
  status  the overview of a gateway: per terminal online, whitelist sync, queue, in flight,
          persons held/desired, last heartbeat, last error; -w keeps it on screen, redrawn
          on every change.
  watch-sync  wait for a terminal's next whitelist reconciliation and print its sync
          reports (started, then done or failed); exit 0 after done.

taskctl submit -h, taskctl states -h, taskctl status -h and taskctl watch-sync -h list their flags.

Examples:
  taskctl submit -url mqtt://127.0.0.1:18830 -gateway demo-gw configs/demo-tasks.jsonl
  taskctl submit -gateway gw-01 -generate 10000 -devices 64
  cat tasks.jsonl | taskctl submit -gateway gw-01 -no-follow -
  taskctl submit -gateway gw-01 -set-whitelist site-a.jsonl -device 2042253
  taskctl states -config configs/demo.toml
  taskctl states -url mqtt://127.0.0.1:1883 -gateway gw-01 2042253 2042254
  taskctl status -w -config /etc/faceagent/agent.toml

A task: {"taskId":"t-1","deviceId":"2042253","op":"AddPerson"|"DeletePerson",
         "person":{"id":"951","name":"…","validFrom":"RFC3339","validTo":"RFC3339"}}
    or  {"taskId":"t-2","deviceId":"2042253","op":"SetWhitelist","persons":[{"id":"951",…},…]}
A person line of a -set-whitelist file: {"id":"951","name":"…","validFrom":"…","validTo":"…"}

Exit status: 0 every task has an outcome, 1 following timed out or the broker was lost
(states: a state missing or undecodable), 2 bad usage.
`

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, tty bool) int {
	if len(args) > 0 && args[0] == "states" {
		return states(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "status" {
		return statusCmd(ctx, args[1:], stdout, stderr, tty)
	}
	if len(args) > 0 && args[0] == "watch-sync" {
		return watchSync(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, help)
		return 0
	}
	if len(args) == 0 || args[0] != "submit" {
		fmt.Fprint(stderr, usage+"(taskctl -h: help)\n")
		return 2
	}
	fs := flag.NewFlagSet("taskctl submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := submitOptions{}
	fs.StringVar(&o.URL, "url", "mqtt://127.0.0.1:1883", "the broker the agent takes tasks from (mqtt:// or mqtts://)")
	fs.StringVar(&o.Gateway, "gateway", "gw-01", "the agent's gateway_id ({gw} in the topics)")
	fs.StringVar(&o.Username, "username", "", "MQTT user name")
	passwordEnv := fs.String("password-env", "TASKCTL_PASSWORD", "environment variable holding the MQTT password")
	fs.IntVar(&o.Batch, "batch", 50, "tasks per message (1 sends single task objects)")
	fs.IntVar(&o.Inflight, "inflight", 16, "task messages awaiting PUBACK at once")
	noFollow := fs.Bool("no-follow", false, "only submit; do not wait for results")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up following after this long (0: never)")
	fs.DurationVar(&o.Every, "every", 200*time.Millisecond, "progress refresh period")
	generate := fs.Int("generate", 0, "generate N tasks instead of reading a file")
	devices := fs.Int("devices", 8, "with -generate: spread the tasks over this many terminals")
	prefix := fs.String("device-prefix", "term-", "with -generate: terminal ids are PREFIX01, PREFIX02, …")
	run := fs.String("run-id", "", "with -generate: task id prefix (default: random), so reruns are told apart")
	whitelist := fs.String("set-whitelist", "", "send one SetWhitelist task with the persons of this JSON Lines file (\"-\": standard input)")
	device := fs.String("device", "", "with -set-whitelist: the terminal whose whole list it is")
	taskID := fs.String("task-id", "", "with -set-whitelist: the task's id (default: wl-DEVICE-random)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: taskctl submit [flags] FILE.jsonl | -\n       taskctl submit [flags] -generate N -devices M\n"+
			"       taskctl submit [flags] -set-whitelist PERSONS.jsonl -device ID\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), `
Examples:
  taskctl submit -url mqtt://127.0.0.1:18830 -gateway demo-gw configs/demo-tasks.jsonl
  taskctl submit -gateway gw-01 -generate 10000 -devices 64 -batch 100
  cat tasks.jsonl | taskctl submit -gateway gw-01 -no-follow -
  taskctl submit -gateway gw-01 -set-whitelist site-a.jsonl -device 2042253

A -set-whitelist file holds one person per line, e.g.
  {"id":"951","name":"Li Lei","validFrom":"2026-01-01T00:00:00Z","validTo":"2027-01-01T00:00:00Z"}
  {"id":"952","name":"Han Meimei"}
An empty file clears the terminal's list.
`)
	}

	// Flags may come before or after the file name.
	files, code := parseInterspersed(fs, args[1:])
	if code >= 0 {
		return code
	}
	o.Follow = !*noFollow
	o.Password = os.Getenv(*passwordEnv)
	o.Live = tty
	if o.Every <= 0 || o.Batch < 1 || o.Inflight < 1 {
		fmt.Fprintln(stderr, "taskctl: -every, -batch and -inflight must be positive")
		return 2
	}

	var tasks []pending
	switch {
	case *generate > 0 && len(files) > 0, *whitelist != "" && (*generate > 0 || len(files) > 0):
		fmt.Fprintln(stderr, "taskctl: give a file, -generate or -set-whitelist, only one of them")
		return 2
	case *whitelist != "" && *device == "":
		fmt.Fprintln(stderr, "taskctl: -set-whitelist needs -device, the terminal whose list it is")
		return 2
	case *whitelist == "" && (*device != "" || *taskID != ""):
		fmt.Fprintln(stderr, "taskctl: -device and -task-id go with -set-whitelist")
		return 2
	case *whitelist != "":
		var r io.Reader = stdin
		name := "stdin"
		if *whitelist != "-" {
			f, err := os.Open(*whitelist)
			if err != nil {
				fmt.Fprintln(stderr, "taskctl:", err)
				return 2
			}
			defer f.Close()
			r, name = f, *whitelist
		}
		id := *taskID
		if id == "" {
			id = "wl-" + *device + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
		}
		t, err := readWhitelist(r, name, id, *device)
		if err != nil {
			fmt.Fprintln(stderr, "taskctl:", err)
			return 2
		}
		tasks = []pending{t}
	case *generate > 0:
		if *devices < 1 {
			fmt.Fprintln(stderr, "taskctl: -devices must be at least 1")
			return 2
		}
		id := *run
		if id == "" {
			id = "run" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
		}
		tasks = generateTasks(*generate, deviceIDs(*prefix, *devices), id)
	case len(files) == 1:
		var r io.Reader = stdin
		name := "stdin"
		if files[0] != "-" {
			f, err := os.Open(files[0])
			if err != nil {
				fmt.Fprintln(stderr, "taskctl:", err)
				return 2
			}
			defer f.Close()
			r, name = f, files[0]
		}
		var err error
		if tasks, err = readTasks(r, name); err != nil {
			fmt.Fprintln(stderr, "taskctl:", err)
			return 2
		}
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}

	if err := submit(ctx, o, tasks, stdout); err != nil {
		fmt.Fprintln(stderr, "taskctl:", err)
		return 1
	}
	return 0
}

// isTerminal reports whether f is a character device (a terminal, for the live bars).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// parseInterspersed parses args with fs, flags before, between or after the positional
// arguments, which it returns in order. code is the exit status to end with (0 after -h,
// 2 after a bad flag), or -1 to go on.
func parseInterspersed(fs *flag.FlagSet, args []string) (positional []string, code int) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, 0
			}
			return nil, 2
		}
		if fs.NArg() == 0 {
			return positional, -1
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
