package agent

import (
	"context"
	"encoding/binary"
	"time"
)

// publishBacklog is the publisher loop of a journalled backlog (the deadletter log, the
// forward log): on every poke of ready it calls drain until nothing more is waiting;
// after a failed round it calls failed and waits nextRetryDelay (reset when the round
// made progress) before the next. It returns when ctx ends.
func publishBacklog(ctx context.Context, ready <-chan struct{}, drain func(context.Context) (more bool, sent int, err error), failed func(err error, retryIn time.Duration)) {
	publishBacklogGathered(ctx, ready, gathering{}, drain, failed)
}

// gathering is how long a backlog's publisher lets messages gather after a poke before it
// drains (zero: it drains at once). settled, if set, is asked at the poke and at every
// poke during the wait: true ends the wait early (nothing more is on its way, so waiting
// would only delay what is there).
type gathering struct {
	wait    time.Duration
	settled func() bool
}

// publishBacklogGathered is publishBacklog that, once poked, lets g.wait pass before it
// drains (unless g.settled says nothing more is coming), so that what arrives meanwhile
// goes out in the same round: one wake of the publisher, one sync and one reported record
// for a burst instead of one per message, and the subscribers' writers get the burst
// together (mochi writes queued packets in one call). Each message is delayed by at most
// g.wait; an idle backlog costs nothing (the timer runs only after a poke).
func publishBacklogGathered(ctx context.Context, ready <-chan struct{}, g gathering, drain func(context.Context) (more bool, sent int, err error), failed func(err error, retryIn time.Duration)) {
	var delay time.Duration
	var timer, recheck *time.Timer // stopped between gatherings
	if g.wait > 0 {
		timer, recheck = time.NewTimer(g.wait), time.NewTimer(settleEvery)
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

func (g gathering) isSettled() bool { return g.settled != nil && g.settled() }

// settleEvery bounds how often a gathering asks settled (the reporter's walks the
// outbox's results): a poke sooner after the last question is answered by one asked when
// settleEvery has passed.
const settleEvery = time.Millisecond

// gather waits out one gathering after a poke; false when ctx ended. timer and recheck
// are stopped when it returns.
//
// It listens to ready only to ask settled, and not while a question is pending on
// recheck: a backlog poked on every message (the forwarder's on every ack, the
// reporter's on every result) would otherwise wake the publisher once per message during
// every gathering, only to go back to waiting. A poke that comes meanwhile stays in ready
// (capacity 1) and is taken with the recheck or after the gathering.
func (g gathering) gather(ctx context.Context, ready <-chan struct{}, timer, recheck *time.Timer) bool {
	if g.isSettled() {
		return true
	}
	asked := time.Now()
	timer.Reset(g.wait)
	defer timer.Stop()
	defer recheck.Stop()
	var recheckC <-chan time.Time // nil: no question pending (or no settled to ask)
	for {
		readyC := ready
		if g.settled == nil || recheckC != nil {
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
		if g.settled() {
			return true
		}
	}
}

// nextRetryDelay backs off from 100ms to 30s: a broker that is away, or a subscriber whose
// queue is full, is asked again soon but not hammered. With the embedded broker every
// retry is a duplicate for the other subscribers: a stall of an hour (a persistent
// session away at its quota) costs them about 120 copies of one report, not thousands.
func nextRetryDelay(prev time.Duration) time.Duration {
	if prev <= 0 {
		return 100 * time.Millisecond
	}
	return min(2*prev, 30*time.Second)
}

func appendUvarint(dst []byte, v uint64) []byte { return binary.AppendUvarint(dst, v) }

// readUvarint decodes a uvarint at the start of b; ok is false for a truncated or
// overlong one.
func readUvarint(b []byte) (v uint64, rest []byte, ok bool) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, false
	}
	return v, b[n:], true
}
