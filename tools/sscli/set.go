package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/hlc"
)

// runSet: sscli set KEY VALUE|@FILE|- [--nx|--nex] [--px 10s] [--fencing HLC] [--persist] [-v].
func runSet(ctx context.Context, a *app, args []string) error {
	fs := flag.NewFlagSet("set", flag.ContinueOnError)
	nx := fs.Bool("nx", false, "only if the key does not exist")
	nex := fs.Bool("nex", false, "only if the key does not exist or holds the same value")
	px := fs.Duration("px", 0, "expire the key after this long")
	fencing := fs.String("fencing", "", "fencing token (an HLC, e.g. a lease's version)")
	persist := fs.Bool("persist", false, "keep the key on disk across store restarts")
	verbose := fs.Bool("v", false, "print the version on stderr")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("want KEY and VALUE, got %d arguments", len(pos))
	}
	if *nx && *nex {
		return usagef("--nx and --nex exclude each other")
	}
	if *px < 0 || (*px > 0 && *px < time.Millisecond) {
		return usagef("--px %v: want at least 1ms", *px)
	}
	opts := &store.SetOptions{Expiry: *px, Persist: *persist}
	switch {
	case *nx:
		opts.Condition = store.NotExists
	case *nex:
		opts.Condition = store.NotExistsOrEqual
	}
	if opts.FencingToken, err = parseToken(*fencing); err != nil {
		return err
	}
	value, err := a.readValue(pos[1])
	if err != nil {
		return err
	}
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	v, err := c.Set(ctx, pos[0], value, opts)
	if err != nil {
		if !v.IsZero() {
			return fmt.Errorf("%w (stored version %s)", err, v)
		}
		return err
	}
	fmt.Fprintln(a.Stdout, "OK")
	if *verbose {
		fmt.Fprintf(a.Stderr, "version %s\n", v)
	}
	return nil
}

// readValue reads VALUE: "-" is stdin, "@file" a file, anything else the bytes themselves.
func (a *app) readValue(arg string) ([]byte, error) {
	switch {
	case arg == "-":
		return io.ReadAll(a.Stdin)
	case strings.HasPrefix(arg, "@"):
		return os.ReadFile(arg[1:])
	}
	return []byte(arg), nil
}

func parseToken(s string) (hlc.Timestamp, error) {
	if s == "" {
		return hlc.Timestamp{}, nil
	}
	t, err := hlc.ParseString(s)
	if err != nil {
		return t, usagef("--fencing %q: %v", s, err)
	}
	return t, nil
}
