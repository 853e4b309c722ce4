package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// states implements `taskctl states`: read each terminal's state from the state store
// (faceagent/{gw}/devices/{id}, msgp) and print it as a table. The gateway, the devices
// and the broker come from -config (the agent's file) or from -url/-gateway and the
// device ids given as arguments.
func states(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("taskctl states", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "the agent's config `FILE`: gateway, devices and broker (or upstream) from there")
	url := fs.String("url", "mqtt://127.0.0.1:1883", "the broker with the state store (ignored with -config)")
	gw := fs.String("gateway", "gw-01", "the agent's gateway_id (ignored with -config)")
	timeout := fs.Duration("timeout", 10*time.Second, "overall timeout")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), statesUsage+`
Reads faceagent/{gw}/devices/{id} (msgp) for each terminal and prints one row each: online,
queue (+1: a command in flight), sent, ok, failed, retries, persons, in sync (its digest is
the desired list's and nothing is queued), paused, firmware, time
since last heard of, last error. Without DEVICE arguments the devices are those of -config.

Examples:
  taskctl states -config configs/demo.toml
  taskctl states -url mqtt://127.0.0.1:1883 -gateway gw-01 2042253 2042254

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ids, err := resolveTarget(*cfgPath, url, gw, fs.Args())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if len(ids) == 0 {
		fmt.Fprint(stderr, statesUsage)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := store.Connect(ctx, &store.Options{URL: *url})
	if err != nil {
		fmt.Fprintln(stderr, "taskctl:", err)
		return 1
	}
	defer c.Close()
	fmt.Fprintf(stdout, "%-12s %-7s %6s %6s %6s %6s %6s %7s %-13s %7s %-10s %8s  %s\n",
		"terminal", "online", "queue", "sent", "ok", "failed", "retry", "persons", "sync", "paused", "firmware", "seen", "last error")
	code := 0
	now := time.Now()
	for _, id := range ids {
		e, err := c.Get(ctx, "faceagent/"+*gw+"/devices/"+id)
		if err != nil {
			fmt.Fprintf(stdout, "%-12s %v\n", id, err)
			code = 1
			continue
		}
		var st wire.DeviceState
		if _, err := st.UnmarshalMsg(e.Value); err != nil {
			fmt.Fprintf(stdout, "%-12s undecodable state: %v\n", id, err)
			code = 1
			continue
		}
		seen := "-"
		if last := max(st.LastHeartbeat, st.LastAck); last > 0 {
			seen = now.Sub(time.UnixMilli(last)).Round(100 * time.Millisecond).String()
		}
		queue := fmt.Sprint(st.QueueDepth)
		if st.InFlight != "" {
			queue += "+1"
		}
		fmt.Fprintf(stdout, "%-12s %-7v %6s %6d %6d %6d %6d %7d %-13s %7v %-10s %8s  %s\n", id, st.Online, queue, st.Sent,
			st.Succeeded, st.Failed, st.Retries, st.Persons, syncLabel(&st), st.Paused, clipText(st.Firmware, 10), seen, clipText(st.LastError, 60))
	}
	return code
}

// resolveTarget applies the agent's config file, when given, to the broker URL and the
// gateway, and returns the devices: those given, else the config's.
func resolveTarget(cfgPath string, url, gw *string, ids []string) ([]string, error) {
	if cfgPath == "" {
		return ids, nil
	}
	cfg, err := config.Load(cfgPath, nil)
	if err != nil {
		return nil, err
	}
	*gw = cfg.Agent.GatewayID
	if len(ids) == 0 {
		for _, d := range cfg.Devices {
			ids = append(ids, d.ID)
		}
	}
	switch {
	case cfg.Upstream != nil:
		*url = cfg.Upstream.URL
	case cfg.Broker != nil:
		host, port, _ := net.SplitHostPort(cfg.Broker.Listen)
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		*url = "mqtt://" + net.JoinHostPort(host, port)
	}
	return ids, nil
}

const statesUsage = "usage: taskctl states [-config FILE | -url URL -gateway GW] [DEVICE...]\n"

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.TrimSpace(s[:n-1]) + "…"
}
