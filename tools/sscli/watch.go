package main

import (
	"context"
	"flag"
	"fmt"
	"reflect"
	"strconv"

	"github.com/seed0e69bba5/faceagent/agent/store"
)

// runWatch: sscli watch KEY... — one line per change until Ctrl-C:
//
//	KEY SET "value" VERSION
//	KEY DELETE VERSION
//
// with " resync" appended to changes found after a reconnect.
func runWatch(ctx context.Context, a *app, args []string) error {
	fs := flag.NewFlagSet("watch", flag.ContinueOnError)
	keys, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return usagef("want at least one KEY")
	}
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}}
	for _, k := range keys {
		w, err := c.KeyNotify(ctx, k)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.C())})
	}
	fmt.Fprintf(a.Stderr, "watching %d key(s); Ctrl-C to stop\n", len(keys))
	for {
		i, v, ok := reflect.Select(cases)
		if i == 0 {
			return nil // Ctrl-C
		}
		if !ok {
			return store.ErrClosed
		}
		n := v.Interface().(store.Notification)
		line := n.Key + " " + n.Op.String()
		if n.Op == store.OpSet {
			line += " " + strconv.Quote(string(n.Value))
		}
		line += " " + n.Version.String()
		if n.Resync {
			line += " resync"
		}
		fmt.Fprintln(a.Stdout, line)
	}
}
