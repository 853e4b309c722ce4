package soakclient

import (
	"context"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// Against the embedded broker, one request in flight: every answer is right, and after the
// broker is closed and started again on the same data directory (a clean restart: keys not
// kept with aio-persistence are gone) the client resumes its session and gets every
// request answered, with nothing extra.
func TestEmbeddedBrokerRestart(t *testing.T) {
	dir, addr := t.TempDir(), testutil.FreeAddr(t)
	start := func() *broker.Broker {
		b, err := broker.New(&broker.Options{Listen: addr, AllowAnonymous: true, DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := start()
	c := dial(t, addr, Options{Reconnect: 20 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		rep *Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := c.Run(ctx, RunOptions{Requests: 600, InFlight: 1})
		done <- result{rep, err}
	}()
	if err := c.WaitAnswered(ctx, 300); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = start()
	defer b.Close()
	r := <-done
	if r.err != nil || r.rep.Err() != nil || r.rep.Drops != 1 || r.rep.Resumes != 1 {
		t.Fatalf("%v\n%v", r.err, r.rep.Err())
	}
	t.Log(r.rep)
}
