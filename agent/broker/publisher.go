package broker

import "context"

// Publisher publishes QoS 1 messages from inside the process as the carrier of the
// agent's reports (it has the shape of agent/publish's Publisher and Syncer): a message is
// routed before Publish returns, and its storage in the kept sessions is confirmed by
// SyncSince, one sessions commit for a whole batch instead of one per message.
//
// What holds:
//   - Publish waits until the broker serves (Start): the stored sessions and their
//     subscriptions are loaded only then, and a message published earlier would be routed
//     to nobody — the results left unreported by a crash are published at once, before
//     the broker listens.
//   - A message the broker cannot queue for one subscriber is that subscriber's matter,
//     not the publisher's: the broker holds a QoS 1 message in the subscriber's session
//     while its write queue is full, and drops it for that subscriber alone once its
//     session is full (MaxSessionBytes, counted in Dropped). Publishing it again to
//     everyone would stall every other subscriber behind the slowest one.
//   - SyncSince(mark) reports a failed commit of anything published since mark, even when
//     a later commit succeeded (a full disk, freed again): such a batch is not stored.
type Publisher struct{ b *Broker }

// Publisher returns the broker's in-process publisher of reports.
func (b *Broker) Publisher() Publisher { return Publisher{b: b} }

// Publish routes a QoS 1 message once the broker serves (or ctx ends); its storage in the
// kept sessions is confirmed by SyncSince.
func (p Publisher) Publish(ctx context.Context, topic string, payload []byte) error {
	select {
	case <-p.b.serving:
	case <-ctx.Done():
		return ctx.Err()
	}
	return p.b.PublishDeferred(topic, payload, 1)
}

// Mark returns the point from which SyncSince checks what is published.
func (p Publisher) Mark() uint64 { return uint64(p.b.SessionsMark()) }

// SyncSince returns once what was published is stored in the kept sessions, with an
// error if anything published since mark was not.
func (p Publisher) SyncSince(mark uint64) error {
	return p.b.SyncSessionsSince(SessionsMark(mark))
}
