package store

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/hlc"
)

// TestResponseParsingAllocatesNothing: from the response packet to the value in the waiting
// request, the client allocates nothing (the payload and its properties are paho's).
func TestResponseParsingAllocatesNothing(t *testing.T) {
	c := &Client{clock: hlc.NewClock("allocs"), pending: map[[16]byte]*call{}}
	c.opts.ClientID = "allocs"
	version := hlc.Timestamp{Wall: time.Now().UnixMilli(), Counter: 3, Node: "StateStore"}.String()
	for _, payload := range []string{"$5\r\nhello\r\n", "+OK\r\n", ":1\r\n", ":-1\r\n", "$-1\r\n"} {
		id := [16]byte{1, 2, 3}
		pkt := &paho.Publish{Topic: c.respTopic, Payload: []byte(payload), Properties: &paho.PublishProperties{
			CorrelationData: id[:],
			User:            paho.UserProperties{{Key: "__stat", Value: "200"}, {Key: "__protVer", Value: "1.0"}, {Key: "__ts", Value: version}},
		}}
		cl := &call{ch: make(chan result, 1)}
		allocs := testing.AllocsPerRun(200, func() {
			c.pending[id] = cl
			c.onResponse(pkt)
			res := <-cl.ch
			if res.err != nil {
				t.Fatal(res.err)
			}
			v, err := parseReply(res.payload)
			if err != nil || (v.Kind == 0 && !v.IsNull()) {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%q: %v allocations per response", payload, allocs)
		}
	}
}

// The broker child process: allocation figures of the client are only the client's when
// the broker does not share its heap.
const childEnv = "FACEAGENT_STORE_TEST_BROKER"

// serveChild runs a broker for a parent benchmark when the environment asks for one: it
// prints "ADDR url" and serves until stdin closes. It returns false in ordinary runs.
func serveChild() bool {
	kind := os.Getenv(childEnv)
	if kind == "" {
		return false
	}
	var (
		u    string
		stop func()
		err  error
	)
	switch kind {
	case "echo":
		u, stop, err = serveEcho()
	case "store":
		var b *broker.Broker
		if b, err = broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true}); err == nil {
			if err = b.Start(); err == nil {
				u, stop = "mqtt://"+b.Addr(), func() { _ = b.Close() }
			}
		}
	}
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	fmt.Println("ADDR", u)
	_, _ = io.Copy(io.Discard, os.Stdin)
	stop()
	return true
}

func startChild(b *testing.B, kind string) string {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+kind)
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		b.Fatalf("child broker: %q %v", line, err)
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))
}

// BenchmarkClientRoundTrip measures one request at a time against a broker in a child
// process, so allocs/op are the client's alone: paho's plus ours. echo-paho is the bare paho
// client of BenchmarkRoundTrip, for the part that is paho's.
func BenchmarkClientRoundTrip(b *testing.B) {
	value := []byte("0123456789abcdef0123456789abcdef")
	b.Run("echo-paho", func(b *testing.B) {
		r := newRawPaho(b, startChild(b, "echo"))
		runInFlight(b, 1, r.roundTrip)
	})
	b.Run("get", func(b *testing.B) {
		c := connect(b, startChild(b, "store"), nil)
		if _, err := c.Set(context.Background(), "k", value, nil); err != nil {
			b.Fatal(err)
		}
		runInFlight(b, 1, func(ctx context.Context) error { _, err := c.Get(ctx, "k"); return err })
	})
	b.Run("set", func(b *testing.B) {
		c := connect(b, startChild(b, "store"), nil)
		runInFlight(b, 1, func(ctx context.Context) error { _, err := c.Set(ctx, "k", value, nil); return err })
	})
}
