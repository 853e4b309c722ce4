package broker

import (
	"context"
	"errors"
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// The in-process side of the broker: what the agent's parts use of it without a network
// connection and without naming a mochi type. Publish, SubscribeInline, UnsubscribeInline,
// HasSubscribers and WatchSubscribes are the bus the terminals' links use
// (device/mqttlink's Bus); Intercept is the intake of tasks; Stats is for /metrics.

// Publish routes a message to the subscribers of topic (retain off) as the broker's inline
// client, and returns once it is queued for every subscriber and, for the kept sessions it
// went to, stored in the sessions journal. PublishDeferred does not wait for the journal.
func (b *Broker) Publish(topic string, payload []byte, qos byte) error {
	return b.srv.Publish(topic, payload, false, qos)
}

// SubscribeInline calls fn with every message a network client publishes to a topic
// matching filter: its topic, its payload (the packet's own buffer, not to be kept after
// the call) and the address of the publishing connection ("" when that client is no longer
// known to the broker: it went meanwhile). fn's type is unnamed so that an interface
// declared elsewhere (device/mqttlink's Bus) is satisfied without importing this package. Messages of in-process publishers (Publish, PublishDeferred, every
// inline client) are not passed on: a caller publishing to topics its own filter matches
// does not hear itself. fn runs on the publishing client's connection goroutine before the
// broker reads that client's next packet, so a slow fn holds that client back. id names
// the subscription for UnsubscribeInline; subscribing again with the same filter and id
// replaces fn.
func (b *Broker) SubscribeInline(filter string, id int, fn func(topic string, payload []byte, remote string)) error {
	// A closure taking the packet by value once: a method value's wrapper would copy the
	// packet again on the publisher's stack.
	return b.srv.Subscribe(filter, id, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		// mochi passes its inline client as the first argument to every inline handler;
		// the publisher is pk.Origin.
		// PublishDeferred's client is inline too but not in srv.Clients.
		cl, known := b.srv.Clients.Get(pk.Origin)
		if (known && cl.Net.Inline) || (!known && (pk.Origin == "" || pk.Origin == mqtt.InlineClientId || pk.Origin == b.deferred.ID)) {
			return
		}
		remote := ""
		if known {
			remote = cl.Net.Remote
		}
		fn(pk.TopicName, pk.Payload, remote)
	})
}

// UnsubscribeInline removes the inline subscription filter, id.
func (b *Broker) UnsubscribeInline(filter string, id int) {
	_ = b.srv.Unsubscribe(filter, id)
}

// HasSubscribers reports whether a client other than an inline one is subscribed to topic
// (shared subscriptions included). It scans the subscription index: for occasional checks,
// not for every message.
func (b *Broker) HasSubscribers(topic string) bool {
	s := b.srv.Topics.Subscribers(topic)
	return len(s.Subscriptions) > 0 || len(s.Shared) > 0
}

// WatchSubscribes calls fn after every SUBSCRIBE a client makes, once its subscriptions are
// in the index (HasSubscribers sees them) and before its SUBACK is written, on that
// client's connection goroutine: fn must not block. remote is the subscribing connection's
// address, as SubscribeInline reports a publisher's. stop removes fn; it may be called any
// time, more than once.
func (b *Broker) WatchSubscribes(fn func(remote string)) (stop func()) {
	return b.subscribes.add(fn)
}

// subscribeWatchers is the hook behind WatchSubscribes, added in New: watchers come and go
// while the broker runs, and mochi cannot remove a hook.
type subscribeWatchers struct {
	mqtt.HookBase
	mu   sync.Mutex
	next int
	fns  map[int]func(remote string)
}

func (w *subscribeWatchers) ID() string { return "faceagent-subscribe-watchers" }

func (w *subscribeWatchers) Provides(b byte) bool { return b == mqtt.OnSubscribed }

func (w *subscribeWatchers) add(fn func(remote string)) func() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		w.fns = map[int]func(remote string){}
	}
	w.next++
	id := w.next
	w.fns[id] = fn
	return func() {
		w.mu.Lock()
		delete(w.fns, id)
		w.mu.Unlock()
	}
}

func (w *subscribeWatchers) OnSubscribed(cl *mqtt.Client, _ packets.Packet, _ []byte) {
	w.mu.Lock()
	if len(w.fns) == 0 {
		w.mu.Unlock()
		return
	}
	fns := make([]func(string), 0, len(w.fns))
	for _, fn := range w.fns {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(cl.Net.Remote)
	}
}

// InterceptFunc takes a message a network client published to an intercepted topic, before
// the broker routes or acknowledges it. payload is the packet's own buffer: it must not be
// kept after the call. nil accepts the message: it is routed and acknowledged. An error
// refuses it, so that the publisher sends it again:
//   - MQTT 5, QoS 1 or 2: the PUBACK (PUBREC) carries reason code 0x83 (implementation
//     specific error) and the message is not routed;
//   - MQTT 3.1.1 (which has no negative acknowledgement), or QoS 0: no acknowledgement, and
//     the client is disconnected (MQTT 5: reason 0x88 server unavailable), so it resends
//     the message when it reconnects.
//
// It runs on the publisher's connection goroutine: a slow fn slows that publisher, which is
// the backpressure an intake wants.
type InterceptFunc func(ctx context.Context, clientID string, payload []byte) error

