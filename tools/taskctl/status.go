package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

const statusUsage = "usage: taskctl status [-w] [-config FILE | -url URL -gateway GW] [DEVICE...]\n"

const statusHelp = `
The overview of a gateway: one row per terminal, from its state in the state store
(faceagent/{gw}/devices/{id}, which the agent rewrites on every change):

  TERMINAL   the terminal's id
  STATE      online, offline, paused (online, sending stopped by a control command),
             or "no state" (the key is missing: the gateway has not written it for three
             heartbeat timeouts, or it does not know the terminal)
  SYNC       yes: it holds its desired whitelist (protocol 2 heartbeat with the desired
             digest, nothing queued or in flight); syncing (a reconciliation under way);
             failed (the last reconciliation failed; the gateway tries again later);
             unmanaged (no task ever named it: the gateway has no desired list for it and
             leaves it alone); pending (commands queued or in flight for it); not confirmed
             (its heartbeat shows another digest, or none: a protocol 1 terminal, which
             is never in sync)
  QUEUE      commands waiting for it
  IN FLIGHT  the messageId of the command sent and not yet acked, "-" for none
  PERSONS    persons it said it holds / persons on its desired whitelist
  HEARTBEAT  time since its last heartbeat ("never" since the gateway started)
  LAST ERROR the error of its last failed task

With -w the table stays on screen and is redrawn in place whenever a terminal's state
changes (the state store notifies taskctl of every write: KEYNOTIFY), and every -every on a
terminal so the heartbeat ages move; ^C ends it. Redirected to a file or a pipe, -w prints a
new table, headed by the time, at each change instead.

Examples:
  taskctl status -config /etc/faceagent/agent.toml
  taskctl status -w -url mqtt://gw-01.example:1883 -gateway gw-01 2042253 2042254

Exit status: 0; 1 when a state is missing or undecodable (without -w) or the broker cannot be
reached; 2 for bad usage.

Flags:
`

// statusOptions are taskctl status's settings.
type statusOptions struct {
	URL, Gateway string
	IDs          []string
	Watch        bool
	Every        time.Duration // with Watch on a tty: redraw this often for the ages
	Timeout      time.Duration // connecting and the first read
	TTY          bool
}

// statusCmd implements `taskctl status`.
func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer, tty bool) int {
	fs := flag.NewFlagSet("taskctl status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := statusOptions{TTY: tty}
	cfgPath := fs.String("config", "", "the agent's config `FILE`: gateway, devices and broker (or upstream) from there")
	fs.StringVar(&o.URL, "url", "mqtt://127.0.0.1:1883", "the broker with the state store (ignored with -config)")
	fs.StringVar(&o.Gateway, "gateway", "gw-01", "the agent's gateway_id (ignored with -config)")
	fs.BoolVar(&o.Watch, "w", false, "watch: redraw the table on every change until interrupted")
	fs.DurationVar(&o.Every, "every", time.Second, "with -w on a terminal: also redraw this often, so ages move (100ms..1m)")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "give up connecting and reading the states after this long")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), statusUsage+statusHelp)
		fs.PrintDefaults()
	}
	// Flags may come before or after the terminals' ids.
	ids, code := parseInterspersed(fs, args)
	if code >= 0 {
		return code
	}
	var err error
	if o.IDs, err = resolveTarget(*cfgPath, &o.URL, &o.Gateway, ids); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if len(o.IDs) == 0 {
		fmt.Fprint(stderr, statusUsage+"(no terminals: name them, or give -config)\n")
		return 2
	}
	if o.Every < 100*time.Millisecond || o.Every > time.Minute || o.Timeout <= 0 {
		fmt.Fprintln(stderr, "taskctl: -every must be within 100ms..1m and -timeout positive")
		return 2
	}
	if err := status(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, "taskctl:", err)
		return 1
	}
	return 0
}

// errMissing reports terminals without a readable state (one-shot status only).
var errMissing = errors.New("some terminals have no readable state")

// statusTable is what taskctl status shows: each terminal's last state, or why there is none.
type statusTable struct {
	gateway string
	ids     []string
	states  map[string]wire.DeviceState
	missing map[string]string // id → why it has no state
}

func newStatusTable(gw string, ids []string) *statusTable {
	return &statusTable{gateway: gw, ids: ids, states: map[string]wire.DeviceState{}, missing: map[string]string{}}
}

// set records a terminal's state from a value read or notified; nil means deleted.
func (t *statusTable) set(id string, value []byte, why string) {
	if value == nil {
		delete(t.states, id)
		t.missing[id] = why
		return
	}
	var st wire.DeviceState
	if _, err := st.UnmarshalMsg(value); err != nil {
		delete(t.states, id)
		t.missing[id] = "undecodable state: " + err.Error()
		return
	}
	t.states[id] = st
	delete(t.missing, id)
}

