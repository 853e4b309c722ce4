package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// pahoConnect connects a bare MQTT 5 paho client (no subscription) and returns it with the
// CONNACK's error.
func pahoConnect(t *testing.T, addr string, cp *paho.Connect, onPublish func(*paho.Publish)) (*paho.Client, *paho.Connack, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			if onPublish != nil {
				onPublish(pr.Packet)
			}
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if cp.KeepAlive == 0 {
		cp.KeepAlive = 30
	}
	ack, err := c.Connect(ctx, cp)
	if err != nil {
		_ = conn.Close()
		return nil, ack, err
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	return c, ack, nil
}

// A subscription beyond max_subscriptions is refused with SUBACK 0x97 and not made; one
// the session has already costs nothing more.
func TestSubscriptionsBeyondTheBoundAreRefused(t *testing.T) {
	b := startBroker(t, Options{MaxSubscriptions: 2})
	c, _, err := pahoConnect(t, b.Addr(), &paho.Connect{ClientID: "s", CleanStart: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: "a", QoS: 1}, {Topic: "b", QoS: 1}, {Topic: "c", QoS: 1}, {Topic: "a", QoS: 0}}})
	if sa == nil {
		t.Fatalf("no SUBACK: %v", err)
	}
	if want := []byte{1, 1, packets.ErrQuotaExceeded.Code, 0}; string(sa.Reasons) != string(want) {
		t.Fatalf("SUBACK reasons % x, want % x", sa.Reasons, want)
	}
	if subs := b.Server().Topics.Subscribers("c"); len(subs.Subscriptions) != 0 {
		t.Errorf("the refused subscription routes: %v", subs.Subscriptions)
	}
	if n := b.Refused(mqtt.QuotaSubscriptions); n != 1 {
		t.Errorf("Refused(subscriptions) = %d, want 1", n)
	}
}

// A CONNECT of a new client id beyond max_clients is refused with CONNACK 0x97; sessions
// kept for clients that left count; a client resuming its kept session is let in.
func TestClientsBeyondTheBoundAreRefused(t *testing.T) {
	b := startBroker(t, Options{MaxClients: 2})
	expiry := uint32(3600)
	kept, _, err := pahoConnect(t, b.Addr(), &paho.Connect{ClientID: "kept", CleanStart: true,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := kept.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	<-kept.Done()
	if _, _, err := pahoConnect(t, b.Addr(), &paho.Connect{ClientID: "other", CleanStart: true}, nil); err != nil {
		t.Fatal(err)
	}
	_, ack, err := pahoConnect(t, b.Addr(), &paho.Connect{ClientID: "third", CleanStart: true}, nil)
	if err == nil || ack == nil || ack.ReasonCode != packets.ErrQuotaExceeded.Code {
		t.Fatalf("a third client id: CONNACK %+v, err %v; want 0x97", ack, err)
	}
	if _, _, err := pahoConnect(t, b.Addr(), &paho.Connect{ClientID: "kept", CleanStart: false,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}, nil); err != nil {
		t.Fatalf("resuming a kept session at the bound: %v", err)
	}
	if n := b.Refused(mqtt.QuotaClients); n != 1 {
		t.Errorf("Refused(clients) = %d, want 1", n)
	}
}

// A will that does not fit in a session is refused with CONNACK 0x97.
func TestWillBeyondTheSessionIsRefused(t *testing.T) {
	b := startBroker(t, Options{MaxSessionBytes: 64 << 10})
	_, ack, err := pahoConnect(t, b.Addr(), &paho.Connect{ClientID: "w", CleanStart: true, WillMessage: &paho.WillMessage{
		Topic: "w", QoS: 1, Payload: make([]byte, 64<<10)}}, nil)
	if err == nil || ack == nil || ack.ReasonCode != packets.ErrQuotaExceeded.Code {
		t.Fatalf("a 64 KiB will in a 64 KiB session: CONNACK %+v, err %v; want 0x97", ack, err)
	}
	if _, _, err := pahoConnect(t, b.Addr(), &paho.Connect{ClientID: "w", CleanStart: true, WillMessage: &paho.WillMessage{
		Topic: "w", QoS: 1, Payload: make([]byte, 1<<10)}}, nil); err != nil {
		t.Fatalf("a 1 KiB will: %v", err)
	}
	if q := b.QueuedBytes(); q <= 1<<10 {
		t.Errorf("QueuedBytes %d: the will is not counted", q)
	}
}

// Retained messages beyond max_retained_bytes: an MQTT 5 QoS 1 publisher is refused
// (PUBACK 0x97, not delivered); a QoS 0 message is delivered but not retained.
func TestRetainedBeyondTheBound(t *testing.T) {
	b := startBroker(t, Options{MaxRetainedBytes: 8 << 10})
	got := make(chan *paho.Publish, 16)
	sub, _, err := pahoConnect(t, b.Addr(), &paho.Connect{ClientID: "sub", CleanStart: true}, func(p *paho.Publish) { got <- p })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "r/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	// mochi sends a subscription's retained messages after its SUBACK, on the subscriber's
	// connection: a second SUBACK there means that scan is over. Without it r/1, published
	// in between, could come twice (routed, then found retained by the late scan).
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "none", QoS: 0}}}); err != nil {
		t.Fatal(err)
	}
	pub, _, err := pahoConnect(t, b.Addr(), &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, &paho.Publish{Topic: "r/1", QoS: 1, Retain: true, Payload: make([]byte, 4<<10)}); err != nil {
		t.Fatalf("a 4 KiB retained message: %v", err)
	}
	<-got
	resp, err := pub.Publish(ctx, &paho.Publish{Topic: "r/2", QoS: 1, Retain: true, Payload: make([]byte, 4<<10)})
	if err == nil || resp == nil || resp.ReasonCode != packets.ErrQuotaExceeded.Code {
		t.Fatalf("a second 4 KiB retained message: PUBACK %+v, err %v; want 0x97", resp, err)
	}
	if _, err := pub.Publish(ctx, &paho.Publish{Topic: "r/3", QoS: 0, Retain: true, Payload: make([]byte, 4<<10)}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p.Topic != "r/3" {
			t.Fatalf("delivered %s, want r/3 (r/2 was refused)", p.Topic)
		}
	case <-time.After(waitFor):
		t.Fatal("the QoS 0 retained message over the bound was not delivered")
	}
	if n := len(b.Server().Topics.Messages("r/#")); n != 1 || b.RetainedBytes() > 8<<10 {
		t.Errorf("%d retained, %d bytes; want 1 within 8 KiB", n, b.RetainedBytes())
	}
	if n := b.Refused(mqtt.QuotaRetainedBytes); n != 2 {
		t.Errorf("Refused(retained_bytes) = %d, want 2", n)
	}
}