// Intercept hands the messages network clients publish to topic (a topic name, not a
// filter) to fn; see InterceptFunc. Call it before Start, once per topic.
func (b *Broker) Intercept(topic string, fn InterceptFunc) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return errors.New("broker: Intercept after Start")
	}
	if b.intercept == nil {
		// Added at the first call: the broker of a caller that intercepts nothing has no
		// hook to call on every PUBLISH.
		h := &interceptHook{srv: b.srv}
		if err := b.srv.AddHook(h, nil); err != nil {
			return err
		}
		b.intercept = h
	}
	for _, r := range b.intercept.routes {
		if r.topic == topic {
			return errors.New("broker: topic " + topic + " is intercepted already")
		}
	}
	b.intercept.routes = append(b.intercept.routes, interceptRoute{topic: topic, fn: fn})
	return nil
}

type interceptRoute struct {
	topic string
	fn    InterceptFunc
}

// interceptHook runs the intercepted topics' functions in OnPublish: mochi calls it before
// it routes the message or writes the PUBACK, and OnPublish is where a message can be
// refused with an error PUBACK. routes is only written before Start.
type interceptHook struct {
	mqtt.HookBase
	srv    *mqtt.Server
	routes []interceptRoute
}

func (h *interceptHook) ID() string { return "faceagent-intercept" }

func (h *interceptHook) Provides(b byte) bool { return b == mqtt.OnPublish }

func (h *interceptHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		return pk, nil
	}
	for i := range h.routes {
		r := &h.routes[i]
		if pk.TopicName != r.topic {
			continue
		}
		if err := r.fn(context.Background(), cl.ID, pk.Payload); err == nil {
			return pk, nil // acknowledged, and routed (a back office may watch the topic)
		}
		if cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos > 0 {
			// MQTT5: a PUBACK with an error reason tells the publisher to send it again.
			return pk, packets.ErrImplementationSpecificError
		}
		// MQTT 3.1.1 has no negative PUBACK: withhold it and drop the connection, so the
		// publisher resends the message when it reconnects.
		_ = h.srv.DisconnectClient(cl, packets.ErrServerUnavailable)
		return pk, packets.ErrRejectPacket
	}
	return pk, nil
}

// Stats are the broker's bounds counters since New and the bytes it holds now (doc.go,
// "Bounds").
type Stats struct {
	// Messages dropped for one subscriber, by the bound that was full: its queue of pending
	// writes (a QoS 0 message), its session (MaxSessionBytes), every session
	// (MaxQueuedBytes), its session's count of messages (MaxInflight).
	DroppedPendingWrites, DroppedSessionBytes, DroppedQueuedBytes, DroppedInflight int64
	// HeldWrites counts QoS 1/2 messages held in a session instead of being queued for
	// writing, its queue full (MaxPendingWriteBytes): written once it empties, not lost.
	HeldWrites int64
	// What was refused for a bound: connections (MaxClients), subscriptions
	// (MaxSubscriptions), subscriptions, wills and QoS 2 messages that did not fit
	// (MaxSessionBytes, MaxQueuedBytes), retained messages not retained (MaxRetainedBytes).
	RefusedClients, RefusedSubscriptions, RefusedSessionBytes, RefusedQueuedBytes, RefusedRetainedBytes int64
	// QueuedBytes are held by the sessions (against MaxQueuedBytes); RetainedBytes by the
	// retained messages (against MaxRetainedBytes).
	QueuedBytes, RetainedBytes int64
}

// Stats returns the bounds counters and the bytes held.
func (b *Broker) Stats() Stats {
	return Stats{
		DroppedPendingWrites: b.Dropped(mqtt.QuotaWritesDropped),
		DroppedSessionBytes:  b.Dropped(mqtt.QuotaSessionBytes),
		DroppedQueuedBytes:   b.Dropped(mqtt.QuotaQueuedBytes),
		DroppedInflight:      b.Dropped(mqtt.QuotaInflight),
		HeldWrites:           b.Dropped(mqtt.QuotaWritesHeld),
		RefusedClients:       b.Refused(mqtt.QuotaClients),
		RefusedSubscriptions: b.Refused(mqtt.QuotaSubscriptions),
		RefusedSessionBytes:  b.Refused(mqtt.QuotaSessionBytes),
		RefusedQueuedBytes:   b.Refused(mqtt.QuotaQueuedBytes),
		RefusedRetainedBytes: b.Refused(mqtt.QuotaRetainedBytes),
		QueuedBytes:          b.QueuedBytes(),
		RetainedBytes:        b.RetainedBytes(),
	}
}
