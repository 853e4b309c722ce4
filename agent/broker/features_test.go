package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

func TestRetainedMessages(t *testing.T) {
	b := startBroker(t, Options{})
	pub := dial(t, b.Addr(), "pub", dialOptions{noSubscribe: true})
	ctx := context.Background()
	if _, err := pub.c.Publish(ctx, &paho.Publish{QoS: 1, Retain: true, Topic: "faceagent/gw-01/status", Payload: []byte("up")}); err != nil {
		t.Fatal(err)
	}
	late := dial(t, b.Addr(), "late", dialOptions{noSubscribe: true, subscribe: []string{"faceagent/+/status"}})
	// Publish returned with its PUBACK, which our copy of mochi writes only after the
	// message is retained and routed: a later subscriber gets the retained copy alone.
	if m := late.next(); string(m.Payload) != "up" || !m.Retain {
		t.Fatalf("retained message: %q retain=%v", m.Payload, m.Retain)
	}
}

func TestSharedSubscriptions(t *testing.T) {
	b := startBroker(t, Options{})
	w1 := dial(t, b.Addr(), "w1", dialOptions{subscribe: []string{"$share/workers/jobs"}})
	w2 := dial(t, b.Addr(), "w2", dialOptions{subscribe: []string{"$share/workers/jobs"}})
	pub := dial(t, b.Addr(), "pub", dialOptions{noSubscribe: true})
	const n = 20
	for i := 0; i < n; i++ {
		if _, err := pub.c.Publish(context.Background(), &paho.Publish{QoS: 1, Topic: "jobs", Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	seen := make(map[string]bool)
	for len(seen) < n {
		var m *paho.Publish
		select {
		case m = <-w1.other:
		case m = <-w2.other:
		case <-time.After(waitFor):
			t.Fatalf("%d of %d jobs delivered", len(seen), n)
		}
		if seen[string(m.Payload)] {
			t.Fatalf("job %s delivered twice", m.Payload)
		}
		seen[string(m.Payload)] = true
	}
	w1.none()
	w2.none()
}