// A QoS 2 message whose PUBREC would not fit in the publisher's session is refused with
// PUBREC 0x97.
func TestQoS2BeyondTheSessionIsRefused(t *testing.T) {
	// Room for the subscription and one message, not for a PUBREC more.
	msg := mqtt.MessageBytes(&packets.Packet{TopicName: "big/x", Payload: make([]byte, 1000)})
	b := startBroker(t, Options{MaxSessionBytes: mqtt.SubscriptionBytes("big/#") + msg + mqtt.MessageOverhead/2})
	c := memConnectTo(t, b.Addr(), "q2", "big/#")
	defer c.close()
	// Fill the session with a message routed to it that it never acknowledges.
	if err := b.Server().Publish("big/x", make([]byte, 1000), false, 1); err != nil {
		t.Fatal(err)
	}
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2}, TopicName: "q2/x", PacketID: 9, Payload: []byte("x")})
	for {
		typ, body := c.read(t)
		if typ != packets.Pubrec {
			continue
		}
		if id := binary.BigEndian.Uint16(body); id != 9 || len(body) < 3 || body[2] != packets.ErrQuotaExceeded.Code {
			t.Fatalf("PUBREC % x, want id 9 reason 0x97", body)
		}
		break
	}
	if n := b.Refused(mqtt.QuotaSessionBytes); n != 1 {
		t.Errorf("Refused(session_bytes) = %d, want 1", n)
	}
}