// render writes the table and returns how many lines it wrote.
func (t *statusTable) render(w io.Writer, now time.Time) int {
	var b strings.Builder
	online, synced := 0, 0
	for _, st := range t.states {
		if st.Online {
			online++
		}
		if st.InSync {
			synced++
		}
	}
	fmt.Fprintf(&b, "gateway %s  %s  %s, %d online, %d in sync\n", t.gateway, now.Format("15:04:05"), count(len(t.ids), "terminal", "terminals"), online, synced)
	fmt.Fprintf(&b, "%-14s %-9s %-13s %6s %-20s %-13s %-10s %s\n",
		"TERMINAL", "STATE", "SYNC", "QUEUE", "IN FLIGHT", "PERSONS", "HEARTBEAT", "LAST ERROR")
	for _, id := range t.ids {
		st, ok := t.states[id]
		if !ok {
			fmt.Fprintf(&b, "%-14s %-9s %s\n", clipText(id, 14), "no state", t.missing[id])
			continue
		}
		state := "offline"
		switch {
		case st.Online && st.Paused:
			state = "paused"
		case st.Online:
			state = "online"
		}
		sync := syncLabel(&st)
		inFlight := "-"
		if st.InFlight != "" {
			inFlight = clipText(st.InFlight, 20)
		}
		heartbeat := "never"
		if st.LastHeartbeat > 0 {
			heartbeat = max(now.Sub(time.UnixMilli(st.LastHeartbeat)), 0).Round(100*time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(&b, "%-14s %-9s %-13s %6d %-20s %-13s %-10s %s\n", clipText(id, 14), state, sync, st.QueueDepth, inFlight,
			fmt.Sprintf("%d/%d", st.Persons, st.DesiredPersons), heartbeat, clipText(st.LastError, 60))
	}
	io.WriteString(w, b.String())
	return strings.Count(b.String(), "\n")
}

// status reads every terminal's state and prints the table; with o.Watch it keeps the
// table up to date from the store's notifications until ctx ends.
func status(ctx context.Context, o statusOptions, stdout io.Writer) error {
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	c, err := store.Connect(cctx, &store.Options{URL: o.URL})
	if err != nil {
		return err
	}
	defer c.Close()
	// Ends the watch relays (before c.Close, which closes their channels) on every return.
	wctx, stopRelays := context.WithCancel(ctx)
	defer stopRelays()
	table := newStatusTable(o.Gateway, o.IDs)
	key := func(id string) string { return "faceagent/" + o.Gateway + "/devices/" + id }

	// Watch before reading, so that no change between the read and the watch is lost.
	type change struct {
		id string
		n  store.Notification
	}
	changes := make(chan change)
	if o.Watch {
		for _, id := range o.IDs {
			w, err := c.KeyNotify(cctx, key(id))
			if err != nil {
				return fmt.Errorf("watching %s: %w", key(id), err)
			}
			go func() {
				for n := range w.C() {
					select {
					case changes <- change{id, n}:
					case <-wctx.Done():
						return
					}
				}
			}()
		}
	}
	missing := false
	for _, id := range o.IDs {
		e, err := c.Get(cctx, key(id))
		switch {
		case errors.Is(err, store.ErrNotFound):
			table.set(id, nil, "not found: "+key(id))
			missing = true
		case err != nil:
			return err
		default:
			table.set(id, e.Value, "")
			if _, ok := table.states[id]; !ok {
				missing = true
			}
		}
	}
	if !o.Watch {
		table.render(stdout, time.Now())
		if missing {
			return errMissing
		}
		return nil
	}

	lines := 0
	draw := func() {
		if o.TTY && lines > 0 {
			fmt.Fprintf(stdout, "\x1b[%dA\x1b[J", lines) // back to the table's first line, clear below
		} else if lines > 0 {
			fmt.Fprintln(stdout)
		}
		lines = table.render(stdout, time.Now())
	}
	draw()
	var tick <-chan time.Time
	if o.TTY {
		t := time.NewTicker(o.Every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			draw()
		case ch := <-changes:
			// Take every change already waiting, then draw once.
			for more := true; more; {
				if ch.n.Op == store.OpDelete {
					table.set(ch.id, nil, "deleted or expired: "+key(ch.id))
				} else {
					table.set(ch.id, ch.n.Value, "")
				}
				select {
				case ch = <-changes:
				default:
					more = false
				}
			}
			draw()
		}
	}
}

// syncLabel says whether the terminal holds its list, as the operator's page judges it, in
// the same order: "unmanaged" (no task named it), "syncing", "failed", "yes", "pending"
// (commands queued or in flight), else "not confirmed" (a protocol 1 terminal cannot say
// what it holds).
func syncLabel(st *wire.DeviceState) string {
	switch {
	case st.SyncStatus == "unmanaged": // the device state's value for a terminal no task named
		return "unmanaged"
	case st.SyncStatus == string(wire.SyncStarted):
		return "syncing"
	case st.SyncStatus == string(wire.SyncFailed):
		return "failed"
	case st.InSync:
		return "yes"
	case st.QueueDepth > 0 || st.InFlight != "":
		return "pending"
	}
	return "not confirmed"
}
