package broker

import (
	"fmt"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestRestoredSessionGetsWhatWasPublishedWhileAway: after a crash, messages published to a
// restored persistent session before its client reconnects all reach it. The session was
// opened with a clean start and a session expiry, as a back office does on first contact.
func TestRestoredSessionGetsWhatWasPublishedWhileAway(t *testing.T) {
	dir := t.TempDir()
	b1 := startBroker(t, Options{AllowAnonymous: true, DataDir: dir})
	dial(t, b1.Addr(), "back-office", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"results"}})
	crashed := crashCopy(t, dir)

	b2 := startBroker(t, Options{AllowAnonymous: true, DataDir: crashed})
	const total = 20
	for i := range total {
		if err := b2.Server().Publish("results", []byte(fmt.Sprint(i)), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	f := false
	back := dial(t, b2.Addr(), "back-office", dialOptions{cleanStart: &f, sessionExpiry: 3600, noSubscribe: true})
	seen := map[string]bool{}
	for len(seen) < total {
		select {
		case m := <-back.other:
			seen[string(m.Payload)] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d messages published while the session was away", len(seen), total)
		}
	}
}

// TestInlineSubscriptionsAreNotRestored: an in-process subscription is not stored as a
// session, so after a restart nothing is held in flight for mochi's inline client.
func TestInlineSubscriptionsAreNotRestored(t *testing.T) {
	dir := t.TempDir()
	b1, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Start(); err != nil {
		t.Fatal(err)
	}
	if err := b1.Server().Subscribe("dev/face/+/heartbeat", 1, func(*mqtt.Client, packets.Subscription, packets.Packet) {}); err != nil {
		t.Fatal(err)
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}

	b2 := startBroker(t, Options{AllowAnonymous: true, DataDir: dir})
	for range 5 {
		if err := b2.Server().Publish("dev/face/1/heartbeat", []byte("{}"), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	inline, ok := b2.Server().Clients.Get(mqtt.InlineClientId)
	if !ok {
		t.Fatal("no inline client")
	}
	if n := inline.State.Inflight.Len(); n != 0 {
		t.Fatalf("%d messages held in flight for the inline client after a restart", n)
	}
	if subs := inline.State.Subscriptions.GetAll(); len(subs) != 0 {
		t.Fatalf("inline client has restored subscriptions %v", subs)
	}
}