// A subscriber that stops reading costs only itself: another gets every message at once;
// what the broker holds for the stuck one stays within its bounds (a queue bounded in
// packets only, as mochi's is, would hold 8,192 of these 1 MB messages), and the heap
// with it.
func TestStuckSubscriberCostsOnlyItself(t *testing.T) {
	const (
		pending = 256 << 10
		session = 8 << 20
		size    = 256 << 10
		n       = 400 // 100 MB in all
	)
	b := startBroker(t, Options{MaxPacketSize: 1 << 20, MaxPendingWriteBytes: pending, MaxSessionBytes: session, MaxQueuedBytes: 4 * session})
	stuck := memConnectTo(t, b.Addr(), "stuck", "#")
	defer stuck.close()
	_ = stuck.conn.(*net.TCPConn).SetReadBuffer(4096)
	got := make(chan uint64, n)
	healthy, _, err := pahoConnect(t, b.Addr(), &paho.Connect{ClientID: "healthy", CleanStart: true}, func(p *paho.Publish) {
		got <- binary.BigEndian.Uint64(p.Payload)
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := healthy.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "m", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, peak runtime.MemStats
	runtime.ReadMemStats(&before)
	msg := make([]byte, size)
	deadline := time.After(30 * time.Second)
	for i := range uint64(n) {
		binary.BigEndian.PutUint64(msg, i)
		if err := b.Server().Publish("m", msg, false, 1); err != nil {
			t.Fatal(err)
		}
		select { // the healthy one keeps up with every message
		case j := <-got:
			if j != i {
				t.Fatalf("healthy subscriber got %d, want %d", j, i)
			}
		case <-deadline:
			t.Fatalf("healthy subscriber stalled at message %d", i)
		}
		if i%50 == 0 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.HeapInuse {
				peak = m
			}
		}
	}
	cl, ok := b.Server().Clients.Get("stuck")
	if !ok {
		t.Fatal("the stuck subscriber is gone")
	}
	if p := cl.PendingWriteBytes(); p > pending+size+mqtt.MessageOverhead+64 {
		t.Errorf("stuck subscriber's pending writes: %d bytes, bound %d", p, pending)
	}
	if s := cl.SessionBytes(); s > session {
		t.Errorf("stuck subscriber's session: %d bytes, bound %d", s, session)
	}
	growth := int64(peak.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap in use grew %d KB for %d MB published; stuck: pending %d KB, session %d KB; dropped for it %d",
		growth>>10, n*size>>20, cl.PendingWriteBytes()>>10, cl.SessionBytes()>>10, b.DroppedMessages())
	if growth > 64<<20 {
		t.Errorf("heap in use grew %d MB", growth>>20)
	}
	if b.Dropped(mqtt.QuotaSessionBytes) == 0 {
		t.Error("nothing dropped for the stuck session: it never filled")
	}
}

// A session that expires takes its subscriptions out of the topics index, so expired
// sessions' filters cannot accumulate there.
func TestExpiredSessionLeavesNoSubscriptions(t *testing.T) {
	b := startBroker(t, Options{})
	expiry := uint32(1)
	c, _, err := pahoConnect(t, b.Addr(), &paho.Connect{ClientID: "brief", CleanStart: true,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var subs []paho.SubscribeOptions
	for i := range 20 {
		subs = append(subs, paho.SubscribeOptions{Topic: fmt.Sprintf("expiring/%d/+", i), QoS: 1})
	}
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs}); err != nil {
		t.Fatal(err)
	}
	if err := c.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, known := b.Server().Clients.Get("brief")
		if !known && len(b.Server().Topics.Subscribers("expiring/3/x").Subscriptions) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after a session of 1 s ended: client known %v, subscribers %d", known, len(b.Server().Topics.Subscribers("expiring/3/x").Subscriptions))
		}
		time.Sleep(50 * time.Millisecond) // the housekeeper's expiry: no event to wait on
	}
	if q := b.QueuedBytes(); q != 0 {
		t.Errorf("QueuedBytes %d after the only session expired", q)
	}
}

// inboundPeak records the most bytes of large packets held while a PUBLISH is handled.
type inboundPeak struct {
	mqtt.HookBase
	srv  *mqtt.Server
	peak atomic.Int64
}

func (h *inboundPeak) ID() string           { return "test-inbound-peak" }
func (h *inboundPeak) Provides(b byte) bool { return b == mqtt.OnPublish }
func (h *inboundPeak) OnPublish(_ *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	for {
		cur, n := h.peak.Load(), h.srv.InboundBytes()
		if n <= cur || h.peak.CompareAndSwap(cur, n) {
			return pk, nil
		}
	}
}

// Large packets being read and handled at once stay within max_inbound_bytes, all
// connections together: sixteen publishers each sending 1 MiB messages at once are let
// through two at a time, and every message is taken (PUBACK).
func TestInboundBytesBoundLargePackets(t *testing.T) {
	const (
		budget = 2 << 20
		size   = 1 << 20
		pubs   = 16
		each   = 4
	)
	peak := &inboundPeak{}
	b := startBroker(t, Options{MaxPacketSize: 2 << 20, MaxInboundBytes: budget}, peak)
	peak.srv = b.Server()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, pubs)
	for i := range pubs {
		c, _, err := pahoConnect(t, b.Addr(), &paho.Connect{ClientID: fmt.Sprintf("p%d", i), CleanStart: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for range each {
				if _, err := c.Publish(ctx, &paho.Publish{Topic: "big", QoS: 1, Payload: make([]byte, size)}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range pubs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.peak.Load(); p > budget || p < size {
		t.Errorf("large packets held at once peaked at %d bytes; want within %d (and some)", p, budget)
	}
	// Each reader gives its share back once its handler returned, just after the PUBACK.
	deadline := time.Now().Add(waitFor)
	for b.Server().InboundBytes() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // nothing announces it
	}
	if n := b.Server().InboundBytes(); n != 0 {
		t.Errorf("%d bytes still held after every packet was handled", n)
	}
}
