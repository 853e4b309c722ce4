package mqttlink

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// terminalConn is one connection of terminal t1, clean start, that passes what it receives
// to got.
func terminalConn(t *testing.T, ctx context.Context, brokerURL string, got chan<- *paho.Publish) *autopaho.ConnectionManager {
	t.Helper()
	cm, err := autopaho.NewConnection(ctx, autopaho.ClientConfig{
		ServerUrls: []*url.URL{mustURL(t, brokerURL)}, KeepAlive: 10, CleanStartOnInitialConnection: true,
		ClientConfig: paho.ClientConfig{ClientID: "term-t1", OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) { got <- pr.Packet; return true, nil }}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cm.AwaitConnection(ctx); err != nil {
		t.Fatal(err)
	}
	return cm
}

// TestInlineDropsAHeldCommandWhenItsTerminalReconnects: a command held for the connection
// a terminal heartbeated on is not published when the terminal subscribes on a new
// connection. The agent may have given that command up while the terminal was away (it
// judges a silent terminal offline) and sends another when the terminal returns: the old
// one published on the SUBSCRIBE would arrive just before it, two commands in flight.
func TestInlineDropsAHeldCommandWhenItsTerminalReconnects(t *testing.T) {
	srv, burl := startBroker(t)
	l := newLink(t, Config{Bus: srv, Devices: []string{"t1"}})
	waitEvent(t, l, device.Up)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	heartbeat := func(cm *autopaho.ConnectionManager) {
		t.Helper()
		if _, err := cm.Publish(ctx, &paho.Publish{Topic: "dev/face/t1/heartbeat", QoS: 1, Payload: []byte(`{"deviceId":"t1"}`)}); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, l, device.Heartbeat)
	}
	got := make(chan *paho.Publish, 8)

	// The first connection heartbeats, is sent a command before it subscribes (held), and
	// goes away.
	first := terminalConn(t, ctx, burl, got)
	heartbeat(first)
	stale := add("stale", "p1")
	if err := l.Send(ctx, "t1", stale); err != nil {
		t.Fatal(err)
	}
	tr := l.tr.(*inline)
	tr.mu.Lock()
	_, held := tr.held["dev/face/t1"]
	tr.mu.Unlock()
	if !held {
		t.Fatal("the command to a terminal not yet subscribed was not held")
	}
	if err := first.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}

	// The terminal comes back on a new connection: it subscribes, then heartbeats, and the
	// agent sends its current command.
	second := terminalConn(t, ctx, burl, got)
	defer second.Disconnect(context.Background())
	if _, err := second.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "dev/face/t1", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	heartbeat(second)
	current := add("current", "p2")
	if err := l.Send(ctx, "t1", current); err != nil {
		t.Fatal(err)
	}
	// Closing the link waits for its goroutines (a flush of held commands among them), so
	// nothing more is published after this; a message the terminal publishes to its own
	// topic then comes back behind everything the broker queued for it before.
	l.Close()
	if _, err := second.Publish(ctx, &paho.Publish{Topic: "dev/face/t1", QoS: 1, Payload: []byte("marker")}); err != nil {
		t.Fatal(err)
	}
	var received []string
	for {
		select {
		case p := <-got:
			if string(p.Payload) == "marker" {
				if len(received) != 1 || received[0] != current.MessageID {
					t.Fatalf("the terminal's new connection received %q, want only the current command %q", received, current.MessageID)
				}
				return
			}
			c, err := face.ParseCommandJSON(p.Payload)
			if err != nil {
				t.Fatalf("received %s: %v", p.Payload, err)
			}
			received = append(received, c.MessageID)
		case <-ctx.Done():
			t.Fatalf("the marker did not come back; received %q", received)
		}
	}
}
