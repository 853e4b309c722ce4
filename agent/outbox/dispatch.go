package outbox

import (
	"container/heap"
	"fmt"
	"time"
)

// deviceLive is a device's dispatch state that is not journalled: after a restart every
// device is offline until it is heard from, and its breaker is closed.
type deviceLive struct {
	cfg          DeviceConfig
	lastSeen     int64 // unix ns of the last heartbeat or ack; 0: never (or link down)
	lastAck      int64
	down         bool
	failures     int // consecutive tries without an ack
	trips        int // breaker openings since the last success
	breakerUntil int64
	pending      int // adds written, waiting for durability
	heapIdx      int
	deadline     int64 // when this device needs the timer; 0: never
	c            counters
	// The payload of the command last sent (payItem), kept so that its retries do not
	// read the payload file again; and after a failed read of a payload, when to try again.
	payItem    *item
	pay        []byte
	payFails   int
	payRetryAt int64
	// Queries (query.go): the one in flight, and those waiting, in the order queued.
	query   *query
	queries []*query
	// What the device holds of faces, and the face being sent (faces.go); nil until needed.
	faces *deviceFaces
	// Batches (batch.go): the batch size its terminal announced (0: none), the batch last
	// sent, and what tasks learned in batches.
	batchSize int
	batch     *batchSend
	marks     map[*item]batchMark
}

type counters struct {
	sent, succeeded, failed, superseded, expired, retries uint64
}

func (o *Outbox) dev(id string) *device {
	d, ok := o.t.devices[id]
	if !ok {
		d = o.t.device(id)
		d.live.cfg = o.configs[id]
	}
	return d
}

// settingsFor returns the dispatch settings in force for d: its DeviceConfig overrides
// over the outbox's Settings. They are read at each decision, so SetDevice and
// SetSettings apply from the next one on.
func (o *Outbox) settingsFor(d *device) Settings { return d.live.cfg.over(o.settings) }

func (o *Outbox) online(d *device, now int64) bool {
	if d.live.down {
		return false
	}
	if d.live.cfg.NoHeartbeat {
		return true
	}
	return d.live.lastSeen != 0 && now-d.live.lastSeen < int64(o.settingsFor(d).HeartbeatTimeout)
}

// pump sends the device's next command if it may: nothing in flight, not paused, online,
// breaker closed, and the head of the FIFO due. It is called on every event that could
// change one of those, which is what makes dispatch immediate without a polling loop.
func (o *Outbox) pump(d *device) {
	defer o.touch(d)
	if o.closed || o.Err() != nil || d.inflight != nil || d.live.query != nil || d.paused ||
		(len(d.queue) == 0 && len(d.live.queries) == 0) {
		return
	}
	now := o.now()
	if !o.online(d, now) || d.live.breakerUntil > now {
		return
	}
	if q := d.queryDue(); q != nil {
		o.sendQuery(d, q, now)
		return
	}
	if d.live.payRetryAt > now {
		return
	}
	for len(d.queue) > 0 {
		it := o.nextOf(d)
		if exp := o.t.expiresAt(it); exp != 0 && now >= exp {
			o.finishItem(it, Expired, "expired before it could be sent")
			continue
		}
		if it.next > now {
			return // backing off
		}
		payload, ok := o.sendPayload(d, it, now)
		if !ok {
			return
		}
		switch o.pumpBatch(d, it, payload, now) {
		case batchBusy:
			return
		case batchAgain:
			continue
		}
		if o.faces != nil {
			switch o.faceFirst(d, it, payload, now) {
			case faceSent:
				return
			case faceFailed:
				continue
			}
		}
		ackTimeout := o.settingsFor(d).RetryInterval
		o.emit(&record{Kind: kindSend, ID: it.id(), Tries: uint32(it.tries) + 1, Next: now + int64(ackTimeout)})
		if it.status != InFlight { // the journal refused the record
			return
		}
		d.live.c.sent++
		if it.tries > 1 {
			d.live.c.retries++
		}
		o.sends = append(o.sends, sendJob{dev: d.id, timeout: ackTimeout, cmd: Command{
			MessageID: o.wireID(d, it), TaskID: it.task(), DeviceID: d.id, Op: o.t.opOf(it), PersonID: it.person(),
			Payload: payload, Try: int(it.tries),
		}, nonBlocking: o.nonBlock != nil && o.nonBlock.SendsWithoutBlocking(d.id)})
		return
	}
	if len(d.live.queries) > 0 { // every queued task expired: a query's turn
		o.sendQuery(d, d.live.queries[0], now)
	}
}

