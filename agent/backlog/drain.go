package backlog

import (
	"context"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/publish"
)

// Message is one message of a Source's batch.
type Message struct {
	Topic   string
	Payload []byte
	// ID and Kind are the source's own (a Backlog's entry id and kind).
	ID   uint64
	Kind byte
	// Skipped is set by the Drainer: the source said the message was no longer to be
	// sent (Source.Live) when its turn came, so it was not published.
	Skipped bool
}

// Source is what a Drainer publishes: messages taken in order from the head of a queue
// (a Backlog, or the outbox's results), marked reported once accepted upstream.
type Source interface {
	// Take appends up to n messages from the head, in order, to batch; more reports
	// whether more were waiting behind them. An error ends the round, to be tried again.
	Take(batch []Message, n int) (out []Message, more bool, err error)
	// Live reports whether m is still to be sent when its turn comes (an entry may have
	// been superseded while an earlier publish waited).
	Live(m *Message) bool
	// Accepted is given the prefix of the last batch that the publisher accepted and
	// stored (publish.SyncSince), Skipped ones included; it marks them reported and
	// returns how many it did, with an error if the rest is to be sent again.
	Accepted(ctx context.Context, done []Message) (int, error)
}

// Gathering is how long a Drainer lets messages gather after a poke before it publishes
// (zero: at once). Settled, if set, is asked at the poke and at pokes during the wait:
// true ends the wait early (nothing more is on its way, so waiting would only delay what
// is there).
type Gathering struct {
	Wait    time.Duration
	Settled func() bool
}

// Drainer publishes a Source upstream in order, one round per poke of Ready: take a
// batch, publish it in order (publish.InOrder), sync (publish.SyncSince), mark the
// accepted prefix reported; again while more is waiting; after a failed round, back off
// (100 ms doubling to 30 s, reset by progress) and go again from the first message not
// accepted.
type Drainer struct {
	Pub    publish.Publisher
	Source Source
	Ready  <-chan struct{}
	// Batch is how many messages a round takes, at least (publish.BatchFor).
	Batch  int
	Gather Gathering
	// Failed is told of every failed round and when it is retried.
	Failed func(err error, retryIn time.Duration)

	batch []Message // the publishing goroutine's own, used again every round
}

// Run publishes until ctx ends.
func (d *Drainer) Run(ctx context.Context) {
	failed := d.Failed
	if failed == nil {
		failed = func(error, time.Duration) {}
	}
	run(ctx, d.Ready, d.Gather, d.drain, failed)
}

// drain publishes one batch; more is true when there may be more, sent is how many were
// marked reported, err non-nil when the batch is to be tried again.
func (d *Drainer) drain(ctx context.Context) (more bool, sent int, err error) {
	batch, more, err := d.Source.Take(d.batch[:0], publish.BatchFor(d.Pub, d.Batch))
	defer func() { clear(batch); d.batch = batch[:0] }() // pin no payload until the next round
	if err != nil || len(batch) == 0 {
		return false, 0, err
	}
	// In order, up to the publisher's window in flight; n is the prefix accepted (or
	// found dead). A publish may have waited long (for the connection): a message
	// superseded meanwhile is not sent.
	mark := publish.MarkOf(d.Pub)
	n, err := publish.InOrder(ctx, d.Pub, len(batch), func(i int) (string, []byte, bool) {
		m := &batch[i]
		m.Skipped = !d.Source.Live(m)
		return m.Topic, m.Payload, m.Skipped
	})
	published := false
	for i := range batch[:n] {
		published = published || !batch[i].Skipped
	}
	if published {
		if serr := publish.SyncSince(d.Pub, mark); serr != nil {
			return true, 0, serr // not stored: sent again
		}
	}
	if n > 0 {
		var aerr error
		sent, aerr = d.Source.Accepted(ctx, batch[:n])
		if err == nil {
			err = aerr
		}
	}
	if err != nil {
		return true, sent, err
	}
	return more, sent, nil
}

// run is the publishing loop: on every poke of ready it lets g gather, then calls drain
// until nothing more is waiting; after a failed round it calls failed and waits
// nextRetryDelay (reset when the round made progress) before the next. It returns when
// ctx ends.
//
// Gathering lets what arrives meanwhile go out in the same round: one wake of the
// publisher, one sync and one reported record for a burst instead of one per message,
// and the subscribers' writers get the burst together. Each message is delayed by at
// most g.Wait; an idle loop costs nothing (the timer runs only after a poke).
func run(ctx context.Context, ready <-chan struct{}, g Gathering, drain func(context.Context) (more bool, sent int, err error), failed func(err error, retryIn time.Duration)) {
	var delay time.Duration
	var timer, recheck *time.Timer // stopped between gatherings
	if g.Wait > 0 {
		timer, recheck = time.NewTimer(g.Wait), time.NewTimer(settleEvery)
		timer.Stop()
		recheck.Stop()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ready:
		}
		if timer != nil && !g.gather(ctx, ready, timer, recheck) {
			return
		}
		// A poke left from the gathering is for messages this drain takes (it reads the
		// backlog after this point): taken now, it does not start a gathering that finds
		// nothing. A message added from here on pokes again.
		select {
		case <-ready:
		default:
		}
		for {
			more, sent, err := drain(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if sent > 0 {
					delay = 0 // progress: the next try comes soon again
				}
				delay = nextRetryDelay(delay)
				failed(err, delay)
				select {
				case <-ctx.Done():
					return
				case <-time.After(delay):
				}
				continue
			}
			delay = 0
			if !more {
				break
			}
		}
	}
}

func (g Gathering) isSettled() bool { return g.Settled != nil && g.Settled() }

// settleEvery bounds how often a gathering asks Settled (the reporter's walks the
// outbox's results): a poke sooner after the last question is answered by one asked when
// settleEvery has passed.
const settleEvery = time.Millisecond

// gather waits out one gathering after a poke; false when ctx ended. timer and recheck
// are stopped when it returns.
//
// It listens to ready only to ask Settled, and not while a question is pending on
// recheck: a source poked on every message (the forwarder's on every ack, the reporter's
// on every result) would otherwise wake the publisher once per message during every
// gathering, only to go back to waiting. A poke that comes meanwhile stays in ready
// (capacity 1) and is taken with the recheck or after the gathering.
func (g Gathering) gather(ctx context.Context, ready <-chan struct{}, timer, recheck *time.Timer) bool {
	if g.isSettled() {
		return true
	}
	asked := time.Now()
	timer.Reset(g.Wait)
	defer timer.Stop()
	defer recheck.Stop()
	var recheckC <-chan time.Time // nil: no question pending (or no Settled to ask)
	for {
		readyC := ready
		if g.Settled == nil || recheckC != nil {
			readyC = nil
		}
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-readyC:
			if since := time.Since(asked); since < settleEvery {
				recheck.Reset(settleEvery - since)
				recheckC = recheck.C
				continue
			}
		case <-recheckC:
			recheckC = nil
			select { // the question asked now answers a poke that came while it waited
			case <-ready:
			default:
			}
		}
		asked = time.Now()
		if g.Settled() {
			return true
		}
	}
}

// nextRetryDelay backs off from 100ms to 30s: a broker that is away, or a subscriber whose
// queue is full, is asked again soon but not hammered. With the embedded broker every
// retry is a duplicate for the other subscribers: a stall of an hour (a persistent
// session away at its quota) costs them about 120 copies of one message, not thousands.
func nextRetryDelay(prev time.Duration) time.Duration {
	if prev <= 0 {
		return 100 * time.Millisecond
	}
	return min(2*prev, 30*time.Second)
}
