package publish

import (
	"context"
	"time"
)

// Publisher sends one message with QoS 1 and returns once the broker accepted it (a
// PUBACK with a success code, or routed by the embedded broker).
type Publisher interface {
	Publish(ctx context.Context, topic string, payload []byte) error
}

// Pending is one message written and not yet acknowledged.
type Pending interface {
	// Wait returns nil once the broker accepted the message. t is the caller's timer,
	// which Wait arms for its own timeout: a stream waits for its messages one after the
	// other with one timer, not one per message.
	Wait(ctx context.Context, t *time.Timer) error
}

// Pipelined is a Publisher that keeps several QoS 1 messages in flight on one connection:
// PublishAsync writes a message after every message written before it and returns
// without waiting for its PUBACK. MQTT keeps the order of QoS 1 messages on one connection
// per topic, so the first copies reach subscribers in the order written.
type Pipelined interface {
	Publisher
	// Window is how many messages a stream may keep in flight.
	Window() int
	// PublishAsync refuses when after (nil, or a message of the caller still in flight)
	// was dropped with its session: what follows it must wait until it was sent again,
	// or the first copies would arrive out of order.
	PublishAsync(ctx context.Context, topic string, payload []byte, after Pending) (Pending, error)
}

// Syncer is a Publisher whose Publish may return before the message is stored.
type Syncer interface {
	// Mark returns the point from which SyncSince checks what is published.
	Mark() uint64
	// SyncSince returns once what was published is stored, with an error if any of what
	// was published since mark is not.
	SyncSince(mark uint64) error
}

// MarkOf returns the point from which SyncSince checks what p publishes: take it before
// publishing a batch.
func MarkOf(p Publisher) uint64 {
	if s, ok := p.(Syncer); ok {
		return s.Mark()
	}
	return 0
}

// SyncSince returns once what p published is stored, with an error if any of what it
// published since mark (MarkOf) is not: call it before marking published messages
// reported. It returns nil at once for a Publisher that is not a Syncer.
func SyncSince(p Publisher, mark uint64) error {
	if s, ok := p.(Syncer); ok {
		return s.SyncSince(mark)
	}
	return nil
}

// BatchFor is how many messages a stream takes from its backlog per round: at least
// base, and a whole window, so that a window larger than the batch is used.
func BatchFor(p Publisher, base int) int {
	if pp, ok := p.(Pipelined); ok {
		return max(base, pp.Window())
	}
	return base
}

// InOrder publishes the messages 0..n-1 (msg gives each one's topic and payload; skip:
// nothing to send, it counts as done) in order and returns how many of the first ones the
// broker accepted — a contiguous prefix, so a caller marks exactly those reported — and
// the error that stopped it. With a Pipelined publisher up to its window are in flight;
// on the first failure nothing more is written, the messages before it are still waited
// for, and the caller sends everything from the first unaccepted one again (duplicates
// possible, no loss, no reordering of first copies). Any other publisher (the embedded
// broker's, whose drop detection needs one publish at a time) publishes one by one.
func InOrder(ctx context.Context, p Publisher, n int, msg func(i int) (topic string, payload []byte, skip bool)) (int, error) {
	pp, ok := p.(Pipelined)
	if !ok {
		for i := range n {
			topic, payload, skip := msg(i)
			if skip {
				continue
			}
			if err := p.Publish(ctx, topic, payload); err != nil {
				return i, err
			}
		}
		return n, nil
	}
	window := max(1, pp.Window())
	queue := make([]Pending, 0, min(n, window)) // nil: an entry skipped
	t := time.NewTimer(time.Hour)               // armed by each Wait for its own timeout
	defer t.Stop()
	var err error
	acked, sent := 0, 0
	for sent < n {
		if sent-acked >= window {
			if err := wait(ctx, queue[0], t); err != nil {
				return acked, err // the prefix ends here; what follows is sent again
			}
			queue[0] = nil
			queue = queue[1:]
			acked++
			continue
		}
		topic, payload, skip := msg(sent)
		var f Pending
		if !skip {
			if f, err = pp.PublishAsync(ctx, topic, payload, oldest(queue)); err != nil {
				break
			}
		}
		queue = append(queue, f)
		sent++
	}
	// Wait for what is in flight, in order: the messages before a failure may still be
	// accepted (after a reconnect the session sends them again).
	for _, f := range queue {
		if werr := wait(ctx, f, t); werr != nil {
			if err == nil {
				err = werr
			}
			break
		}
		acked++
	}
	return acked, err
}

// wait is f.Wait, where a nil f (an entry skipped) is accepted at once.
func wait(ctx context.Context, f Pending, t *time.Timer) error {
	if f == nil {
		return nil
	}
	return f.Wait(ctx, t)
}

// oldest is the first message of queue that was sent (nil: none).
func oldest(queue []Pending) Pending {
	for _, f := range queue {
		if f != nil {
			return f
		}
	}
	return nil
}
