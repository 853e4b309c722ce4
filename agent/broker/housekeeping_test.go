package broker

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// expiryHook reports what mochi's event loop expired or sent.
type expiryHook struct {
	mqtt.HookBase
	clients  chan string // OnClientExpired: client id
	retained chan string // OnRetainedExpired: topic
	dropped  chan string // OnQosDropped: client id
}

func newExpiryHook() *expiryHook {
	return &expiryHook{clients: make(chan string, 16), retained: make(chan string, 16), dropped: make(chan string, 16)}
}

func (h *expiryHook) ID() string { return "test-expiry" }
func (h *expiryHook) Provides(b byte) bool {
	return b == mqtt.OnClientExpired || b == mqtt.OnRetainedExpired || b == mqtt.OnQosDropped
}
func (h *expiryHook) OnClientExpired(cl *mqtt.Client) { h.clients <- cl.ID }
func (h *expiryHook) OnRetainedExpired(filter string) {
	select {
	case h.retained <- filter:
	default: // mochi's own retained $SYS messages expire under a short MaxMessageExpiry
	}
}
func (h *expiryHook) OnQosDropped(cl *mqtt.Client, _ packets.Packet) {
	select {
	case h.dropped <- cl.ID:
	default:
	}
}

func expect(t *testing.T, ch <-chan string, want, what string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("%s: got %q, want %q", what, got, want)
		}
	case <-time.After(waitFor):
		t.Fatalf("%s: nothing within %v", what, waitFor)
	}
}

// eventually polls cond (state that no event announces) until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, waitFor)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// parkedFor reports whether no housekeeping task is due within d.
func parkedFor(b *Broker, d time.Duration) bool {
	due, _ := b.housekeeper.pending()
	limit := time.Now().Add(d)
	for _, at := range due {
		if !at.IsZero() && at.Before(limit) {
			return false
		}
	}
	return true
}

// TestHousekeeperDrivesTheLoop: New replaces the event loop's tickers (mochi's
// Options.LoopTicks) by a channel per task that the housekeeper sends on.
func TestHousekeeperDrivesTheLoop(t *testing.T) {
	b, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.housekeeper == nil {
		t.Fatal("the broker runs without its housekeeper")
	}
	for task, ch := range b.housekeeper.loop.C {
		if ch == nil {
			t.Fatalf("no channel for task %d", task)
		}
	}
	if b.housekeeper.loop.WillDelayed == nil {
		t.Fatal("the housekeeper cannot see the delayed wills")
	}
}

// TestIdleBrokerIsParked: after clients came, exchanged QoS 1 messages and left with clean
// sessions, nothing is due for an hour and the loop got no tick.
func TestIdleBrokerIsParked(t *testing.T) {
	b := startBroker(t, Options{DataDir: t.TempDir()})
	sub := dial(t, b.Addr(), "sub", dialOptions{noSubscribe: true, subscribe: []string{"results"}})
	pub := dial(t, b.Addr(), "pub", dialOptions{noSubscribe: true})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := pub.c.Publish(ctx, &paho.Publish{Topic: "results", QoS: 1, Payload: []byte("r")}); err != nil {
		t.Fatal(err)
	}
	<-sub.other
	sub.close()
	pub.close()
	if !parkedFor(b, 30*time.Minute) {
		due, _ := b.housekeeper.pending()
		t.Fatalf("idle broker has housekeeping due soon: %v", due)
	}
	if _, ticks := b.housekeeper.pending(); ticks != [numTasks]int64{} {
		t.Fatalf("ticks sent to an idle broker's loop: %v", ticks)
	}
}

// TestPersistentSessionExpires: a disconnected session with an expiry of 1 s is removed, and
// the housekeeper parks again afterwards.
func TestPersistentSessionExpires(t *testing.T) {
	events := newExpiryHook()
	b := startBroker(t, Options{}, events)
	f := false
	bo := dial(t, b.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 1, noSubscribe: true, subscribe: []string{"results"}})
	bo.close()
	expect(t, events.clients, "back-office", "session expiry")
	// mochi calls OnClientExpired just before it deletes the client (clearExpiredClients).
	eventually(t, "the expired session forgotten", func() bool {
		_, ok := b.Server().Clients.Get("back-office")
		return !ok
	})
	eventually(t, "parked after the expiry", func() bool { return parkedFor(b, 30*time.Minute) })
	if _, ticks := b.housekeeper.pending(); ticks[taskClients] > 3 {
		t.Fatalf("%d client-expiry ticks for one expiry", ticks[taskClients])
	}
}

