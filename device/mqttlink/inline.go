package mqttlink

import (
	"context"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/device"
)

// inline talks to an in-process mochi broker through its inline client.
type inline struct {
	l       *Link
	srv     *mqtt.Server
	filters []string
}

func newInline(l *Link) (transport, error) {
	t := &inline{l: l, srv: l.cfg.Server, filters: []string{l.ackT.filter(), l.hbT.filter()}}
	for i, f := range t.filters {
		if err := t.srv.Subscribe(f, l.cfg.SubscriptionID, t.handle); err != nil {
			for _, g := range t.filters[:i] {
				t.srv.Unsubscribe(g, l.cfg.SubscriptionID)
			}
			return nil, &Error{Code: device.ErrConfig, Topic: f, Err: err} // mqtt.ErrInlineClientNotEnabled
		}
	}
	l.setConn(true, nil) // an in-process broker is up as long as we are
	return t, nil
}

// handle runs on the publishing terminal's connection goroutine (mochi delivers inline
// subscriptions synchronously), so a full Events channel holds that terminal back.
func (t *inline) handle(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
	// mochi passes its inline client as cl to every inline handler; the publisher is
	// pk.Origin. Our own publications (and any other inline client's) are not terminals'
	// messages: with an unusual template a command could otherwise come back as an "ack".
	if t.fromInline(pk.Origin) {
		return
	}
	t.l.deliver(pk.TopicName, pk.Payload)
}

func (t *inline) fromInline(origin string) bool {
	if cl, ok := t.srv.Clients.Get(origin); ok {
		return cl.Net.Inline
	}
	return origin == "" || origin == mqtt.InlineClientId
}

func (t *inline) publish(_ context.Context, topic string, payload []byte) error {
	// mochi's inline Publish routes synchronously to every subscriber's queue (and to
	// persistent sessions of offline ones); there is no PUBACK to wait for.
	if err := t.srv.Publish(topic, payload, false, t.l.cfg.QoS); err != nil {
		return &Error{Code: device.ErrTransport, Err: err}
	}
	return nil
}

func (t *inline) close() {
	for _, f := range t.filters {
		t.srv.Unsubscribe(f, t.l.cfg.SubscriptionID)
	}
}
