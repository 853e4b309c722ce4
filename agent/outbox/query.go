package outbox

import (
	"fmt"
	"slices"
	"strings"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Query is a command whose ack carries an answer the caller wants (protocol v2's
// ListPersons: the page of the terminal's persons). It is delivered like a task's command —
// the device's one-in-flight slot, online/offline, the ack timeout, retries with the same
// message id, MaxTries, pause, the breaker — but it is not journalled and has no result:
// its answer goes to Done. A query lost in a crash is asked again by whoever asked it.
type Query struct {
	MessageID string // unique among the table's messages and the pending queries; resends keep it
	DeviceID  string
	Op        string // opaque to the outbox, as a Task's
	// Payload is what the Sender needs to build the command (the agent's: the face.Command
	// in msgp). The outbox keeps it, unmodified and not copied, until Done has run: the
	// caller must not modify it before.
	Payload []byte
	// Done is called exactly once: with the terminal's ack and a nil error when it acked
	// with code 0; with the ack and an error wrapping ErrRefused when it refused (a
	// non-zero code); with a zero Ack and an error wrapping ErrNoAnswer after MaxTries tries
	// without an ack, or ErrClosed when the outbox closes first. It runs after the outbox's
	// lock is released, on the goroutine that decided the outcome (the one that delivered
	// the ack: a terminal's connection reader), so it must not block; it may call the
	// outbox (Query the next page). The ack's Persons belong to the caller.
	Done func(ack face.Ack, err error)
}

// query is a Query the outbox holds: waiting in its device's queries FIFO
// (deviceLive.queries) or in flight (deviceLive.query). Nothing of it is journalled.
type query struct {
	id      string
	dev     *device
	op      string
	payload []byte
	done    func(face.Ack, error)
	tries   int
	next    int64 // waiting: earliest next send (after a failed try); in flight: ack deadline
	// step: a chunk of the face step (faces.go), not a caller's query: its ack goes to
	// faceChunkAcked under the lock, and it has no Done.
	step bool
}

// queryDone is a finished query's call of Done, made by unlock once the lock is released.
type queryDone struct {
	done func(face.Ack, error)
	ack  face.Ack
	err  error
}

// Query queues q for its device and returns once it is queued; the answer goes to q.Done.
//
// Order: a query is sent when its device has no task's command to send — tasks queued
// before it and tasks taken in while it waits go first (a whitelist sync yields to new
// tasks) — and once sent it keeps its turn: a query waiting for its retry goes before
// every task, as a task waiting for its retry does (the terminal may still answer the
// earlier send). A query whose every try was refunded (its device went offline while it
// was in flight) counts as never sent again. Queries of one device are sent in the order
// they were queued.
//
// Refusals: ErrInvalidTask (no message id, device id or Done; an id over 65535 bytes),
// ErrDuplicate (the message id is a pending query's, or a task's in the table or among the
// recently finished), ErrDeviceFull and ErrFull (a query counts as an unfinished command
// toward MaxQueuedPerDevice and MaxQueued), ErrJournal (the outbox stopped), ErrClosed.
func (o *Outbox) Query(q Query) error {
	if q.MessageID == "" || q.DeviceID == "" || q.Done == nil {
		return fmt.Errorf("%w: a query needs a message id, a device id and Done", ErrInvalidTask)
	}
	if len(q.MessageID) > maxFieldLen {
		return fmt.Errorf("%w: message id longer than %d bytes", ErrInvalidTask, maxFieldLen)
	}
	o.mu.Lock()
	defer o.unlock()
	if err := o.usable(); err != nil {
		return err
	}
	if o.t.seen(q.MessageID) || o.queries[q.MessageID] != nil {
		return fmt.Errorf("%w: %s", ErrDuplicate, q.MessageID)
	}
	if _, ok := o.pending[q.MessageID]; ok {
		return fmt.Errorf("%w: %s", ErrDuplicate, q.MessageID)
	}
	if n := o.t.active + len(o.pending) + len(o.queries); n >= o.maxAll {
		return fmt.Errorf("%w: %d unfinished commands (max_queued %d)", ErrFull, n, o.maxAll)
	}
	d := o.dev(q.DeviceID)
	if n := d.unfinished(); n >= o.maxDev {
		return fmt.Errorf("%w: device %s has %d unfinished commands (max_queued_per_device %d)",
			ErrDeviceFull, q.DeviceID, n, o.maxDev)
	}
	qq := &query{id: strings.Clone(q.MessageID), dev: d, op: q.Op, payload: q.Payload, done: q.Done}
	if o.queries == nil {
		o.queries = map[string]*query{}
	}
	o.queries[qq.id] = qq
	d.live.queries = append(d.live.queries, qq)
	o.pump(d)
	o.rearm()
	o.startSendsLocked()
	return nil
}

// queryDue returns the query d sends next if it is d's turn for one: its waiting query
// that was sent before (it keeps its turn), or its first query once no task waits.
func (d *device) queryDue() *query {
	if len(d.live.queries) == 0 {
		return nil
	}
	if q := d.live.queries[0]; q.tries > 0 || q.step || len(d.queue) == 0 {
		return q
	}
	return nil
}

// sendQuery sends q if its backoff is over: it takes the device's in-flight slot. Called
// by pump with the slot free and the device online.
func (o *Outbox) sendQuery(d *device, q *query, now int64) {
	if q.next > now {
		return // backing off
	}
	d.live.queries[0] = nil
	d.live.queries = d.live.queries[1:]
	if len(d.live.queries) == 0 {
		d.live.queries = nil
	}
	ackTimeout := o.settingsFor(d).RetryInterval
	q.tries++
	q.next = now + int64(ackTimeout)
	d.live.query = q
	o.sends = append(o.sends, sendJob{dev: d.id, timeout: ackTimeout, cmd: Command{
		MessageID: q.id, DeviceID: d.id, Op: q.op, Payload: q.payload, Try: q.tries,
	}, nonBlocking: o.nonBlock != nil && o.nonBlock.SendsWithoutBlocking(d.id)})
}

// queryTryFailed handles a try of the query in flight that got no ack in time, or whose
// send failed: retried after a backoff, same message id, or finished with ErrNoAnswer
// after MaxTries; it counts toward the device's breaker like a task's try.
func (o *Outbox) queryTryFailed(q *query, reason string, now int64) {
	d := q.dev
	s := o.settingsFor(d)
	d.live.query = nil
	if q.tries >= s.MaxTries {
		if q.step {
			o.faceChunkFailed(q, reason)
		}
		o.finishQuery(q, face.Ack{}, fmt.Errorf("%w: %s (after %d tries)", ErrNoAnswer, reason, q.tries))
	} else {
		if q.step {
			o.faceChunkTimedOut(q)
		}
		q.next = now + int64(o.backoff(s, q.tries))
		d.live.queries = slices.Insert(d.live.queries, 0, q)
	}
	o.unacked(d, s, now)
}

// requeueQuery puts the query in flight back at the head of its device's queries without
// spending the try: the device went offline, so the try says nothing.
func (o *Outbox) requeueQuery(q *query) {
	d := q.dev
	d.live.query = nil
	if q.step {
		o.faceChunkRequeued(q)
		return
	}
	q.tries = max(q.tries, 1) - 1
	q.next = 0
	d.live.queries = slices.Insert(d.live.queries, 0, q)
}

// ackQuery finishes q with the terminal's ack: Done gets the ack, and ErrRefused with it
// for a non-zero code.
func (o *Outbox) ackQuery(q *query, a *face.Ack) {
	d := q.dev
	if d.live.query == q {
		d.live.query = nil
	} else {
		// Acked late, while it waited for its retry: it arrived all the same.
		d.live.queries = slices.DeleteFunc(d.live.queries, func(w *query) bool { return w == q })
	}
	var err error
	if a.Code == 0 {
		d.live.failures, d.live.trips, d.live.breakerUntil = 0, 0, 0
	} else {
		err = fmt.Errorf("%w: code %d: %s", ErrRefused, a.Code, a.Message)
	}
	if q.step {
		o.faceChunkAcked(q, a)
	}
	o.finishQuery(q, *a, err)
}

// finishQuery forgets q (no longer in flight nor waiting: the caller took it out) and
// has unlock call its Done.
func (o *Outbox) finishQuery(q *query, a face.Ack, err error) {
	delete(o.queries, q.id)
	if q.done != nil { // a face chunk has none
		o.queryDone = append(o.queryDone, queryDone{done: q.done, ack: a, err: err})
	}
	q.done, q.payload = nil, nil
}

// cancelQueries finishes every pending query with err (Close).
func (o *Outbox) cancelQueries(err error) {
	for _, q := range o.queries {
		d := q.dev
		d.live.query, d.live.queries = nil, nil
		o.finishQuery(q, face.Ack{}, err)
	}
}

// runQueryDone calls the Done of finished queries, in the order they finished. Called
// without the outbox's lock.
func runQueryDone(done []queryDone) {
	for i := range done {
		done[i].done(done[i].ack, done[i].err)
		done[i] = queryDone{}
	}
}

// noResultOutcome queues NoResultDone's call for it, a command without a result finishing
// with st (reason: why, a the terminal's ack when one decided it).
func (o *Outbox) noResultOutcome(it *item, st Status, reason string, a *face.Ack) {
	var ack face.Ack
	var err error
	switch {
	case a != nil && st == Succeeded:
		ack = *a
	case a != nil:
		ack, err = *a, fmt.Errorf("%w: code %d: %s", ErrRefused, a.Code, a.Message)
	case st == Superseded:
		err = fmt.Errorf("%w: %s", ErrSuperseded, reason)
	case st == Expired:
		err = fmt.Errorf("%w: %s", ErrExpired, reason)
	default:
		err = fmt.Errorf("%w: %s", ErrNoAnswer, reason)
	}
	hook, dev, id := o.noResultDone, it.dev.id, it.id()
	o.queryDone = append(o.queryDone, queryDone{done: func(face.Ack, error) { hook(dev, id, ack, err) }})
}
