package broker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"
)

// An intercepted topic's function decides whether a message is taken: an error refuses it,
// with PUBACK 0x83 to an MQTT 5 publisher and a disconnect without PUBACK to an MQTT 3.1.1
// one; a refused message is not routed. Once the function takes it, the message is
// acknowledged and routed.
func TestInterceptRefusesWithTheProtocolsMeans(t *testing.T) {
	b, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var refuse atomic.Bool
	refuse.Store(true)
	type taken struct{ client, payload string }
	got := make(chan taken, 8)
	if err := b.Intercept("in/tasks", func(_ context.Context, clientID string, payload []byte) error {
		if refuse.Load() {
			return errors.New("not now")
		}
		got <- taken{clientID, string(payload)}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Intercept("in/tasks", func(context.Context, string, []byte) error { return nil }); err == nil {
		t.Error("a topic intercepted twice was accepted")
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	if err := b.Intercept("in/other", func(context.Context, string, []byte) error { return nil }); err == nil {
		t.Error("Intercept after Start was accepted")
	}
	watcher := dial(t, b.Addr(), "watcher", dialOptions{noSubscribe: true, subscribe: []string{"in/tasks"}})
	pub := dial(t, b.Addr(), "publisher", dialOptions{noSubscribe: true})

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	resp, err := pub.c.Publish(ctx, &paho.Publish{Topic: "in/tasks", QoS: 1, Payload: []byte("m1")})
	if err == nil || resp == nil || resp.ReasonCode != packets.ErrImplementationSpecificError.Code {
		t.Fatalf("MQTT 5, refused: PUBACK %+v, err %v; want reason 0x83", resp, err)
	}

	// MQTT 3.1.1: no PUBACK (0x40), the connection closed (after a DISCONNECT, 0xe0).
	conn := rawConnectVersion(t, b.Addr(), "v4", "", 4)
	var buf bytes.Buffer
	p4 := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: 4,
		TopicName: "in/tasks", PacketID: 7, Payload: []byte("m2")}
	if err := p4.PublishEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(waitFor))
	rest, err := io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("MQTT 3.1.1 publisher was neither acknowledged nor disconnected")
	}
	if len(rest) > 0 && rest[0]>>4 != packets.Disconnect {
		t.Fatalf("MQTT 3.1.1 publisher got % x before the connection closed, want only a DISCONNECT", rest)
	}

	refuse.Store(false)
	if resp, err := pub.c.Publish(ctx, &paho.Publish{Topic: "in/tasks", QoS: 1, Payload: []byte("m3")}); err != nil || resp.ReasonCode != 0 {
		t.Fatalf("taken: PUBACK %+v, err %v", resp, err)
	}
	select {
	case tk := <-got:
		if tk != (taken{"publisher", "m3"}) {
			t.Errorf("intercepted %+v", tk)
		}
	case <-time.After(waitFor):
		t.Fatal("the taken message was not handed over")
	}
	// The refused messages were routed to nobody: the first the watcher gets is m3.
	if p := watcher.next(); string(p.Payload) != "m3" {
		t.Errorf("watcher got %q first, want m3", p.Payload)
	}
}

// The in-process bus: an inline subscription hears network clients, not in-process
// publishers, and learns the publishing connection's address; WatchSubscribes runs once a
// SUBSCRIBE's subscriptions are in the index (HasSubscribers sees them), with the same
// connection's address, and not after stop.
func TestInProcessBus(t *testing.T) {
	b := startBroker(t, Options{})
	type msg struct{ topic, payload, remote string }
	heard := make(chan msg, 8)
	if err := b.SubscribeInline("dev/+/ack", 3, func(topic string, payload []byte, remote string) {
		heard <- msg{topic, string(payload), remote}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.UnsubscribeInline("dev/+/ack", 3) })
	if err := b.Publish("dev/1/ack", []byte("self"), 1); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishDeferred("dev/1/ack", []byte("self, deferred"), 1); err != nil {
		t.Fatal(err)
	}
	term := dial(t, b.Addr(), "term-1", dialOptions{noSubscribe: true})
	var ackFrom string
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := term.c.Publish(ctx, &paho.Publish{Topic: "dev/1/ack", QoS: 1, Payload: []byte("ack")}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-heard:
		ackFrom = m.remote
		if m.topic != "dev/1/ack" || m.payload != "ack" || m.remote == "" {
			t.Errorf("heard %+v, want the terminal's ack with its address", m)
		}
	case <-time.After(waitFor):
		t.Fatal("the terminal's message was not heard")
	}

	if b.HasSubscribers("dev/1/cmd") {
		t.Fatal("subscribers before anyone subscribed")
	}
	var stopped, calls atomic.Int32
	type subscribed struct {
		indexed bool
		remote  string
	}
	sawSubscriber := make(chan subscribed, 4)
	stop := b.WatchSubscribes(func(string) { stopped.Add(1) })
	stop()
	stop() // harmless
	defer b.WatchSubscribes(func(remote string) {
		calls.Add(1)
		sawSubscriber <- subscribed{b.HasSubscribers("dev/1/cmd"), remote}
	})()
	if _, err := term.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "dev/1/cmd", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case saw := <-sawSubscriber:
		if !saw.indexed {
			t.Error("WatchSubscribes ran before HasSubscribers saw the subscription")
		}
		if saw.remote != ackFrom {
			t.Errorf("WatchSubscribes told of a SUBSCRIBE from %q, want the connection's address %q", saw.remote, ackFrom)
		}
	case <-time.After(waitFor):
		t.Fatal("WatchSubscribes' function did not run")
	}
	if n := stopped.Load(); n != 0 {
		t.Errorf("a stopped watcher ran %d times", n)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("watcher ran %d times for one SUBSCRIBE", n)
	}
}
