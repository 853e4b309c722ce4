package agent

import (
	"context"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/publish"
)

// publisher is what carries reports upstream.
type publisher = publish.Publisher

// inlinePublisher publishes through the embedded broker's inline client: the message is
// routed (and, for persistent sessions, stored by the broker's storage hook) before
// Publish returns.
//
// It waits until the broker serves: mochi loads the stored sessions and their
// subscriptions only then, and a message published before is routed to nobody. The
// reporter starts before the broker listens (so no task is taken before the outbox is
// open) and publishes the results left unreported by a crash at once; without the wait
// they were dropped and marked reported, and a persistent back office never saw them.
//
// A message the broker could not queue for one subscriber is that subscriber's matter, not
// the publisher's: the broker holds a QoS 1 message in the subscriber's session while its
// write queue is full, and drops it for that subscriber alone only once its session is
// full (max_session_bytes, counted in faceagent_broker_dropped_total). Publishing it again
// to everyone would stall every other subscriber behind the slowest one.
type inlinePublisher struct {
	srv     *broker.Broker
	serving <-chan struct{} // closed once the broker has started
	// br, when set, publishes with PublishDeferred: SyncSince must then be called before a
	// published message counts as stored.
	br *broker.Broker
}

// Mark returns the point from which SyncSince checks what is published.
func (p inlinePublisher) Mark() uint64 {
	if p.br == nil {
		return 0
	}
	return uint64(p.br.SessionsMark())
}

// SyncSince returns once what was published is stored by the embedded broker, with an
// error if any of what was published since mark (Mark's return) is not: a commit of the
// broker's sessions journal that failed, even if a later one succeeded (a full disk,
// freed again), must not let the batch count as stored.
func (p inlinePublisher) SyncSince(mark uint64) error {
	if p.br == nil {
		return nil
	}
	return p.br.SyncSessionsSince(broker.SessionsMark(mark))
}

func (p inlinePublisher) publish(topic string, payload []byte) error {
	if p.br != nil {
		return p.br.PublishDeferred(topic, payload, 1)
	}
	return p.srv.Publish(topic, payload, 1)
}

func (p inlinePublisher) Publish(ctx context.Context, topic string, payload []byte) error {
	select {
	case <-p.serving:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.publish(topic, payload)
}

// topics are the upstream topics of one gateway (docs/design.md "Topics").
type topics struct{ tasks, results, deadletter, devices string }

func upstreamTopics(gw string) topics {
	p := "faceagent/" + gw + "/"
	return topics{tasks: p + "tasks", results: p + "results", deadletter: p + "deadletter", devices: p + "devices/"}
}

// poke signals c (capacity 1) without blocking.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
