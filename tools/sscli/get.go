package main

import (
	"context"
	"flag"
	"fmt"
)

// runGet: sscli get KEY [-v] — the raw value on stdout, the version on stderr with -v.
func runGet(ctx context.Context, a *app, args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "print the version on stderr")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one KEY, got %d arguments", len(pos))
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
	if _, err := a.Stdout.Write(e.Value); err != nil {
		return err
	}
	if *verbose {
		fmt.Fprintf(a.Stderr, "version %s\n", e.Version)
	}
	return nil
}
