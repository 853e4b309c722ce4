package statestore

import (
	"sync"

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

// NotifyQueueOptions configure a NotifyQueue. Send is required.
type NotifyQueueOptions struct {
	// MaxQueued bounds the notifications waiting for delivery. Default
	// DefaultMaxQueued.
	MaxQueued int
	// MaxQueuedBytes bounds the key and value bytes of the notifications
	// waiting for delivery. Default DefaultMaxQueuedBytes.
	MaxQueuedBytes int64
	// Room reports whether the connection accepts one more unacknowledged
	// notification now. For MQTT 5 that is "fewer QoS 1 and 2 PUBLISHes from
	// the server unacknowledged than the client's Receive Maximum" (MQTT 5
	// section 3.3.4, [MQTT-3.3.4-9]). Nil means always.
	Room func() bool
	// Send delivers one notification. The queue calls it from Run, one at a
	// time, in the order Notify received them.
	Send func(Notification)
	// Overflow is called once, from Run, when a bound was exceeded; Run then
	// returns and the queue delivers nothing more. The policy the broker
	// applies is to disconnect the client: it registers again when it
	// reconnects and reads the keys' current values, instead of silently
	// missing changes.
	Overflow func()
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
	bytes      int64 // key and value bytes in queue[head:]
	overflowed bool
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
	size := int64(len(key) + len(value))
	q.mu.Lock()
	if q.overflowed || q.stopped {
		q.mu.Unlock()
		return
	}
	if q.queued() >= q.opts.MaxQueued || q.bytes+size > q.opts.MaxQueuedBytes {
		q.overflowed = true
		clear(q.queue)
		q.queue, q.head, q.bytes = nil, 0, 0
	} else {
		if q.head > 0 && q.head >= len(q.queue)/2 {
			// Move the live part to the front, so that a queue that never quite
			// drains does not grow its array forever; amortised O(1).
			live := copy(q.queue, q.queue[q.head:])
			clear(q.queue[live:])
			q.queue, q.head = q.queue[:live], 0
		}
		q.queue = append(q.queue, Notification{Key: key, Op: op, Value: value, Version: version})
		q.bytes += size
	}
	q.mu.Unlock()
	signal(q.wake)
}

// queued is the number of queued notifications. Called with q.mu held.
func (q *NotifyQueue) queued() int { return len(q.queue) - q.head }

// Len returns the number of notifications waiting for delivery.
func (q *NotifyQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queued()
}

// Acked tells the queue that the connection acknowledged a message, so Room
// may say yes again. Call it for every acknowledgement of the connection
// (MQTT: every PUBACK or PUBCOMP that completes a server-sent PUBLISH, the
// broker's own messages included, since they share the Receive Maximum). It
// never blocks.
func (q *NotifyQueue) Acked() { signal(q.acked) }

// Stop ends Run and drops what is queued. Safe to call more than once.
func (q *NotifyQueue) Stop() {
	q.once.Do(func() {
		q.mu.Lock()
		q.stopped = true
		clear(q.queue)
		q.queue, q.head, q.bytes = nil, 0, 0
		q.mu.Unlock()
		close(q.done)
	})
}

// Run delivers queued notifications until Stop, or until an overflow (then it
// calls Overflow first). It waits for Room before each Send, so the
// notification at the head waits for an acknowledgement (Acked) when the
// connection has none to spare, and the ones behind it wait in the queue.
func (q *NotifyQueue) Run() {
	for {
		n, ok := q.next()
		if !ok {
			return
		}
		for q.opts.Room != nil && !q.opts.Room() {
			select {
			case <-q.acked:
			case <-q.done:
				return
			}
		}
		select {
		case <-q.done:
			return
		default:
		}
		q.opts.Send(n)
	}
}

// next waits for the head of the queue and takes it; false when the queue
// stopped or overflowed (Overflow already called).
func (q *NotifyQueue) next() (Notification, bool) {
	for {
		q.mu.Lock()
		switch {
		case q.stopped:
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
			q.bytes -= int64(len(n.Key) + len(n.Value))
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
