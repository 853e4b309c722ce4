// Command storeflood pushes a state store against its memory bounds: it writes n keys of
// key-size bytes (SET), or registers n KEYNOTIFYs on such keys (-notify, spread over -conns
// connections), and prints how many the store accepted and what it answered to the rest. It
// is the client half of tools/bench/storebounds.sh, which measures the broker's RSS around it.
//
//	storeflood -url mqtt://127.0.0.1:1883 -n 1000 -key-size 1000000
//	storeflood -url mqtt://127.0.0.1:1883 -n 1000 -key-size 1000000 -notify -conns 10 -hold 5s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/store"
)

func main() {
	url := flag.String("url", "mqtt://127.0.0.1:1883", "broker URL")
	n := flag.Int("n", 1000, "keys to write (or registrations to make)")
	keySize := flag.Int("key-size", 1000000, "bytes of each key")
	valueSize := flag.Int("value-size", 1, "bytes of each value (SET)")
	notify := flag.Bool("notify", false, "register KEYNOTIFY on n keys that do not exist instead of SET")
	conns := flag.Int("conns", 1, "connections the requests are spread over")
	timeout := flag.Duration("timeout", 10*time.Second, "per-request timeout")
	hold := flag.Duration("hold", 0, "keep the connections (and their registrations) open this long after the summary")
	flag.Parse()
	if *n <= 0 || *keySize <= 8 || *conns <= 0 || *valueSize < 0 {
		fmt.Fprintln(os.Stderr, "storeflood: bad arguments")
		os.Exit(2)
	}
	ctx := context.Background()
	clients := make([]*store.Client, *conns)
	for i := range clients {
		c, err := store.Connect(ctx, &store.Options{URL: *url, ClientID: fmt.Sprintf("storeflood-%d", i), Timeout: *timeout})
		if err != nil {
			fmt.Fprintln(os.Stderr, "storeflood:", err)
			os.Exit(1)
		}
		defer c.Close()
		clients[i] = c
	}
	value := make([]byte, *valueSize)
	answers := map[string]int{}
	accepted := 0
	start := time.Now()
	for i := range *n {
		// Unique keys of exactly key-size bytes: the index, zero-padded.
		key := fmt.Sprintf("%0*d", *keySize, i)
		c := clients[i%len(clients)]
		var err error
		if *notify {
			_, err = c.KeyNotify(ctx, key)
		} else {
			_, err = c.Set(ctx, key, value, nil)
		}
		if err == nil {
			accepted++
			continue
		}
		answers[strings.TrimPrefix(err.Error(), "store: ")]++
	}
	verb := "SET"
	if *notify {
		verb = "KEYNOTIFY"
	}
	fmt.Printf("%s of %d keys of %d bytes in %v: %d accepted\n", verb, *n, *keySize, time.Since(start).Round(time.Millisecond), accepted)
	texts := make([]string, 0, len(answers))
	for t := range answers {
		texts = append(texts, t)
	}
	sort.Strings(texts)
	for _, t := range texts {
		fmt.Printf("  %d refused: %s\n", answers[t], t)
	}
	fmt.Println("done")
	time.Sleep(*hold)
}
