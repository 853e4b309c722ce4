package statestore

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
)

// Bounds of a NotifyQueue whose options leave them zero.
const (
	DefaultMaxQueued      = 1024
	DefaultMaxQueuedBytes = 16 << 20
)

// Notification is one change of a watched key as a NotifyQueue holds it.
// Value is the stored value itself (the store never modifies a stored value),
// nil for OpDelete.
type Notification struct {
	Key     string
	Op      Op
	Value   []byte
	Version hlc.Timestamp
}

// Size is what a notification counts against the queue's byte bounds: its
// key and value bytes.
func (n Notification) Size() int64 { return int64(len(n.Key) + len(n.Value)) }

// NotifyQueueOptions configure a NotifyQueue. Send is required.
type NotifyQueueOptions struct {
	// MaxQueued bounds the notifications waiting for delivery. Default
	// DefaultMaxQueued.
	MaxQueued int
	// MaxQueuedBytes bounds the key and value bytes of the notifications
	// waiting for delivery and of those sent but not yet released (see
	// Send). Default DefaultMaxQueuedBytes.
	MaxQueuedBytes int64
	// Budget, when set, is shared by the queues of all connections: the bytes
	// each queue counts against MaxQueuedBytes count against it too, so that
	// many slow watchers together stay within one bound. A Notify that does
	// not fit overflows that queue.
	Budget *ByteBudget
	// AckTimeout, when positive, bounds how long a notification waits for
	// Room while the connection acknowledges nothing (no Acked call): past it
	// the queue drops what it holds and calls Stalled (or Overflow when
	// Stalled is nil). A watcher that keeps its Receive Maximum full and stops
	// acknowledging is cut off, even when no further change comes to fill its
	// queue.
	AckTimeout time.Duration
	// Room reports whether the connection accepts one more unacknowledged
	// notification now. For MQTT 5 that is "fewer QoS 1 and 2 PUBLISHes from
	// the server unacknowledged than the client's Receive Maximum" (MQTT 5
	// section 3.3.4, [MQTT-3.3.4-9]). Nil means always.
	Room func() bool
	// Send delivers one notification. The queue calls it from Run, one at a
	// time, in the order Notify received them, and goes on as it reports:
	// Unacked, the notification's Size stays counted against MaxQueuedBytes
	// and Budget until the caller passes it to Release (on its
	// acknowledgement), or until Stop; Done, it is released at once; NoRoom,
	// the queue keeps it at its head and sends it again once the connection
	// acknowledged something (Acked), as it waits for Room (AckTimeout
	// applies).
	Send func(Notification) SendResult
	// Overflow is called once, from Run, when a bound was exceeded; Run then
	// returns and the queue delivers nothing more. The policy the broker
	// applies is to disconnect the client: it registers again when it
	// reconnects and reads the keys' current values, instead of silently
	// missing changes.
	Overflow func()
	// Stalled is called instead of Overflow when AckTimeout passed.
	Stalled func()
}

// SendResult is what NotifyQueueOptions.Send did with a notification.
type SendResult uint8

const (
	// Done: nothing of it is left unacknowledged (the connection was closing,
	// or it needs no acknowledgement).
	Done SendResult = iota
	// Unacked: sent, and unacknowledged until Release.
	Unacked
	// NoRoom: not sent, the connection's bounds have no room for it now (in
	// the broker, its session's bytes).
	NoRoom
)

// ByteBudget is a byte bound shared by several NotifyQueues. It is safe for
// concurrent use.
type ByteBudget struct {
	limit int64
	used  atomic.Int64
}

// NewByteBudget returns a budget of limit bytes; limit <= 0 means no bound
// (nil is returned, which NotifyQueueOptions.Budget takes as none).
func NewByteBudget(limit int64) *ByteBudget {
	if limit <= 0 {
		return nil
	}
	return &ByteBudget{limit: limit}
}

