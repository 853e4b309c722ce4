// Package publish is the contract between what the agent reports upstream (results,
// deadletters, forwarded acks and heartbeats) and what carries it there (the upstream
// connection, or the embedded broker): a Publisher, and InOrder, which publishes a batch
// in order with as many messages in flight as the carrier allows and says how many of the
// first ones were accepted.
//
// # Tutorial
//
//	mark := publish.MarkOf(pub)
//	n, err := publish.InOrder(ctx, pub, len(batch), func(i int) (string, []byte, bool) {
//		return topic, batch[i], false
//	})
//	if n > 0 && publish.SyncSince(pub, mark) == nil {
//		markReported(batch[:n]) // accepted and, for the embedded broker, stored
//	}
//	// err != nil: send batch[n:] again later, in the same order.
//
// # What holds
//
//   - InOrder returns a contiguous prefix: the caller marks exactly those messages reported
//     and sends the rest again, so a message is never lost and the first copies arrive in
//     order (copies of a message sent again may follow: at least once).
//   - With a Pipelined carrier at most its Window messages are in flight; after the first
//     failure nothing more is written, and what was written before it is still waited for.
//   - A carrier whose Publish returns before the message is stored (the embedded broker's
//     deferred sessions sync) implements Syncer; SyncSince reports a failed store of any
//     message published since the mark, even if a later store succeeded.
//
// The package has no I/O of its own: carriers implement the interfaces.
package publish