// nextOf returns the command d sends next: the head of its FIFO, except that commands
// without a result never sent (a whitelist sync's corrections, a few of which wait queued
// so that the next goes out straight from an ack) let the first task with a result go
// before them: a back office task waits behind the command in flight only. A command that
// was sent keeps its turn: its ack may still come, and another sent meanwhile would be a
// second command in flight. Tasks keep their order among themselves, and corrections
// theirs; for one person the order cannot change, since a later task supersedes an unsent
// correction. The scan stops at the first task or command sent: it passes only corrections
// never sent. Called with d.queue not empty.
func (o *Outbox) nextOf(d *device) *item {
	head := d.queue[0]
	if head.tries > 0 || !o.t.noResult(head) {
		return head
	}
	for _, it := range d.queue[1:] {
		if it.tries > 0 || !o.t.noResult(it) {
			return it
		}
	}
	return head
}

// sendPayload returns the payload to send it with: the one kept from its previous send, or
// read from the payload file. A failed read leaves it queued and asks for the payload
// from the journal (repair.go), whose success pumps the device at once; until then the
// device tries again after a backoff (deadline includes it), and nothing else of the
// device is sent meanwhile, which would break its FIFO order.
func (o *Outbox) sendPayload(d *device, it *item, now int64) ([]byte, bool) {
	if d.live.payItem == it {
		return d.live.pay, true
	}
	p, err := o.t.payload(it)
	if err != nil {
		wait := min(time.Second<<min(d.live.payFails, maxReadRetry), time.Minute)
		d.live.payFails++
		d.live.payRetryAt = now + int64(wait)
		o.log.Error("outbox: cannot read a queued command's payload; it stays queued and is read again from the journal",
			"device", d.id, "message", it.id(), "retry_in", wait, "err", err)
		o.requestRepair(it)
		return nil, false
	}
	d.live.payFails, d.live.payRetryAt = 0, 0
	d.live.payItem, d.live.pay = it, p
	return p, true
}

// tryFailed handles a try that got no ack in time (or whose send failed): retry after a
// backoff, or fail after MaxTries; count it toward the device's breaker. The device's own
// max_tries and retry_interval apply, as they are now (not as they were at the send).
func (o *Outbox) tryFailed(it *item, reason string, now int64) {
	d := it.dev
	s := o.settingsFor(d)
	if int(it.tries) >= s.MaxTries {
		o.finishItem(it, Failed, fmt.Sprintf("%s (after %d tries)", reason, it.tries))
	} else {
		o.emit(&record{Kind: kindRetry, ID: it.id(), Next: now + int64(o.backoff(s, int(it.tries))), Err: reason})
	}
	o.unacked(d, s, now)
}

// unacked counts a try without an ack (a task's or a query's) toward d's breaker.
func (o *Outbox) unacked(d *device, s Settings, now int64) {
	d.live.failures++
	if d.live.failures >= s.BreakerThreshold {
		// The breaker: a device that keeps failing waits, alone; other devices are untouched
		// because every device has its own FIFO and its own deadline.
		cool := s.BreakerCooldown << min(d.live.trips, 4)
		d.live.breakerUntil = now + int64(cool)
		d.live.trips++
		d.live.failures = 0
		o.log.Warn("outbox: device breaker open", "device", d.id, "for", cool)
	}
}

// backoff is the wait before try n+1 under s: RetryInterval·2^(n-1), capped at MaxBackoff, with
// equal jitter (half fixed, half random) so devices that failed together do not retry together.
func (o *Outbox) backoff(s Settings, n int) time.Duration {
	d := s.RetryInterval
	for i := 1; i < n && d < s.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.MaxBackoff)
	half := d / 2
	return half + time.Duration(o.rng.Int64N(int64(half)+1))
}

// requeue puts an in-flight command back at the head of its FIFO without spending the try:
// its device went offline, so the try says nothing about the command.
func (o *Outbox) requeue(it *item) {
	o.emit(&record{Kind: kindRequeue, ID: it.id(), Tries: uint32(max(it.tries, 1) - 1)})
}

