package broker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	mp "github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
)

// keyNotifyRaw registers a raw client for key and reads the PUBACK.
func (c *rawClient) keyNotify(id uint16, key string) {
	c.t.Helper()
	c.send(mp.Packet{
		FixedHeader: mp.FixedHeader{Type: mp.Publish, Qos: 1},
		TopicName:   InvokeTopic,
		PacketID:    id,
		Payload:     cmd("KEYNOTIFY", key),
		Properties: mp.Properties{ResponseTopic: "raw/response", CorrelationData: []byte("c1"),
			User: []mp.UserProperty{{Key: "__ts", Val: "1:0:raw"}}},
	})
	if pk := c.read(); pk.FixedHeader.Type != mp.Puback || pk.PacketID != id || pk.ReasonCode >= 0x80 {
		c.t.Fatalf("KEYNOTIFY PUBACK: %+v", pk)
	}
}

// TestWatcherThatNeverAcksIsDisconnected: a watcher that fills its Receive
// Maximum with a notification and acknowledges nothing is disconnected with
// 0x97 once the next notification waited NotifyAckTimeout, though its queue
// is far from full: a notification never waits for room forever.
func TestWatcherThatNeverAcksIsDisconnected(t *testing.T) {
	const timeout = 300 * time.Millisecond
	b := startBroker(t, Options{NotifyAckTimeout: timeout})
	watcher := dialRaw(t, b.Addr(), "stall-watcher", 1)
	watcher.keyNotify(1, "hot")
	writer := dial(t, b.Addr(), "stall-writer", dialOptions{})
	for i := range 2 {
		if p := writer.do(cmd("SET", "hot", fmt.Sprint(i)), req{}); string(p.Payload) != "+OK\r\n" {
			t.Fatalf("SET %d: %q", i, p.Payload)
		}
	}
	if pk := watcher.read(); pk.FixedHeader.Type != mp.Publish || !strings.HasPrefix(pk.TopicName, NotifyTopicPrefix) {
		t.Fatalf("first notification: %+v", pk)
	}
	start := time.Now() // the second notification waits for room from about now
	pk := watcher.read()
	if pk.FixedHeader.Type != mp.Disconnect || pk.ReasonCode != CodeNotifyStalled.Code {
		t.Fatalf("got %+v, want DISCONNECT 0x%02x", pk, CodeNotifyStalled.Code)
	}
	if waited := time.Since(start); waited < timeout/2 {
		t.Fatalf("disconnected after %v, NotifyAckTimeout %v", waited, timeout)
	}
	eventually(t, "the budget given back", func() bool { return b.service.notifyBudget.Used() == 0 })
}

// TestUnacknowledgedNotificationsAreBounded: a watcher with a large Receive
// Maximum that acknowledges nothing gets notifications only up to the byte
// budget (Options.MaxBytes, shared by all watchers), then is disconnected
// with 0x97; the notifications' bytes are counted until acknowledged, not
// only while queued, so 64 KiB values cannot pile up in flight without bound.
func TestUnacknowledgedNotificationsAreBounded(t *testing.T) {
	const budget, valueSize = 1 << 20, 64 << 10
	b := startBroker(t, Options{MaxBytes: budget, MaxInflight: 1000, ReceiveMaximum: 1000})
	watcher := dialRaw(t, b.Addr(), "greedy-watcher", 1000)
	watcher.keyNotify(1, "big")
	writer := dial(t, b.Addr(), "big-writer", dialOptions{})
	value := strings.Repeat("v", valueSize)
	const sets = 40
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range sets {
			writer.do(cmd("SET", "big", value), req{})
		}
	}()
	published := 0
	for range sets + 1 {
		pk := watcher.read()
		if pk.FixedHeader.Type == mp.Publish {
			published++
			continue
		}
		if pk.FixedHeader.Type != mp.Disconnect || pk.ReasonCode != CodeNotifyOverflow.Code {
			t.Fatalf("got %+v, want DISCONNECT 0x%02x", pk, CodeNotifyOverflow.Code)
		}
		break
	}
	if limit := budget / valueSize; published > limit {
		t.Fatalf("%d notifications of %d bytes unacknowledged, budget %d", published, valueSize, budget)
	}
	<-done
	eventually(t, "the budget given back", func() bool { return b.service.notifyBudget.Used() == 0 })
}

