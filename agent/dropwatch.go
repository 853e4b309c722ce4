package agent

import (
	"errors"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// errDropped is returned by an inline publish that the embedded broker dropped for at
// least one subscriber: the report is not marked reported and is published again.
var errDropped = errors.New("the embedded broker dropped the message for a subscriber (its queue was full); sending it again")

// dropWatch is a mochi hook that sees the embedded broker drop deliveries. mochi v2.7.9
// drops a QoS 1 message meant for a connected subscriber in two places without telling
// the publisher (an inline publish returns nil either way):
//
//   - the subscriber's pending-writes queue (Capabilities.MaximumClientWritesPending) is
//     full: OnPublishDropped(cl, pk) is called with the message as published;
//   - its inflight store is at Capabilities.MaximumInflight, or packet ids are exhausted:
//     no hook for the first, only the server-wide counter Info.InflightDropped.
//
// The reporter and the deadletter log take a mark before an inline publish and ask after
// it whether a drop may have hit it: the publish runs synchronously (inline publishes
// route on the caller's goroutine), and each watched topic has one publisher goroutine,
// so a watched topic's drop count that moved during the call is this message's. The
// inflight counter is server-wide, so a concurrent drop of another message also counts:
// that only costs a duplicate, never a loss.
type dropWatch struct {
	mqtt.HookBase
	srv     *mqtt.Server
	watched map[string]*atomic.Uint64 // read-only after newDropWatch
	m       *agentMetrics
}

func newDropWatch(srv *mqtt.Server, m *agentMetrics, topics ...string) *dropWatch {
	d := &dropWatch{srv: srv, watched: map[string]*atomic.Uint64{}, m: m}
	for _, t := range topics {
		d.watched[t] = new(atomic.Uint64)
	}
	return d
}

func (d *dropWatch) ID() string { return "faceagent-drop-watch" }

func (d *dropWatch) Provides(b byte) bool { return b == mqtt.OnPublishDropped }

// OnPublishDropped runs on the publisher's goroutine, inside publishToClient.
func (d *dropWatch) OnPublishDropped(_ *mqtt.Client, pk packets.Packet) {
	d.m.brokerDropped.With("pending_writes").Inc()
	if c := d.watched[pk.TopicName]; c != nil {
		c.Add(1)
	}
}

// dropMark is what mark saw before a publish.
type dropMark struct{ own, inflight uint64 }

func (d *dropWatch) mark(topic string) dropMark {
	c := d.watched[topic]
	if c == nil {
		return dropMark{}
	}
	return dropMark{own: c.Load(), inflight: d.inflightDropped()}
}

// droppedSince reports whether a delivery of a message on topic may have been dropped
// since m was taken. Unwatched topics are never reported.
func (d *dropWatch) droppedSince(topic string, m dropMark) bool {
	c := d.watched[topic]
	if c == nil {
		return false
	}
	return c.Load() != m.own || d.inflightDropped() != m.inflight
}

// inflightDropped is the broker's count of deliveries dropped at the inflight quota.
func (d *dropWatch) inflightDropped() uint64 {
	return uint64(atomic.LoadInt64(&d.srv.Info.InflightDropped))
}
