package mqttlink

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/seed0e69bba5/faceagent/device"
)

// Bus is an in-process MQTT broker the link publishes and subscribes through, with no
// network connection. agent/broker's *Broker is one.
type Bus interface {
	// Publish routes a message (retain off) to topic's subscribers and returns once it is
	// queued for them; there is no PUBACK to wait for.
	Publish(topic string, payload []byte, qos byte) error
	// SubscribeInline calls fn with every message a network client publishes to a topic
	// matching filter, on that client's connection goroutine; messages of in-process
	// publishers (the link's own commands) are not passed on. payload is not to be kept
	// after fn returns; remote is the publishing connection's address, "" if that client
	// is gone. id names the subscription for UnsubscribeInline.
	SubscribeInline(filter string, id int, fn func(topic string, payload []byte, remote string)) error
	UnsubscribeInline(filter string, id int)
	// HasSubscribers reports whether a network client is subscribed to topic.
	HasSubscribers(topic string) bool
	// WatchSubscribes calls fn after every SUBSCRIBE, once HasSubscribers sees its
	// subscriptions, on the subscriber's connection goroutine (fn must not block), until
	// stop is called. remote is the subscribing connection's address, as SubscribeInline
	// reports a publisher's.
	WatchSubscribes(fn func(remote string)) (stop func())
}

// inline talks to an in-process broker (Config.Bus).
//
// A terminal that heartbeats on a new connection before its SUBSCRIBE has been handled
// (after a broker restart, say) is online to the agent, but a command published to it then
// has no subscriber and the broker drops it: the terminal would wait a whole retry
// interval. So the first command after a heartbeat from a new connection is checked: with
// nobody subscribed to its topic it is held, and published as soon as a SUBSCRIBE makes its
// topic match (watchSubscribes). Only then: the check costs the broker a subscriber scan
// that allocates, and steady sends skip it without a lock.
//
// A held command is for the connection whose heartbeat made the check: it goes out only
// when that connection subscribes. A SUBSCRIBE on another connection drops it. That
// connection ended while the command waited, and the agent may have given the command up
// since (it judges a silent terminal offline and sends something else when it returns):
// published to the terminal's next connection it would arrive next to what the agent sends
// there, two commands in flight. A command dropped this way is sent again by the agent's
// retry, as one the broker dropped for want of a subscriber would be. Not covered: a
// connection that heartbeats, then stays unsubscribed and silent until the agent judges its
// terminal offline, still gets the command held for it when it subscribes at last (the hold
// is for the round trip between a heartbeat and its SUBSCRIBE).
type inline struct {
	l       *Link
	bus     Bus
	filters []string
	// unwatch ends the SUBSCRIBE watch at close.
	unwatch func()

	unsureN atomic.Int32 // len(unsure), read without mu on every publish
	mu      sync.Mutex
	conn    map[string]string      // device → the connection (remote address) its last heartbeat came on
	unsure  map[string]bool        // devices whose connection has not been seen subscribed
	held    map[string]heldCommand // command topic → the command waiting for a subscriber
}

// heldCommand is a command waiting for its terminal's SUBSCRIBE.
type heldCommand struct {
	payload []byte
	conn    string // the connection it waits for (the remote address of its heartbeat)
}

func newInline(l *Link) (transport, error) {
	t := &inline{l: l, bus: l.cfg.Bus, filters: []string{l.ackT.filter(), l.hbT.filter()},
		conn: map[string]string{}, unsure: map[string]bool{}, held: map[string]heldCommand{}}
	for i, f := range t.filters {
		if err := t.bus.SubscribeInline(f, l.cfg.SubscriptionID, t.handle); err != nil {
			for _, g := range t.filters[:i] {
				t.bus.UnsubscribeInline(g, l.cfg.SubscriptionID)
			}
			return nil, &Error{Code: device.ErrConfig, Topic: f, Err: err}
		}
	}
	t.unwatch = t.bus.WatchSubscribes(t.subscribed)
	l.setConn(true, nil) // an in-process broker is up as long as we are
	return t, nil
}

