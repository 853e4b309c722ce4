package broker

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// A sessions journal written under larger bounds (or none) is held to the broker's bounds
// at start: sessions beyond max_clients, subscriptions beyond max_subscriptions, messages
// beyond max_session_bytes (the newest) and retained messages beyond max_retained_bytes
// are dropped, logged once with counts, and gone from the journal at the next start.
func TestRestartHoldsTheJournalToTheBounds(t *testing.T) {
	dir := t.TempDir()
	b1, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true, DataDir: dir, MaxSubscriptions: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Start(); err != nil {
		t.Fatal(err)
	}
	var filters []string
	for i := range 30 {
		filters = append(filters, fmt.Sprintf("big/%d", i))
	}
	big := dial(t, b1.Addr(), "big", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: filters})
	big.close()
	for i := range 4 {
		dial(t, b1.Addr(), fmt.Sprintf("k%d", i), dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"k"}}).close()
	}
	msg := make([]byte, 1000)
	for i := range 50 {
		binary.BigEndian.PutUint64(msg, uint64(i))
		if err := b1.Server().Publish("big/0", msg, false, 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if err := b1.Server().Publish(fmt.Sprintf("ret/%d", i), msg, true, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}

	routed := mqtt.MessageBytes(&packets.Packet{TopicName: "big/0", Payload: msg})
	var subs10 int64
	for _, f := range filters[:10] {
		subs10 += mqtt.SubscriptionBytes(f)
	}
	retained := mqtt.RetainedBytes(&packets.Packet{TopicName: "ret/0", Payload: msg})
	bounds := Options{Listen: "127.0.0.1:0", AllowAnonymous: true, DataDir: dir,
		MaxClients: 3, MaxSubscriptions: 10, MaxSessionBytes: subs10 + 12*routed + routed/2, MaxRetainedBytes: 3*retained + retained/2}
	var logs logBuffer
	o := bounds
	o.Logger = logs.logger()
	b2 := startBroker(t, o)
	warned := strings.Count(logs.String(), "holds more than the broker's bounds allow")
	if warned != 1 {
		t.Fatalf("%d warnings about the journal's size, want 1:\n%s", warned, logs.String())
	}
	for _, want := range []string{"sessions=2", "subscriptions=20", "messages=38", "retained=7"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the warning lacks %s:\n%s", want, logs.String())
		}
	}
	srv := b2.Server()
	cl, ok := srv.Clients.Get("big")
	if !ok {
		t.Fatal("the first session was dropped")
	}
	if n := cl.State.Subscriptions.Len(); n != 10 {
		t.Errorf("big has %d subscriptions, want 10", n)
	}
	held := cl.State.Inflight.GetAll(false)
	if len(held) != 12 {
		t.Errorf("big holds %d messages, want 12", len(held))
	}
	for _, m := range held {
		if i := binary.BigEndian.Uint64(m.Payload); i >= 12 {
			t.Errorf("big holds message %d: not one of the oldest", i)
		}
	}
	if s := cl.SessionBytes(); s > bounds.MaxSessionBytes {
		t.Errorf("big's session: %d bytes, bound %d", s, bounds.MaxSessionBytes)
	}
	known := 0
	for id, c := range srv.Clients.GetAll() {
		if !c.Net.Inline {
			known++
		}
		if id == "k2" || id == "k3" {
			t.Errorf("session %s kept beyond max_clients", id)
		}
	}
	if known != 3 {
		t.Errorf("%d sessions restored, want 3", known)
	}
	if n := len(srv.Topics.Messages("ret/#")); n != 3 || b2.RetainedBytes() > bounds.MaxRetainedBytes {
		t.Errorf("%d retained messages, %d bytes; want 3 within %d", n, b2.RetainedBytes(), bounds.MaxRetainedBytes)
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}

	// What was dropped is gone from the journal: the next start has nothing to drop.
	logs = logBuffer{}
	o.Logger = logs.logger()
	b3 := startBroker(t, o)
	if strings.Contains(logs.String(), "holds more than") {
		t.Errorf("dropped again at the next start:\n%s", logs.String())
	}
	if cl, ok := b3.Server().Clients.Get("big"); !ok || cl.State.Inflight.Len() != 12 || cl.State.Subscriptions.Len() != 10 {
		t.Errorf("the next start restored a different state")
	}
}

// TestRestartCountsOnlyLiveSessions: max_clients counts the client ids the journal holds
// sessions of at the end of the replay's step, not every id it ever held one of. Sessions
// that came and went since the last compaction (a tool run with a fresh id and a session
// expiry, a client that started clean) take no slot, or a session kept after max_clients
// of them would be dropped at the next start, though the broker held only it.
func TestRestartCountsOnlyLiveSessions(t *testing.T) {
	dir := t.TempDir()
	o := Options{Listen: "127.0.0.1:0", AllowAnonymous: true, DataDir: dir, MaxClients: 3}
	b1, err := New(&o)
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Start(); err != nil {
		t.Fatal(err)
	}
	clean := true
	for i := range 5 {
		id := fmt.Sprintf("gone-%d", i)
		dial(t, b1.Addr(), id, dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"t"}}).close()
		// A clean start with no session expiry ends the kept session: its records are deleted.
		dial(t, b1.Addr(), id, dialOptions{cleanStart: &clean, noSubscribe: true}).close()
	}
	dial(t, b1.Addr(), "kept", dialOptions{sessionExpiry: 3600, noSubscribe: true, subscribe: []string{"t"}}).close()
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}

	var logs logBuffer
	o.Logger = logs.logger()
	b2 := startBroker(t, o)
	cl, ok := b2.Server().Clients.Get("kept")
	if !ok {
		t.Fatalf("the only session kept was dropped at start:\n%s", logs.String())
	}
	if n := cl.State.Subscriptions.Len(); n != 1 {
		t.Errorf("kept has %d subscriptions, want 1", n)
	}
	if strings.Contains(logs.String(), "holds more than") {
		t.Errorf("something was dropped at start:\n%s", logs.String())
	}
}