// Used returns the bytes taken now.
func (b *ByteBudget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

func (b *ByteBudget) take(n int64) bool {
	if b == nil || n == 0 {
		return true
	}
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *ByteBudget) release(n int64) {
	if b != nil && n != 0 {
		b.used.Add(-n)
	}
}

// NotifyQueue delivers the notifications of one connection in order, never
// more unacknowledged at a time than the connection accepts (Room), with
// bounded memory: it implements Watcher for the store, queues what cannot go
// out yet, and is woken by Acked when an acknowledgement freed room. Notify
// never blocks, so a slow watcher never stalls the request that changed the
// key (the store calls Notify with its lock held).
//
// The caller runs Run on a goroutine of its own and calls Stop when the
// connection goes away.
type NotifyQueue struct {
	opts NotifyQueueOptions

	mu         sync.Mutex
	queue      []Notification // waiting; queue[head:] is live
	head       int
	bytes      int64 // Size of queue[head:] and of the sent ones not yet released
	overflowed bool
	stalled    bool
	stopped    bool

	wake  chan struct{} // cap 1: the queue has something, or it overflowed
	acked chan struct{} // cap 1: an acknowledgement may have freed room
	done  chan struct{} // closed by Stop
	once  sync.Once
}

// NewNotifyQueue returns a queue; start its Run.
func NewNotifyQueue(opts NotifyQueueOptions) *NotifyQueue {
	if opts.MaxQueued <= 0 {
		opts.MaxQueued = DefaultMaxQueued
	}
	if opts.MaxQueuedBytes <= 0 {
		opts.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	return &NotifyQueue{
		opts:  opts,
		wake:  make(chan struct{}, 1),
		acked: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
}

// Notify implements Watcher: it queues the notification and returns at once.
// Past a bound the queue drops everything it holds and Run reports the
// overflow: a connection that cannot keep up gets no more notifications
// rather than an ever-growing backlog.
func (q *NotifyQueue) Notify(key string, op Op, value []byte, version hlc.Timestamp) {
	n := Notification{Key: key, Op: op, Value: value, Version: version}
	size := n.Size()
	q.mu.Lock()
	if q.overflowed || q.stalled || q.stopped {
		q.mu.Unlock()
		return
	}
	if q.queued() >= q.opts.MaxQueued || q.bytes+size > q.opts.MaxQueuedBytes || !q.opts.Budget.take(size) {
		q.overflowed = true
		q.dropLocked()
	} else {
		if q.head > 0 && (q.head >= len(q.queue)/2 || len(q.queue) == cap(q.queue)) {
			// Move the live part to the front, so that a queue that never quite
			// drains does not grow its array forever (amortised O(1)), and
			// before the array would grow: it grows only when all of it is
			// live, and then to at most MaxQueued (a watcher that keeps its
			// queue full holds 80 B a slot, 1,024 of them by default).
			live := copy(q.queue, q.queue[q.head:])
			clear(q.queue[live:])
			q.queue, q.head = q.queue[:live], 0
		}
		if len(q.queue) == cap(q.queue) {
			grown := make([]Notification, len(q.queue), min(max(2*cap(q.queue), 16), q.opts.MaxQueued))
			copy(grown, q.queue)
			q.queue = grown
		}
		q.queue = append(q.queue, n)
		q.bytes += size
	}
	q.mu.Unlock()
	signal(q.wake)
}

// dropLocked empties the queue and gives back every byte it counts (the
// unacknowledged ones too: the queue is done). Called with q.mu held.
func (q *NotifyQueue) dropLocked() {
	clear(q.queue)
	q.queue, q.head = nil, 0
	q.opts.Budget.release(q.bytes)
	q.bytes = 0
}

// queued is the number of queued notifications. Called with q.mu held.
func (q *NotifyQueue) queued() int { return len(q.queue) - q.head }

// Len returns the number of notifications waiting for delivery.
func (q *NotifyQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queued()
}

// Bytes returns what the queue counts against its byte bounds: the
// notifications waiting and those sent but not released.
func (q *NotifyQueue) Bytes() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes
}

// Acked tells the queue that the connection acknowledged a message, so Room
// may say yes again. Call it for every acknowledgement of the connection
// (MQTT: every PUBACK or PUBCOMP that completes a server-sent PUBLISH, the
// broker's own messages included, since they share the Receive Maximum). It
// never blocks.
func (q *NotifyQueue) Acked() { signal(q.acked) }

// Release gives back the Size of a notification Send reported unacknowledged,
// once it was acknowledged (or the connection gave it up).
func (q *NotifyQueue) Release(size int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.overflowed || q.stalled || q.stopped {
		return // dropLocked gave everything back
	}
	size = min(size, q.bytes)
	q.bytes -= size
	q.opts.Budget.release(size)
}

// Stop ends Run and drops what is queued. Safe to call more than once.
func (q *NotifyQueue) Stop() {
	q.once.Do(func() {
		q.mu.Lock()
		q.stopped = true
		q.dropLocked()
		q.mu.Unlock()
		close(q.done)
	})
}

// Run delivers queued notifications until Stop, or until an overflow or a
// stall (then it calls Overflow or Stalled first). It waits for Room before
// each Send, so the notification at the head waits for an acknowledgement
// (Acked) when the connection has none to spare, and the ones behind it wait
// in the queue; a notification Send found no room for waits likewise. With
// AckTimeout, that wait ends the queue once the connection acknowledged
// nothing for that long.
func (q *NotifyQueue) Run() {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		n, ok := q.next()
		if !ok {
			return
		}
		for blocked := false; ; blocked = true {
			if !q.waitRoom(blocked, &timer) {
				return
			}
			switch q.opts.Send(n) {
			case Done:
				q.Release(n.Size())
			case NoRoom:
				continue
			}
			break
		}
	}
}

// waitRoom waits until Room says yes, and first for an acknowledgement when
// blocked (Send found no room). It reports false when the queue stopped, or
// stalled (Stalled called).
func (q *NotifyQueue) waitRoom(blocked bool, timer **time.Timer) bool {
	room := func() bool { return q.opts.Room == nil || q.opts.Room() }
	if blocked || !room() {
		var timeout <-chan time.Time
		if q.opts.AckTimeout > 0 {
			if *timer == nil {
				*timer = time.NewTimer(q.opts.AckTimeout)
			} else {
				(*timer).Reset(q.opts.AckTimeout)
			}
			timeout = (*timer).C
		}
		for blocked || !room() {
			select {
			case <-q.acked: // an acknowledgement: the connection is alive
				blocked = false
				if timeout != nil {
					(*timer).Reset(q.opts.AckTimeout)
				}
			case <-timeout:
				q.stall()
				return false
			case <-q.done:
				return false
			}
		}
		if timeout != nil {
			(*timer).Stop()
		}
	}
	select {
	case <-q.done:
		return false
	default:
		return true
	}
}

// stall ends the queue after AckTimeout and reports it.
func (q *NotifyQueue) stall() {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		return
	}
	q.stalled = true
	q.dropLocked()
	q.mu.Unlock()
	if q.opts.Stalled != nil {
		q.opts.Stalled()
	} else if q.opts.Overflow != nil {
		q.opts.Overflow()
	}
}

// next waits for the head of the queue and takes it; false when the queue
// stopped or overflowed (Overflow already called). The notification's bytes
// stay counted until Run has sent it (and, when Send says it is
// unacknowledged, until Release).
func (q *NotifyQueue) next() (Notification, bool) {
	for {
		q.mu.Lock()
		switch {
		case q.stopped || q.stalled:
			q.mu.Unlock()
			return Notification{}, false
		case q.overflowed:
			q.mu.Unlock()
			if q.opts.Overflow != nil {
				q.opts.Overflow()
			}
			return Notification{}, false
		case q.queued() > 0:
			n := q.queue[q.head]
			q.queue[q.head] = Notification{} // let the value go once delivered
			q.head++
			q.mu.Unlock()
			return n, true
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-q.done:
			return Notification{}, false
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
