package broker

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// publishIDs records the packet ids of the PUBLISHes clients send.
type publishIDs struct {
	mqtt.HookBase
	mu  sync.Mutex
	ids []uint16
}

func (h *publishIDs) ID() string           { return "test-publish-ids" }
func (h *publishIDs) Provides(b byte) bool { return b == mqtt.OnPublish }
func (h *publishIDs) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if !cl.Net.Inline {
		h.mu.Lock()
		h.ids = append(h.ids, pk.PacketID)
		h.mu.Unlock()
	}
	return pk, nil
}

// connectUnacknowledging connects "back-office" to addr with a one-hour session, sending
// the payload of every message it receives to received and never acknowledging any.
func connectUnacknowledging(t *testing.T, addr string, clean bool, received chan<- string) (*paho.Client, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, EnableManualAcknowledgment: true, OnClientError: func(error) {},
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			received <- string(pr.Packet.Payload) // never acknowledged
			return true, nil
		}}})
	expiry := uint32(3600)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "back-office", KeepAlive: 30, CleanStart: clean,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil {
		t.Fatal(err)
	}
	return c, conn
}

// TestOwnPublishKeepsMessagesInFlight: a back office publishing tasks with the packet ids of
// results in flight to it (both sides number from 1) still gets every result again when it
// resumes its session without having acknowledged them.
func TestOwnPublishKeepsMessagesInFlight(t *testing.T) {
	ids := &publishIDs{}
	b := startBroker(t, Options{}, ids)
	received := make(chan string, 64)
	connect := func(clean bool) (*paho.Client, net.Conn) {
		return connectUnacknowledging(t, b.Addr(), clean, received)
	}
	c, conn := connect(true)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "results", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	const n = 6
	publishInline(t, b, "results", 0, n)
	for range n {
		select {
		case <-received:
		case <-time.After(waitFor):
			t.Fatal("results not delivered")
		}
	}
	cl, _ := b.Server().Clients.Get("back-office")
	outgoing := map[uint16]bool{}
	for _, pk := range cl.State.Inflight.GetAll(false) {
		outgoing[pk.PacketID] = true
	}
	for range n - 1 {
		if _, err := c.Publish(ctx, &paho.Publish{Topic: "tasks", QoS: 1, Payload: []byte("t")}); err != nil {
			t.Fatal(err)
		}
	}
	ids.mu.Lock()
	clashes := 0
	for _, id := range ids.ids {
		if outgoing[id] {
			clashes++
		}
	}
	ids.mu.Unlock()
	if clashes == 0 {
		t.Fatalf("no publish used the id of a result in flight (publishes %v, in flight %v): the test proves nothing", ids.ids, outgoing)
	}
	if got := cl.State.Inflight.Len(); got != n {
		t.Fatalf("%d results in flight after the back office's %d publishes, want %d", got, n-1, n)
	}

	_ = conn.Close() // gone without acknowledging anything
	<-c.Done()
	c, _ = connect(false)
	defer c.Disconnect(&paho.Disconnect{})
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case p := <-received:
			seen[p] = true
		case <-time.After(waitFor):
			t.Fatalf("resumed session got %d of %d unacknowledged results: %v", len(seen), n, seen)
		}
	}
	for i := range n {
		if !seen[fmt.Sprint(i)] {
			t.Fatalf("result %d not resent", i)
		}
	}
}

// TestResubscribeOnResume: a back office resuming its session with results waiting, from a
// fresh client whose packet ids start at 1 again, may subscribe again (mochi answered
// SUBACK 0x91, "packet identifier in use", for the id of a waiting result: it looked the
// client's id up among the broker's).
func TestResubscribeOnResume(t *testing.T) {
	b := startBroker(t, Options{})
	received := make(chan string, 64)
	connect := func(clean bool) (*paho.Client, net.Conn) {
		return connectUnacknowledging(t, b.Addr(), clean, received)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	subscribe := func(c *paho.Client) error {
		_, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "results", QoS: 1}}})
		return err
	}
	c, conn := connect(true)
	if err := subscribe(c); err != nil {
		t.Fatal(err)
	}
	const n = 3
	publishInline(t, b, "results", 0, n)
	for range n {
		select {
		case <-received:
		case <-time.After(waitFor):
			t.Fatal("results not delivered")
		}
	}
	_ = conn.Close() // gone without acknowledging them
	<-c.Done()

	c, _ = connect(false)
	defer c.Disconnect(&paho.Disconnect{})
	if err := subscribe(c); err != nil {
		t.Fatalf("subscribing again on resume: %v", err)
	}
	for range n {
		select {
		case <-received:
		case <-time.After(waitFor):
			t.Fatal("waiting results not resent")
		}
	}
	// The SUBSCRIBE's id is the client's: it never touches the results in flight to it.
	cl, _ := b.Server().Clients.Get("back-office")
	if got := cl.State.Inflight.Len(); got != n {
		t.Fatalf("%d results in flight after the SUBSCRIBE (none acknowledged), want %d", got, n)
	}
}
