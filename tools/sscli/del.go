package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/seed0e69bba5/faceagent/agent/store"
)

// runDel: sscli del KEY [--fencing HLC] [-v].
func runDel(ctx context.Context, a *app, args []string) error {
	return deleteCommand(ctx, a, "del", 1, args)
}

// runVDel: sscli vdel KEY VALUE [--fencing HLC] [-v] — deletes only if KEY holds VALUE.
func runVDel(ctx context.Context, a *app, args []string) error {
	return deleteCommand(ctx, a, "vdel", 2, args)
}

func deleteCommand(ctx context.Context, a *app, name string, want int, args []string) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fencing := fs.String("fencing", "", "fencing token (an HLC)")
	verbose := fs.Bool("v", false, "print the deleted value's version on stderr")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != want {
		return usagef("want %d arguments, got %d", want, len(pos))
	}
	opts := &store.DelOptions{}
	if opts.FencingToken, err = parseToken(*fencing); err != nil {
		return err
	}
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var v interface{ IsZero() bool }
	if want == 1 {
		v, err = c.Del(ctx, pos[0], opts)
	} else {
		var value []byte
		if value, err = a.readValue(pos[1]); err != nil {
			return err
		}
		v, err = c.VDel(ctx, pos[0], value, opts)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(a.Stdout, "OK")
	if *verbose {
		fmt.Fprintf(a.Stderr, "version %s\n", v)
	}
	return nil
}
