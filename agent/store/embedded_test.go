package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// startEmbedded starts agent/broker with its state store on a free loopback port (or on
// listen, for restarts) and returns it with its mqtt:// URL.
func startEmbedded(t testing.TB, listen, dataDir string, before func(*broker.Broker)) (*broker.Broker, string) {
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	b, err := broker.New(&broker.Options{Listen: listen, AllowAnonymous: true, DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(b)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, "mqtt://" + b.Addr()
}

func TestEmbeddedOperations(t *testing.T) {
	_, url := startEmbedded(t, "", "", nil)
	testOperations(t, connect(t, url, nil))
}

func TestEmbeddedErrors(t *testing.T) {
	_, url := startEmbedded(t, "", "", nil)
	c := connect(t, url, nil)
	ctx := ctxT(t)
	// A timestamp a day ahead: the store refuses it, and the fencing token likewise.
	ahead := c.Clock().Now()
	ahead.Wall += int64(24 * time.Hour / time.Millisecond)
	if _, err := c.Set(ctx, "k", []byte("v"), &SetOptions{FencingToken: ahead}); !errors.Is(err, ErrFencingTokenSkew) {
		t.Errorf("fencing token ahead: %v", err)
	}
	// A client whose clock runs a day ahead: its __ts is refused.
	fast := connect(t, c.opts.URL, func(o *Options) {
		o.Clock = hlc.NewClock("fast", hlc.WithWallClock(func() int64 { return time.Now().Add(24 * time.Hour).UnixMilli() }))
	})
	if _, err := fast.Set(ctx, "k", []byte("v"), nil); !errors.Is(err, ErrTimestampSkew) {
		t.Errorf("__ts a day ahead: %v", err)
	}
	// Requests with __ts removed or mangled.
	bad := connect(t, c.opts.URL, nil)
	for value, want := range map[string]error{"": ErrMissingTimestamp, "yesterday": ErrMalformedTimestamp} {
		bad.testMutate = func(p *paho.Publish) {
			user := p.Properties.User[:0]
			for _, u := range p.Properties.User {
				if u.Key != "__ts" {
					user = append(user, u)
				} else if value != "" {
					user = append(user, paho.UserProperty{Key: "__ts", Value: value})
				}
			}
			p.Properties.User = user
		}
		if _, err := bad.Set(ctx, "k", []byte("v"), nil); !errors.Is(err, want) {
			t.Errorf("__ts %q: %v, want %v", value, err, want)
		}
	}
	// Wrong commands need a raw payload.
	res, err := c.invoke(ctx, request{payload: resp3.AppendBlobString(resp3.AppendArrayHeader(nil, 1), "FROB")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseReply(res.payload); !errors.Is(err, ErrUnknownCommand) {
		t.Errorf("unknown command: %v", err)
	}
	res, err = c.invoke(ctx, request{payload: resp3.AppendBlobString(resp3.AppendArrayHeader(nil, 1), "GET")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseReply(res.payload); !errors.Is(err, ErrWrongNumberOfArguments) {
		t.Errorf("GET without key: %v", err)
	}
	res, err = c.invoke(ctx, request{payload: []byte("not resp")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseReply(res.payload); !errors.Is(err, ErrSyntax) {
		t.Errorf("garbage: %v", err)
	}
}

func TestEmbeddedQuota(t *testing.T) {
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true, MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := connect(t, "mqtt://"+b.Addr(), nil)
	ctx := ctxT(t)
	if _, err := c.Set(ctx, "one", []byte("1"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Set(ctx, "two", []byte("2"), nil); !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("second key over a quota of one: %v", err)
	}
}

func TestEmbeddedLease(t *testing.T) {
	_, url := startEmbedded(t, "", "", nil)
	testLease(t, url)
}

func TestEmbeddedLeaseTakeover(t *testing.T) {
	_, url := startEmbedded(t, "", "", nil)
	testTakeover(t, url)
}

func TestEmbeddedFencingScenario(t *testing.T) {
	_, url := startEmbedded(t, "", "", nil)
	testFencingScenario(t, url)
}

func TestEmbeddedThousandConcurrent(t *testing.T) {
	_, url := startEmbedded(t, "", "", nil)
	c := connect(t, url, func(o *Options) { o.Timeout = 30 * time.Second })
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, val := fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)
			if _, err := c.Set(ctx, key, []byte(val), nil); err != nil {
				errs <- err
				return
			}
			if e, err := c.Get(ctx, key); err != nil || string(e.Value) != val {
				errs <- fmt.Errorf("GET %s = %q, %v", key, e.Value, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestEmbeddedRestart restarts the embedded broker (same address and data dir) under a
// client with a watch; while the client is away the key changes (written into the new
// broker's store before it listens), and the client reports it after reconnecting.
func TestEmbeddedRestart(t *testing.T) {
	dir := t.TempDir()
	b, url := startEmbedded(t, "", dir, nil)
	addr := b.Addr()
	c := connect(t, url, nil)
	ctx := ctxT(t)
	if _, err := c.Set(ctx, "watched", []byte("before"), &SetOptions{Persist: true}); err != nil {
		t.Fatal(err)
	}
	w, err := c.KeyNotify(ctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	down := c.linkDownSignal()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-down:
	case <-time.After(10 * time.Second):
		t.Fatal("client did not notice the broker going away")
	}
	if _, err := c.Get(ctx, "watched"); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("request while down: %v", err)
	}
	_, _ = startEmbedded(t, addr, dir, func(b *broker.Broker) {
		payload := resp3.AppendArrayHeader(nil, 3)
		payload = resp3.AppendBlobString(payload, "SET")
		payload = resp3.AppendBlobString(payload, "watched")
		payload = resp3.AppendBlobString(payload, "changed while away")
		out, _ := b.Store().Do(&statestore.Request{Payload: payload, Timestamp: c.Clock().Now().String(),
			HasTimestamp: true, Persist: true}, nil)
		if string(out) != "+OK\r\n" {
			t.Fatalf("direct SET: %q", out)
		}
	})
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if n := next(t, w); n.Op != OpSet || string(n.Value) != "changed while away" || !n.Resync {
		t.Fatalf("after reconnect: %+v", n)
	}
	other := connect(t, url, nil)
	if _, err := other.Del(ctx, "watched", nil); err != nil {
		t.Fatal(err)
	}
	if n := next(t, w); n.Op != OpDelete || n.Resync {
		t.Fatalf("after re-registration: %+v", n)
	}
}

// stallHook holds the read loop of a client that publishes a payload containing "stall",
// so the request is in flight, unanswered, when the broker goes away.
type stallHook struct {
	mqtt.HookBase
	entered chan struct{}
	release chan struct{}
}

func (h *stallHook) ID() string { return "stall" }

func (h *stallHook) Provides(b byte) bool { return b == mqtt.OnPacketRead }

func (h *stallHook) OnPacketRead(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Type == packets.Publish && bytes.Contains(pk.Payload, []byte("stall")) {
		h.entered <- struct{}{}
		<-h.release
	}
	return pk, nil
}

func TestEmbeddedRestartFailsInFlightAtOnce(t *testing.T) {
	hook := &stallHook{entered: make(chan struct{}, 1), release: make(chan struct{})}
	b, url := startEmbedded(t, "", "", func(b *broker.Broker) {
		if err := b.AddHook(hook, nil); err != nil {
			t.Fatal(err)
		}
	})
	c := connect(t, url, func(o *Options) { o.Timeout = 30 * time.Second })
	inflight := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), "stall")
		inflight <- err
	}()
	<-hook.entered
	start := time.Now()
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-inflight:
		if !errors.Is(err, ErrConnectionLost) {
			t.Fatalf("in-flight request: %v, want ErrConnectionLost", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("failed after %v; the timeout is 30s", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("in-flight request did not fail when the broker closed")
	}
	close(hook.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddedAuthorization: key rules answer "not authorized"; a broker ACL that refuses the
// invoke topic answers the PUBLISH with PUBACK 0x87, reported as ErrNotAuthorized too, without
// waiting for the timeout.
func TestEmbeddedAuthorization(t *testing.T) {
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true, Anonymous: &broker.Rules{
		Publish:   []string{invokeTopic},
		Subscribe: []string{"clients/#"},
		ReadKeys:  []string{"public/"},
		WriteKeys: []string{"public/"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := connect(t, "mqtt://"+b.Addr(), nil)
	ctx := ctxT(t)
	if _, err := c.Set(ctx, "public/k", []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Set(ctx, "private/k", []byte("v"), nil); !errors.Is(err, ErrNotAuthorized) {
		t.Fatalf("write outside the key rules: %v", err)
	}

	denied, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true, Anonymous: &broker.Rules{
		Publish: []string{"nothing/allowed"}, Subscribe: []string{"clients/#"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := denied.Start(); err != nil {
		t.Fatal(err)
	}
	defer denied.Close()
	d := connect(t, "mqtt://"+denied.Addr(), func(o *Options) { o.Timeout = 20 * time.Second })
	start := time.Now()
	if _, err := d.Get(ctx, "k"); !errors.Is(err, ErrNotAuthorized) {
		t.Fatalf("publish refused by the ACL: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
}
