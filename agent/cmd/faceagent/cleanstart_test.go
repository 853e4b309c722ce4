package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// A clean start after a crash begins with an empty session (MQTT 5, 3.1.2.4): a client
// whose session would have ended with its connection (clean start, expiry 0) must not
// find its old subscription after the embedded broker was SIGKILLed and started again.
// After a SIGTERM it does not; after a SIGKILL it does today — the subscription the
// session store wrote comes back and the new connection receives messages it never
// subscribed to (and a first SUBSCRIBE may be refused with 0x91, packet identifier in
// use, when such a message took the same id).
func TestCleanStartAfterCrash(t *testing.T) {
	dir := t.TempDir()
	addr := testutil.FreeAddr(t)
	cfg := writeFile(t, dir, "broker.toml", fmt.Sprintf("[agent]\ndata_dir = %q\n[broker]\nlisten = %q\n", filepath.Join(dir, "data"), addr))
	p := startAgent(t, cfg)
	p.waitLog(runningRe, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan string, 8)
	dial := func(id string) *paho.Client {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c := paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) { got <- id + " got " + pr.Packet.Topic; return true, nil }}})
		if _, err := c.Connect(ctx, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := dial("clean")
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "x/+", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	p.kill()
	<-c.Done()
	p = startAgent(t, cfg)
	p.waitLog(runningRe, 0)
	// Clean start again, subscribed to a marker topic only. The publisher sends x/1 and
	// then the marker: the broker delivers them to one client in that order, so once the
	// marker is in, x/1 was routed and must not have reached this client.
	c = dial("clean")
	if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "marker", QoS: 1}}}); err != nil {
		t.Fatalf("SUBSCRIBE after the crash: %v", err)
	}
	pub := dial("publisher")
	for _, topic := range []string{"x/1", "marker"} {
		if _, err := pub.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("hello")}); err != nil {
			t.Fatal(err)
		}
	}
wait:
	for {
		select {
		case m := <-got:
			if m == "clean got marker" {
				break wait
			}
			t.Errorf("after a crash, the clean-start client %s, from its previous session's subscription", m)
		case <-ctx.Done():
			t.Fatal("the marker never arrived")
		}
	}
	_ = pub.Disconnect(&paho.Disconnect{})
	_ = c.Disconnect(&paho.Disconnect{})
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
}