// TestResponseTopicHexAlias: the Go SDK's response topic names its client
// in upper-case hex, which is also a client id in its own right: client "AB"
// answers itself on clients/4142/…, client "4142"'s namespace. The alias
// covers only that one topic, and only while no client "4142" exists;
// anything else under clients/4142/ belongs to "4142": "AB" cannot have the
// store publish anywhere else under clients/4142/.
func TestResponseTopicHexAlias(t *testing.T) {
	b := startBroker(t, Options{UsersFile: writeUsersFile(t)})
	device := dialOptions{user: "device", password: "device-secret"}
	ab := dial(t, b.Addr(), "AB", device)
	if goResponseTopic("AB") != "clients/4142/"+InvokeTopic+"/response" {
		t.Fatalf("helper: %s", goResponseTopic("AB"))
	}
	if p := ab.do(cmd("GET", "faceagent/x"), req{}); string(p.Payload) != "$-1\r\n" {
		t.Fatalf("the Go SDK's topic, no client 4142: %q", p.Payload)
	}
	for _, rt := range []string{
		"clients/4142/services/statestore/_any_/command/invoke/response", // 4142's Rust SDK topic
		"clients/4142/" + InvokeTopic,                                    // 4142's .NET SDK topic
		"clients/4142/anything",
	} {
		rt := rt
		if _, _, err := ab.publish(cmd("GET", "k"), req{responseTopic: &rt}); err == nil {
			t.Errorf("AB may have responses published on %s", rt)
		}
	}
	// Once a client 4142 exists, even the Go SDK's topic is its namespace.
	owner := dial(t, b.Addr(), "4142", device)
	goTopic := goResponseTopic("AB")
	if _, _, err := ab.publish(cmd("GET", "k"), req{responseTopic: &goTopic}); err == nil {
		t.Error("AB may have responses published in the namespace of the connected client 4142")
	}
	own := "clients/4142/services/statestore/_any_/command/invoke/response"
	if _, _, err := owner.publish(cmd("GET", "k"), req{responseTopic: &own}); err != nil {
		t.Errorf("4142 refused its own namespace: %v", err)
	}
	for _, c := range []struct {
		id, topic string
		known     bool
		want      bool
	}{
		{"AB", "clients/AB/x", false, true},
		{"AB", "clients/AB", false, false},
		{"AB", "clients/ABC/x", false, false},
		{"AB", "clients/4142/" + InvokeTopic + "/response", false, true},
		{"AB", "clients/4142/" + InvokeTopic + "/response", true, false},
		{"ab", "clients/6162/" + InvokeTopic + "/response", false, true},
		{"ab", "clients/6162/" + InvokeTopic + "/responseX", false, false},
		{"a+", "clients/a+/x", false, false},
		{"", "clients//x", false, false},
	} {
		known := func(string) bool { return c.known }
		if got := ownsResponseTopic(c.id, c.topic, known); got != c.want {
			t.Errorf("ownsResponseTopic(%q, %q, known=%v) = %v", c.id, c.topic, c.known, got)
		}
	}
}

// TestResponseExpiryFollowsTheRequest: a response's Message Expiry is what
// remains of its request's, never longer (not mochi's 86,400 s maximum
// against a request's 10); a request without one gets the server's maximum, none by default.
func TestResponseExpiryFollowsTheRequest(t *testing.T) {
	b := startBroker(t, Options{DataDir: t.TempDir(), MaxMessageExpiry: time.Hour})
	c := dial(t, b.Addr(), "expiry", dialOptions{})
	for _, r := range []req{{}, {persist: true}} { // answered at once, and after the snapshot
		p := c.do(cmd("SET", "k", "v"), r)
		if e := p.Properties.MessageExpiry; e == nil || *e > 10 || *e < 9 {
			t.Fatalf("response to a request with Message Expiry 10 (persist %v): expiry %s", r.persist, deref(e))
		}
	}
	p := c.do(cmd("GET", "k"), req{noExpiry: true})
	if e := p.Properties.MessageExpiry; e == nil || *e != 3600 {
		t.Fatalf("response to a request without Message Expiry: expiry %s, want the server's maximum", deref(e))
	}
	d := dial(t, startBroker(t, Options{}).Addr(), "no-maximum", dialOptions{})
	if e := d.do(cmd("GET", "k"), req{noExpiry: true}).Properties.MessageExpiry; e != nil {
		t.Fatalf("response to a request without Message Expiry, no maximum: expiry %d", *e)
	}
	at := time.Unix(1000, 0)
	for _, c := range []struct {
		now  time.Time
		want uint32
	}{
		{at.Add(-10 * time.Second), 10},
		{at.Add(-9500 * time.Millisecond), 10},
		{at.Add(-9 * time.Second), 9},
		{at.Add(-time.Millisecond), 1},
		{at, 1}, // expired: 1, never 0 ("no expiry")
		{at.Add(time.Hour), 1},
	} {
		if got := responseExpiry(at, c.now); got != c.want {
			t.Errorf("%v before the request expires: %d, want %d", at.Sub(c.now), got, c.want)
		}
	}
	if got := responseExpiry(time.Time{}, at); got != 0 {
		t.Errorf("no request expiry: %d", got)
	}
}

