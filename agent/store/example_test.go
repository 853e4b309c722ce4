package store_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/store"
)

// A broker with the embedded store on a free port, a client, and the basic operations.
func Example() {
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		panic(err)
	}
	if err := b.Start(); err != nil {
		panic(err)
	}
	defer b.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := store.Connect(ctx, &store.Options{URL: "mqtt://" + b.Addr()})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	w, _ := c.KeyNotify(ctx, "greeting")
	v, _ := c.Set(ctx, "greeting", []byte("hello"), nil)
	e, _ := c.Get(ctx, "greeting")
	fmt.Printf("%s, same version: %v\n", e.Value, e.Version == v)
	n := <-w.C()
	fmt.Println("notified:", n.Op, string(n.Value))

	_, err = c.Set(ctx, "greeting", []byte("bye"), &store.SetOptions{Condition: store.NotExists})
	fmt.Println("NX on an existing key:", errors.Is(err, store.ErrNotApplied))
	// Output:
	// hello, same version: true
	// notified: SET hello
	// NX on an existing key: true
}

// A lease guards a key with its fencing token.
func ExampleClient_TryAcquire() {
	b, _ := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	_ = b.Start()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := store.Connect(ctx, &store.Options{URL: "mqtt://" + b.Addr(), ClientID: "gw-01-a"})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	l, err := c.TryAcquire(ctx, "faceagent/gw-01/leader", &store.LeaseOptions{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	_, err = l.Edit(ctx, "faceagent/gw-01/config", func(old []byte, found bool) ([]byte, error) {
		return []byte("max_tries = 5"), nil
	})
	fmt.Println("edited:", err == nil)
	holder, _, _ := c.LeaseHolder(ctx, "faceagent/gw-01/leader")
	fmt.Println("holder:", holder)
	fmt.Println("released:", l.Release(ctx) == nil)
	// Output:
	// edited: true
	// holder: gw-01-a
	// released: true
}