// TestRetainedMessageExpires: a retained message with a message expiry of 1 s disappears.
func TestRetainedMessageExpires(t *testing.T) {
	events := newExpiryHook()
	b := startBroker(t, Options{}, events)
	pub := dial(t, b.Addr(), "pub", dialOptions{noSubscribe: true})
	one := uint32(1)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err := pub.c.Publish(ctx, &paho.Publish{
		Topic: "status/door", QoS: 1, Retain: true, Payload: []byte("open"),
		Properties: &paho.PublishProperties{MessageExpiry: &one},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(b.Server().Topics.Messages("status/door")); n != 1 {
		t.Fatalf("%d retained messages before the expiry", n)
	}
	expect(t, events.retained, "status/door", "retained expiry")
	if n := len(b.Server().Topics.Messages("status/door")); n != 0 {
		t.Fatalf("%d retained messages after the expiry", n)
	}
}

// TestInflightMessageExpires: a message with a message expiry of 1 s, queued for an offline
// persistent session, is dropped once expired and not delivered when the session resumes.
func TestInflightMessageExpires(t *testing.T) {
	events := newExpiryHook()
	b := startBroker(t, Options{}, events)
	f := false
	bo := dial(t, b.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"results"}})
	bo.close()
	pub := dial(t, b.Addr(), "pub", dialOptions{noSubscribe: true})
	one := uint32(1)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err := pub.c.Publish(ctx, &paho.Publish{
		Topic: "results", QoS: 1, Payload: []byte("stale"),
		Properties: &paho.PublishProperties{MessageExpiry: &one},
	})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, events.dropped, "back-office", "in-flight expiry")
	bo = dial(t, b.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600})
	bo.none()
}

// TestDelayedWillIsSent: a client that drops its connection with a will delayed by 1 s has
// its will published by the loop.
func TestDelayedWillIsSent(t *testing.T) {
	b := startBroker(t, Options{})
	watcher := dial(t, b.Addr(), "watcher", dialOptions{noSubscribe: true, subscribe: []string{"wills/#"}})

	conn, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {}})
	one, ten := uint32(1), uint32(10)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err = c.Connect(ctx, &paho.Connect{
		ClientID: "gateway", KeepAlive: 30, CleanStart: true,
		Properties:     &paho.ConnectProperties{SessionExpiryInterval: &ten},
		WillMessage:    &paho.WillMessage{Topic: "wills/gateway", QoS: 1, Payload: []byte("gone")},
		WillProperties: &paho.WillProperties{WillDelayInterval: &one},
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close() // no DISCONNECT: the will applies
	<-c.Done()
	select {
	case m := <-watcher.other:
		if m.Topic != "wills/gateway" || string(m.Payload) != "gone" {
			t.Fatalf("got %s %q", m.Topic, m.Payload)
		}
	case <-time.After(waitFor):
		t.Fatal("the delayed will was not sent")
	}
}

// TestSysTopicsWhileSubscribed: $SYS values are published every interval while someone
// subscribes to them, and not once nobody does.
func TestSysTopicsWhileSubscribed(t *testing.T) {
	b := startBroker(t, Options{})
	if !parkedFor(b, 30*time.Minute) {
		t.Fatal("$SYS scheduled without a subscriber")
	}
	sub := dial(t, b.Addr(), "sys", dialOptions{noSubscribe: true, subscribe: []string{"$SYS/broker/uptime"}})
	fresh := 0
	for fresh < 2 {
		select {
		case m := <-sub.other:
			if !m.Retain {
				fresh++
			}
		case <-time.After(waitFor):
			t.Fatalf("%d $SYS updates within %v", fresh, waitFor)
		}
	}
	sub.close()
	eventually(t, "$SYS parked after the subscriber left", func() bool { return parkedFor(b, 30*time.Minute) })
}

// TestMessageWithoutExpiryWaitsForItsSession: a message without a Message Expiry, queued for
// an offline kept session, has no expiry at all by default (mochi's 24 h maximum dropped a
// back office's results when it was away for longer), and MaxMessageExpiry caps it.
func TestMessageWithoutExpiryWaitsForItsSession(t *testing.T) {
	for _, c := range []struct {
		name   string
		max    time.Duration
		expire bool
	}{{"default", 0, false}, {"capped", time.Second, true}} {
		t.Run(c.name, func(t *testing.T) {
			events := newExpiryHook()
			b := startBroker(t, Options{MaxMessageExpiry: c.max}, events)
			f := false
			bo := dial(t, b.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"results"}})
			bo.close()
			pub := dial(t, b.Addr(), "pub", dialOptions{noSubscribe: true})
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			if _, err := pub.c.Publish(ctx, &paho.Publish{Topic: "results", QoS: 1, Payload: []byte("r")}); err != nil {
				t.Fatal(err)
			}
			cl, ok := b.Server().Clients.Get("back-office")
			if !ok || cl.State.Inflight.Len() != 1 {
				t.Fatal("the result is not queued for the offline session")
			}
			if c.expire {
				expect(t, events.dropped, "back-office", "capped expiry")
				return
			}
			due, _ := b.housekeeper.pending()
			if at := due[taskInflight]; !at.IsZero() {
				t.Fatalf("a message without a Message Expiry is due to expire at %v", at)
			}
			bo = dial(t, b.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600})
			if p := bo.next(); p.Topic != "results" || string(p.Payload) != "r" {
				t.Fatalf("after the resume: %s %q", p.Topic, p.Payload)
			}
		})
	}
}