// handle runs on the publishing terminal's connection goroutine (the bus delivers inline
// subscriptions synchronously), so a full Events channel holds that terminal back. The bus
// passes on no in-process publisher's message: with an unusual template the link's own
// command could otherwise come back as an "ack".
func (t *inline) handle(topic string, payload []byte, remote string) {
	// Only the link's own terminals: any client may publish on a made-up id's topic, and
	// each would stay in conn and unsure for good (deliver reports it as an Error).
	if id, ok := t.l.hbT.match(topic); ok && remote != "" && validDeviceID(id) && (t.l.devices == nil || t.l.devices[id]) {
		t.mu.Lock()
		// The remote address: a new connection has a new source port.
		if t.conn[id] != remote {
			t.conn[id] = remote
			if !t.unsure[id] {
				t.unsure[id] = true
				t.unsureN.Add(1)
			}
		}
		t.mu.Unlock()
	}
	t.l.deliver(topic, payload)
}

func (t *inline) publish(_ context.Context, topic string, payload []byte) error {
	if t.unsureN.Load() != 0 && t.hold(topic, payload) {
		return nil
	}
	// The bus routes synchronously to every subscriber's queue (and to persistent
	// sessions of offline ones); there is no PUBACK to wait for.
	if err := t.bus.Publish(topic, payload, t.l.cfg.QoS); err != nil {
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
	check, conn := t.unsure[id], t.conn[id]
	delete(t.held, topic) // an older try of this device's command, superseded
	t.mu.Unlock()
	if !check {
		return false
	}
	if t.bus.HasSubscribers(topic) {
		t.mu.Lock()
		if t.unsure[id] {
			delete(t.unsure, id)
			t.unsureN.Add(-1)
		}
		t.mu.Unlock()
		return false
	}
	t.mu.Lock()
	t.held[topic] = heldCommand{payload: payload, conn: conn}
	t.mu.Unlock()
	// A SUBSCRIBE handled between the check and the hold found nothing to publish: look
	// again, and publish here if the hook has not taken it meanwhile. The command is the
	// agent's current one (it was just sent), so whichever connection subscribed gets it.
	if t.bus.HasSubscribers(topic) {
		t.mu.Lock()
		_, still := t.held[topic]
		delete(t.held, topic)
		t.mu.Unlock()
		return !still // still held: the caller publishes it now
	}
	return true
}

// flushHeld publishes the held commands whose topics now have a subscriber and that wait
// for remote, the connection that subscribed; it drops those whose topics another
// connection subscribed to (see inline).
func (t *inline) flushHeld(remote string) {
	t.mu.Lock()
	var ready [][2]string
	for topic, h := range t.held {
		if !t.bus.HasSubscribers(topic) {
			continue
		}
		delete(t.held, topic)
		if h.conn != remote {
			t.l.cfg.Logger.Debug("held command dropped: its terminal subscribed on another connection",
				"topic", topic, "held_for", h.conn, "subscriber", remote)
			continue
		}
		ready = append(ready, [2]string{topic, string(h.payload)})
		if id, ok := t.l.cmdT.match(topic); ok && t.unsure[id] {
			delete(t.unsure, id)
			t.unsureN.Add(-1)
		}
	}
	t.mu.Unlock()
	for _, r := range ready {
		if err := t.bus.Publish(r[0], []byte(r[1]), t.l.cfg.QoS); err != nil {
			t.l.cfg.Logger.Warn("held command not published", "topic", r[0], "err", err)
		}
	}
}

func (t *inline) close() {
	t.unwatch()
	for _, f := range t.filters {
		t.bus.UnsubscribeInline(f, t.l.cfg.SubscriptionID)
	}
	t.mu.Lock()
	clear(t.held)
	t.mu.Unlock()
}

// subscribed publishes held commands once a SUBSCRIBE on remote gives their topics a
// subscriber (Bus.WatchSubscribes). The bus calls it on the subscriber's connection
// goroutine before the SUBACK is written, so the publish runs on a goroutine of its own and
// does not hold the SUBACK back. Either may reach the terminal first: MQTT lets a server
// send a matching PUBLISH before the SUBACK (3.1.1 section 3.8.4).
func (t *inline) subscribed(remote string) {
	t.mu.Lock()
	n := len(t.held)
	t.mu.Unlock()
	if n == 0 || !t.l.enter() {
		return
	}
	go func() {
		defer t.l.work.Done()
		t.flushHeld(remote)
	}()
}
