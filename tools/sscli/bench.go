package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// runBench: sscli bench [-n 10000] [-c 16] [--size 32] [--op set|get] — n requests with c in
// flight on one connection; a progress bar on stderr, the figures on stdout.
func runBench(ctx context.Context, a *app, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	n := fs.Int("n", 10000, "number of requests")
	conc := fs.Int("c", 16, "requests in flight")
	size := fs.Int("size", 32, "value size in bytes")
	op := fs.String("op", "set", "set or get")
	prefix := fs.String("prefix", "sscli-bench/", "key prefix")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || *n <= 0 || *conc <= 0 || *size < 0 || (*op != "set" && *op != "get") {
		return usagef("bad arguments")
	}
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	value := []byte(strings.Repeat("x", *size))
	keys := min(*n, 1000)
	if *op == "get" {
		for i := range keys {
			if _, err := c.Set(ctx, fmt.Sprintf("%s%d", *prefix, i), value, nil); err != nil {
				return err
			}
		}
	}
	lat := make([]time.Duration, *n)
	var next, done, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	stopBar := progress(a.Stderr, *n, &done)
	for range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= *n || ctx.Err() != nil {
					return
				}
				key := fmt.Sprintf("%s%d", *prefix, i%keys)
				t0 := time.Now()
				var err error
				if *op == "set" {
					_, err = c.Set(ctx, key, value, nil)
				} else {
					_, err = c.Get(ctx, key)
				}
				lat[i] = time.Since(t0)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopBar()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Fprintf(a.Stdout, "%s: %d requests, %d in flight, %d-byte values, %d failed\n", strings.ToUpper(*op), *n, *conc, *size, failed.Load())
	fmt.Fprintf(a.Stdout, "throughput: %.0f ops/s\n", float64(*n)/elapsed.Seconds())
	fmt.Fprintf(a.Stdout, "latency: p50 %v  p90 %v  p99 %v  max %v\n",
		pct(0.50).Round(time.Microsecond), pct(0.90).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	if err, _ := firstErr.Load().(error); err != nil {
		return fmt.Errorf("%d requests failed; first: %w", failed.Load(), err)
	}
	return nil
}

// progress draws a bar on w every 100ms until the returned function is called.
func progress(w io.Writer, total int, done *atomic.Int64) (stop func()) {
	quit, finished := make(chan struct{}), make(chan struct{})
	draw := func() {
		d := int(done.Load())
		const width = 30
		fill := width * d / total
		fmt.Fprintf(w, "\r[%s%s] %3d%% %d/%d", strings.Repeat("#", fill), strings.Repeat(" ", width-fill), 100*d/total, d, total)
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				draw()
			case <-quit:
				draw()
				fmt.Fprintln(w)
				return
			}
		}
	}()
	return func() { close(quit); <-finished }
}