// deadline is when d next needs attention without an event: its ack timeout, the end of
// the backoff of the command it sends next (nextOf), or the end of its breaker period.
// Offline and paused devices need none: a heartbeat or Resume pumps them. It does not
// compare with the current time: a deadline that passed between pump's check and now must
// still wake the timer (at once).
func (o *Outbox) deadline(d *device) int64 {
	if it := d.inflight; it != nil {
		return it.next
	}
	if q := d.live.query; q != nil {
		return q.next
	}
	if (len(d.queue) == 0 && len(d.live.queries) == 0) || d.paused || d.live.down || !o.online(d, o.now()) {
		return 0
	}
	if q := d.queryDue(); q != nil {
		return max(q.next, d.live.breakerUntil)
	}
	return max(o.nextOf(d).next, d.live.breakerUntil, d.live.payRetryAt)
}

// touch re-files d in the deadline heap.
func (o *Outbox) touch(d *device) {
	dl := o.deadline(d)
	d.live.deadline = dl
	switch {
	case dl == 0 && d.live.heapIdx >= 0:
		heap.Remove(&o.heap, d.live.heapIdx)
	case dl != 0 && d.live.heapIdx >= 0:
		heap.Fix(&o.heap, d.live.heapIdx)
	case dl != 0:
		heap.Push(&o.heap, d)
	}
}

// nextWake is the earliest deadline of all: the one timer the outbox arms.
func (o *Outbox) nextWake() int64 {
	var at int64
	if len(o.heap) > 0 {
		at = o.heap[0].live.deadline
	}
	for len(o.retained) > 0 {
		it := o.retained[0]
		if o.t.items.get(it.id()) != it || it.status != Failed {
			o.retained[0] = nil
			o.retained = o.retained[1:] // reset or purged since
			continue
		}
		p := it.next + int64(o.settings.FailedRetention)
		if at == 0 || p < at {
			at = p
		}
		break
	}
	return at
}

// rearm keeps exactly one timer armed for the earliest deadline, and none when idle. A
// timer that would fire too early is kept (it finds nothing due and re-arms): that saves a
// Stop and a new timer on every ack.
func (o *Outbox) rearm() {
	if o.closed {
		return
	}
	at := o.nextWake()
	if at == 0 {
		if o.timer != nil {
			o.timer.Stop()
			o.timer, o.timerAt = nil, 0
		}
		return
	}
	if o.timer != nil && o.timerAt <= at {
		return
	}
	if o.timer != nil {
		o.timer.Stop()
	}
	o.timerGen++
	gen := o.timerGen
	o.timerAt = at
	o.timer = o.clock.AfterFunc(time.Duration(at-o.now()), func() { o.onTimer(gen) })
}

func (o *Outbox) onTimer(gen uint64) {
	o.mu.Lock()
	purged := o.onTimerLocked(gen)
	o.unlock()
	o.didChange(purged...) // held failures dropped: the device state and the page show them
}

// onTimerLocked handles the deadlines that are due and returns the devices whose
// failures the retention purge dropped.
func (o *Outbox) onTimerLocked(gen uint64) []string {
	if o.closed || gen != o.timerGen {
		return nil // stopped or replaced
	}
	o.timer, o.timerAt = nil, 0
	now := o.now()
	for len(o.heap) > 0 && o.heap[0].live.deadline <= now {
		d := o.heap[0]
		if it := d.inflight; it != nil && it.next <= now && o.Err() == nil {
			if o.online(d, now) {
				o.inflightTryFailed(d, "no ack within the retry interval", now)
			} else {
				o.requeueInflight(d)
			}
		}
		if q := d.live.query; q != nil && q.next <= now && o.Err() == nil {
			if o.online(d, now) {
				o.queryTryFailed(q, "no ack within the retry interval", now)
			} else {
				o.requeueQuery(q)
			}
		}
		o.pump(d)
		if d.live.deadline != 0 && d.live.deadline <= now {
			// Nothing could be done now (e.g. the journal failed): wait for an event.
			d.live.deadline = 0
			heap.Remove(&o.heap, d.live.heapIdx)
		}
	}
	purged := o.purgeRetained(now)
	o.rearm()
	o.startSendsLocked()
	return purged
}

// deviceHeap orders devices by deadline.
type deviceHeap []*device

func (h deviceHeap) Len() int           { return len(h) }
func (h deviceHeap) Less(i, j int) bool { return h[i].live.deadline < h[j].live.deadline }
func (h deviceHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].live.heapIdx = i
	h[j].live.heapIdx = j
}
func (h *deviceHeap) Push(x any) {
	d := x.(*device)
	d.live.heapIdx = len(*h)
	*h = append(*h, d)
}
func (h *deviceHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	d.live.heapIdx = -1
	return d
}
