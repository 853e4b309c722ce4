package mqttlink

import (
	"context"
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/device"
)

// inline talks to an in-process mochi broker through its inline client.
//
// A terminal that heartbeats on a new connection before its SUBSCRIBE has been handled
// (after a broker restart, say) is online to the agent, but a command published to it then
// has no subscriber and mochi drops it: the terminal would wait a whole retry interval. So
// the first command after a heartbeat from a new connection is checked: with nobody
// subscribed to its topic it is held, and published as soon as a SUBSCRIBE makes its topic
// match (subscribeWatch). Only then: the check costs mochi a subscriber scan that allocates,
// and steady sends skip it without a lock.
type inline struct {
	l       *Link
	srv     *mqtt.Server
	filters []string

	unsureN atomic.Int32 // len(unsure), read without mu on every publish
	mu      sync.Mutex
	conn    map[string]string // device → the connection (remote address) its last heartbeat came on
	unsure  map[string]bool   // devices whose connection has not been seen subscribed
	held    map[string][]byte // command topic → the command waiting for a subscriber
}

func newInline(l *Link) (transport, error) {
	t := &inline{l: l, srv: l.cfg.Server, filters: []string{l.ackT.filter(), l.hbT.filter()},
		conn: map[string]string{}, unsure: map[string]bool{}, held: map[string][]byte{}}
	if err := t.srv.AddHook(&subscribeWatch{t: t}, nil); err != nil {
		return nil, &Error{Code: device.ErrConfig, Err: err}
	}
	// A closure, not the method value t.handle: the method value's wrapper would copy the
	// 800-byte packet once more on the terminal's stack, under everything the agent does
	// with the message (its next command's publish included).
	handle := func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) { t.handle(&pk) }
	for i, f := range t.filters {
		if err := t.srv.Subscribe(f, l.cfg.SubscriptionID, handle); err != nil {
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
func (t *inline) handle(pk *packets.Packet) {
	// mochi passes its inline client as cl to every inline handler; the publisher is
	// pk.Origin. Our own publications (and any other inline client's) are not terminals'
	// messages: with an unusual template a command could otherwise come back as an "ack".
	cl, known := t.srv.Clients.Get(pk.Origin)
	if (known && cl.Net.Inline) || (!known && (pk.Origin == "" || pk.Origin == mqtt.InlineClientId)) {
		return
	}
	// Only the link's own terminals: any client may publish on a made-up id's topic, and
	// each would stay in conn and unsure for good (deliver reports it as an Error).
	if id, ok := t.l.hbT.match(pk.TopicName); ok && known && validDeviceID(id) && (t.l.devices == nil || t.l.devices[id]) {
		t.mu.Lock()
		// The remote address, not the *Client: a new connection has a new source port, and
		// keeping the pointer would keep a gone connection's client alive.
		if t.conn[id] != cl.Net.Remote {
			t.conn[id] = cl.Net.Remote
			if !t.unsure[id] {
				t.unsure[id] = true
				t.unsureN.Add(1)
			}
		}
		t.mu.Unlock()
	}
	t.l.deliver(pk.TopicName, pk.Payload)
}

func (t *inline) publish(_ context.Context, topic string, payload []byte) error {
	if t.unsureN.Load() != 0 && t.hold(topic, payload) {
		return nil
	}
	// mochi's inline Publish routes synchronously to every subscriber's queue (and to
	// persistent sessions of offline ones); there is no PUBACK to wait for.
	if err := t.srv.Publish(topic, payload, false, t.l.cfg.QoS); err != nil {
		return &Error{Code: device.ErrTransport, Err: err}
	}
	return nil
}

// hold keeps the command for topic back if its terminal is unsure and nobody is subscribed
// to topic; it reports whether it did.
func (t *inline) hold(topic string, payload []byte) bool {
	id, ok := t.l.cmdT.match(topic)
	if !ok {
		return false
	}
	t.mu.Lock()
	check := t.unsure[id]
	delete(t.held, topic) // an older try of this device's command, superseded
	t.mu.Unlock()
	if !check {
		return false
	}
	if t.subscribed(topic) {
		t.mu.Lock()
		if t.unsure[id] {
			delete(t.unsure, id)
			t.unsureN.Add(-1)
		}
		t.mu.Unlock()
		return false
	}
	t.mu.Lock()
	t.held[topic] = payload
	t.mu.Unlock()
	// A SUBSCRIBE handled between the check and the hold found nothing to publish: look
	// again, and publish here if the hook has not taken it meanwhile.
	if t.subscribed(topic) {
		t.mu.Lock()
		_, still := t.held[topic]
		delete(t.held, topic)
		t.mu.Unlock()
		return !still // still held: the caller publishes it now
	}
	return true
}

// subscribed reports whether a client (not an inline one) is subscribed to topic.
func (t *inline) subscribed(topic string) bool {
	s := t.srv.Topics.Subscribers(topic)
	return len(s.Subscriptions) > 0 || len(s.Shared) > 0
}

// flushHeld publishes the held commands whose topics now have a subscriber.
func (t *inline) flushHeld() {
	t.mu.Lock()
	var ready [][2]string
	for topic, payload := range t.held {
		if t.subscribed(topic) {
			ready = append(ready, [2]string{topic, string(payload)})
			delete(t.held, topic)
			if id, ok := t.l.cmdT.match(topic); ok && t.unsure[id] {
				delete(t.unsure, id)
				t.unsureN.Add(-1)
			}
		}
	}
	t.mu.Unlock()
	for _, r := range ready {
		if err := t.srv.Publish(r[0], []byte(r[1]), false, t.l.cfg.QoS); err != nil {
			t.l.cfg.Logger.Warn("held command not published", "topic", r[0], "err", err)
		}
	}
}

func (t *inline) close() {
	for _, f := range t.filters {
		t.srv.Unsubscribe(f, t.l.cfg.SubscriptionID)
	}
	t.mu.Lock()
	clear(t.held)
	t.mu.Unlock()
}

// subscribeWatch is the broker hook that publishes held commands once a SUBSCRIBE gives
// their topics a subscriber. mochi calls OnSubscribed on the subscriber's connection
// goroutine before it writes the SUBACK, so the publish runs on a goroutine of its own and
// does not hold the SUBACK back. Either may reach the terminal first: MQTT lets a server
// send a matching PUBLISH before the SUBACK (3.1.1 section 3.8.4). mochi cannot remove a
// hook, so after Close it stays and does nothing.
type subscribeWatch struct {
	mqtt.HookBase
	t *inline
}

func (w *subscribeWatch) ID() string { return "faceagent-mqttlink-held-commands" }

func (w *subscribeWatch) Provides(b byte) bool { return b == mqtt.OnSubscribed }

func (w *subscribeWatch) OnSubscribed(*mqtt.Client, packets.Packet, []byte) {
	w.t.mu.Lock()
	n := len(w.t.held)
	w.t.mu.Unlock()
	if n == 0 || !w.t.l.enter() {
		return
	}
	go func() {
		defer w.t.l.work.Done()
		w.t.flushHeld()
	}()
}
