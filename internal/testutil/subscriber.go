package testutil

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// OrderSubscriber is an MQTT 5 client subscribed with QoS 1 that keeps the payloads it
// receives, in arrival order.
type OrderSubscriber struct {
	c       *paho.Client
	mu      sync.Mutex
	got     []string
	changed chan struct{}
}

// SubscribeInOrder connects a subscriber to the broker at addr (clean start) and subscribes
// it to every filter in topics; it is disconnected when t ends.
func SubscribeInOrder(t testing.TB, addr string, topics ...string) *OrderSubscriber {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &OrderSubscriber{changed: make(chan struct{}, 1)}
	s.c = paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) {
			s.mu.Lock()
			s.got = append(s.got, string(pr.Packet.Payload))
			s.mu.Unlock()
			select {
			case s.changed <- struct{}{}:
			default:
			}
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.c.Connect(ctx, &paho.Connect{ClientID: fmt.Sprintf("sub-%p", s), KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	var subs []paho.SubscribeOptions
	for _, topic := range topics {
		subs = append(subs, paho.SubscribeOptions{Topic: topic, QoS: 1})
	}
	if _, err := s.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Close disconnects the subscriber and waits for its client to end; calling it again is
// harmless.
func (s *OrderSubscriber) Close() {
	_ = s.c.Disconnect(&paho.Disconnect{})
	<-s.c.Done()
}

// Received returns a copy of the payloads received so far, in arrival order.
func (s *OrderSubscriber) Received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

// Changed is signalled (capacity 1, never blocking the client) after each message.
func (s *OrderSubscriber) Changed() <-chan struct{} { return s.changed }
