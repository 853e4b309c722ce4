package main

import (
	"context"
	"flag"
	"fmt"
)

// runGet: sscli get KEY [-v] [--decode FORMAT] [--compact] — the value on stdout (raw, or
// decoded), the version on stderr with -v.
func runGet(ctx context.Context, a *app, args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "print the version on stderr")
	decode := fs.String("decode", decodeRaw, "value `format`: raw (the bytes as stored), device-state (the agent's msgp terminal state\nas JSON, times RFC 3339 UTC), auto (device-state for faceagent/{gw}/devices/{id}, raw otherwise)")
	compact := fs.Bool("compact", false, "decoded JSON on one line")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one KEY, got %d arguments", len(pos))
	}
	format, err := formatFor(*decode, pos[0])
	if err != nil {
		return err
	}
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	e, err := c.Get(ctx, pos[0])
	if err != nil {
		return err
	}
	out := e.Value
	if format == decodeDeviceState {
		if out, err = decodeDeviceStateJSON(e.Value, *compact); err != nil {
			return fmt.Errorf("%s: %w", pos[0], err)
		}
	}
	if _, err := a.Stdout.Write(out); err != nil {
		return err
	}
	if *verbose {
		fmt.Fprintf(a.Stderr, "version %s\n", e.Version)
	}
	return nil
}
