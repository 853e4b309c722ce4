package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// Control commands (-stdin): one a line, each naming a terminal, so that a demo or a test
// can cause the drift whitelist sync repairs while the terminals run.
const controlHelp = `Commands on standard input (-stdin), one a line; ID is a device id, or all where said:
  status [ID]              protocol, serial, digest, persons, capacity and faces held of one or every terminal
  persons ID               the persons a terminal holds: id, rev, name
  heartbeat ID|all         send a heartbeat now
  protocol ID|all 1|2      speak protocol v1 or v2 from now on
  capacity ID|all N        hold at most N persons (0: no limit)
  reset ID|all             factory reset: forget every person and messageId, keep the serial
  replace ID [SERIAL]      a new terminal in its place: empty, with a new serial
  add ID PERSON [REV]      add a person at the terminal, bypassing the agent (no REV: listed as 0000000000000000)
  delete ID PERSON         delete a person at the terminal
  rev ID PERSON REV        change the rev stored with a person
  help                     this list
`

// readLines sends the lines of r to lines until r ends or done closes.
func readLines(r io.Reader, lines chan<- string, done <-chan struct{}) {
	defer close(lines)
	s := bufio.NewScanner(r)
	for s.Scan() {
		select {
		case lines <- s.Text():
		case <-done:
			return
		}
	}
}

// control carries out one command line on fleet and writes its answer to out.
func control(fleet *sim.Fleet, line string, out io.Writer) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	if err := controlErr(fleet, f, out); err != nil {
		fmt.Fprintf(out, "facesim: %s: %v\n", f[0], err)
	}
}

func controlErr(fleet *sim.Fleet, f []string, out io.Writer) error {
	cmd, args := f[0], f[1:]
	want := func(n ...int) error {
		for _, k := range n {
			if len(args) == k {
				return nil
			}
		}
		return fmt.Errorf("want %v arguments, got %d (help lists the commands)", n, len(args))
	}
	// terms resolves args[0] to terminals; "all" only where allowed.
	terms := func(all bool) ([]*sim.Terminal, error) {
		if all && args[0] == "all" {
			return fleet.Terminals(), nil
		}
		if t := fleet.Terminal(args[0]); t != nil {
			return []*sim.Terminal{t}, nil
		}
		return nil, fmt.Errorf("no terminal %q", args[0])
	}
	switch cmd {
	case "help":
		fmt.Fprint(out, controlHelp)
		return nil
	case "status":
		if err := want(0, 1); err != nil {
			return err
		}
		ts := fleet.Terminals()
		if len(args) == 1 {
			var err error
			if ts, err = terms(false); err != nil {
				return err
			}
		}
		for _, t := range ts {
			s := t.Stats()
			fmt.Fprintf(out, "%s protocol=%d serial=%s digest=%s persons=%d capacity=%d faces=%d\n",
				t.ID(), t.Protocol(), t.Serial(), t.Digest(), s.Persons, t.Capacity(), s.Faces)
		}
		return nil
	case "persons":
		if err := want(1); err != nil {
			return err
		}
		ts, err := terms(false)
		if err != nil {
			return err
		}
		for _, p := range ts[0].Persons() {
			rev := p.Rev
			if rev == "" {
				rev = "-"
			}
			fmt.Fprintf(out, "%s %s %s\n", p.ID, rev, strconv.Quote(p.Name))
		}
		return nil
	case "heartbeat", "reset":
		if err := want(1); err != nil {
			return err
		}
		ts, err := terms(true)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if cmd == "reset" {
				t.FactoryReset()
			} else {
				t.SendHeartbeat()
			}
		}
	case "protocol", "capacity":
		if err := want(2); err != nil {
			return err
		}
		ts, err := terms(true)
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return fmt.Errorf("%q is not a number", args[1])
		}
		for _, t := range ts {
			if cmd == "protocol" {
				err = t.SetProtocol(n)
			} else {
				err = t.SetCapacity(n)
			}
			if err != nil {
				return err
			}
		}
	case "replace":
		if err := want(1, 2); err != nil {
			return err
		}
		ts, err := terms(false)
		if err != nil {
			return err
		}
		serial := ""
		if len(args) == 2 {
			serial = args[1]
		}
		fmt.Fprintf(out, "%s serial=%s\n", ts[0].ID(), ts[0].Replace(serial))
		return nil
	case "add":
		if err := want(2, 3); err != nil {
			return err
		}
		ts, err := terms(false)
		if err != nil {
			return err
		}
		p := face.Person{ID: args[1]}
		if len(args) == 3 {
			p.Rev = args[2]
		}
		if err := ts[0].TamperAdd(p); err != nil {
			return err
		}
	case "delete":
		if err := want(2); err != nil {
			return err
		}
		ts, err := terms(false)
		if err != nil {
			return err
		}
		if !ts[0].TamperDelete(args[1]) {
			return fmt.Errorf("%s holds no person %q", args[0], args[1])
		}
	case "rev":
		if err := want(3); err != nil {
			return err
		}
		ts, err := terms(false)
		if err != nil {
			return err
		}
		ok, err := ts[0].TamperRev(args[1], args[2])
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s holds no person %q", args[0], args[1])
		}
	default:
		return fmt.Errorf("unknown command (help lists them)")
	}
	fmt.Fprintln(out, "ok")
	return nil
}