func deref(p *uint32) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// TestReservedKeysOverMQTT: a network client cannot write (and so cannot
// fence) a key under Options.ReservedKeyPrefixes; it reads and watches it, and
// the in-process owner keeps writing it.
func TestReservedKeysOverMQTT(t *testing.T) {
	const key = "faceagent/gw-01/devices/d1"
	b := startBroker(t, Options{ReservedKeyPrefixes: []string{"faceagent/gw-01/devices/"}})
	c := dial(t, b.Addr(), "foreign", dialOptions{})
	ft := c.clock.Now().String()
	for _, r := range []struct {
		cmd []byte
		req req
	}{{cmd("SET", key, "forged"), req{ft: ft}}, {cmd("SET", key, "forged"), req{}}, {cmd("DEL", key), req{ft: ft}}} {
		if p := c.do(r.cmd, r.req); string(p.Payload) != "-ERR not authorized\r\n" {
			t.Fatalf("%q from a client: %q", r.cmd, p.Payload)
		}
	}
	if p := c.do(cmd("KEYNOTIFY", key), req{}); string(p.Payload) != "+OK\r\n" {
		t.Fatalf("KEYNOTIFY: %q", p.Payload)
	}
	owner := &statestore.Request{Payload: cmd("SET", key, "state"), Timestamp: c.clock.Now().String(), HasTimestamp: true, Owner: true}
	if out, _ := b.Store().Do(owner, nil); string(out) != "+OK\r\n" {
		t.Fatalf("owner SET: %q", out)
	}
	if n := c.next(); string(n.Payload) != string(cmdNotifySet("state")) {
		t.Fatalf("notification: %q", n.Payload)
	}
	if p := c.do(cmd("GET", key), req{}); string(p.Payload) != "$5\r\nstate\r\n" {
		t.Fatalf("GET: %q", p.Payload)
	}
}

// TestUnacknowledgedNotificationsCountInTheSession: notifications in flight to
// a watcher are messages its session holds, admitted within MaxSessionBytes
// like any other: a watcher that acknowledges nothing gets small
// notifications only while its session has room; the rest wait in its queue
// and all of them arrive, in order, once it acknowledges. A notification
// counted only as its key and value (one byte here, for a ~1 KB packet) would
// go into the in-flight set whatever the session held, up to the client's
// Receive Maximum, bounded by nothing else.
func TestUnacknowledgedNotificationsCountInTheSession(t *testing.T) {
	const sessionMax, sets = 64 << 10, 600
	b := startBroker(t, Options{MaxSessionBytes: sessionMax, MaxInflight: 1000})
	watcher := dialRaw(t, b.Addr(), "slow-watcher", 1000)
	watcher.keyNotify(1, "k")
	writer := dial(t, b.Addr(), "small-writer", dialOptions{})
	for i := range sets {
		if p := writer.do(cmd("SET", "k", fmt.Sprint(i)), req{}); string(p.Payload) != "+OK\r\n" {
			t.Fatalf("SET %d: %q", i, p.Payload)
		}
	}
	cl, ok := b.Server().Clients.Get("slow-watcher")
	if !ok {
		t.Fatal("the watcher is not connected")
	}
	b.service.mu.Lock()
	n := b.service.notifiers[cl]
	b.service.mu.Unlock()
	// Every notification is in flight or waiting once the notifier has sent what the
	// session takes (the one it holds, waiting for room, is in neither).
	eventually(t, "the notifier waiting for room", func() bool { return cl.State.Inflight.Len()+n.Len() >= sets-1 })
	if held := cl.SessionBytes(); held > sessionMax {
		t.Fatalf("the watcher's session holds %d bytes (%d notifications in flight), bound %d",
			held, cl.State.Inflight.Len(), sessionMax)
	}
	if n.Len() == 0 {
		t.Fatal("no notification waits: the bound was not reached")
	}
	for i := range sets {
		pk := watcher.read()
		if pk.FixedHeader.Type != mp.Publish || !strings.HasPrefix(pk.TopicName, NotifyTopicPrefix) {
			t.Fatalf("notification %d: %+v", i, pk)
		}
		if want := fmt.Sprintf("$%d\r\n%d\r\n", len(fmt.Sprint(i)), i); !strings.HasSuffix(string(pk.Payload), want) {
			t.Fatalf("notification %d: %q", i, pk.Payload)
		}
		watcher.send(mp.Packet{FixedHeader: mp.FixedHeader{Type: mp.Puback}, PacketID: pk.PacketID})
	}
	eventually(t, "every notification acknowledged", func() bool { return cl.State.Inflight.Len() == 0 && n.Len() == 0 })
}
