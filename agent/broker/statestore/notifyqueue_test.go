package statestore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
)

// fakeConn is a connection with a Receive Maximum: Send counts a notification
// as unacknowledged until ack, and fails the test if the queue ever exceeds
// the maximum.
type fakeConn struct {
	t        *testing.T
	max      int64
	inflight atomic.Int64
	sent     chan Notification // every Send
	blocked  chan struct{}     // cap 1: Room said no
}

func newFakeConn(t *testing.T, max int64) *fakeConn {
	return &fakeConn{t: t, max: max, sent: make(chan Notification, 64), blocked: make(chan struct{}, 1)}
}

func (c *fakeConn) room() bool {
	if c.inflight.Load() < c.max {
		return true
	}
	signal(c.blocked)
	return false
}

func (c *fakeConn) send(n Notification) SendResult {
	if got := c.inflight.Add(1); got > c.max {
		c.t.Errorf("%d notifications unacknowledged, Receive Maximum %d", got, c.max)
	}
	c.sent <- n
	return Done
}

func (c *fakeConn) ack(q *NotifyQueue) {
	c.inflight.Add(-1)
	q.Acked()
}

func (c *fakeConn) waitBlocked() {
	c.t.Helper()
	select {
	case <-c.blocked:
	case <-time.After(10 * time.Second):
		c.t.Fatal("the queue never waited for room")
	}
}

func (c *fakeConn) nextSent() Notification {
	c.t.Helper()
	select {
	case n := <-c.sent:
		return n
	case <-time.After(10 * time.Second):
		c.t.Fatal("nothing sent")
	}
	return Notification{}
}

// runQueue starts q.Run and stops it when the test ends.
func runQueue(t *testing.T, q *NotifyQueue) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); q.Run() }()
	t.Cleanup(func() { q.Stop(); <-done })
	return done
}

// TestNotifyQueueRespectsReceiveMaximum: with a Receive Maximum of 2, ten
// notifications go out two at a time, the next one only after an ack, in
// order (MQTT 5 section 3.3.4: the server must not send more unacknowledged
// QoS 1 PUBLISHes than the client's Receive Maximum).
func TestNotifyQueueRespectsReceiveMaximum(t *testing.T) {
	c := newFakeConn(t, 2)
	q := NewNotifyQueue(NotifyQueueOptions{Room: c.room, Send: c.send})
	for i := range 10 {
		q.Notify("k", OpSet, []byte{byte('0' + i)}, hlc.Timestamp{Wall: int64(i + 1)})
	}
	runQueue(t, q)
	next := 0
	expect := func() {
		t.Helper()
		n := c.nextSent()
		if n.Key != "k" || n.Op != OpSet || string(n.Value) != string(rune('0'+next)) || n.Version.Wall != int64(next+1) {
			t.Fatalf("sent %+v, want notification %d", n, next)
		}
		next++
	}
	expect()
	expect()
	for next < 10 {
		// The queue holds the rest until an ack frees room: the moment Room
		// says no, nothing more has been sent.
		c.waitBlocked()
		if len(c.sent) != 0 {
			t.Fatalf("sent past the Receive Maximum: %+v", <-c.sent)
		}
		c.ack(q)
		expect()
	}
	if q.Len() != 0 {
		t.Fatalf("%d left in the queue", q.Len())
	}
}

// TestNotifyQueueOverflow: a connection that acknowledges nothing makes the
// queue reach its bound; the queue then drops what it holds, calls Overflow
// once and stops, so memory stays bounded.
func TestNotifyQueueOverflow(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts NotifyQueueOptions
		size int // value bytes per notification
	}{
		{"count", NotifyQueueOptions{MaxQueued: 3}, 1},
		// 31 bytes with the key: 4 fit, the one waiting for room and 3 queued.
		{"bytes", NotifyQueueOptions{MaxQueuedBytes: 124}, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeConn(t, 1)
			overflow := make(chan struct{}, 2)
			opts := tc.opts
			opts.Room, opts.Send = c.room, c.send
			opts.Overflow = func() { overflow <- struct{}{} }
			q := NewNotifyQueue(opts)
			done := runQueue(t, q)
			value := make([]byte, tc.size)
			q.Notify("k", OpSet, value, hlc.Timestamp{Wall: 1})
			c.nextSent() // in flight, never acknowledged
			q.Notify("k", OpSet, value, hlc.Timestamp{Wall: 2})
			c.waitBlocked() // the second is taken and waits for room
			for i := range 3 {
				q.Notify("k", OpSet, value, hlc.Timestamp{Wall: int64(3 + i)})
			}
			if q.Len() != 3 {
				t.Fatalf("queued %d, want 3", q.Len())
			}
			q.Notify("k", OpSet, value, hlc.Timestamp{Wall: 9}) // one too many
			if q.Len() != 0 {
				t.Fatalf("an overflowed queue keeps %d notifications", q.Len())
			}
			c.ack(q) // Run finds the overflow once it looks at the queue again
			select {
			case <-overflow:
			case <-time.After(10 * time.Second):
				t.Fatal("Overflow not called")
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after the overflow")
			}
			q.Notify("k", OpSet, value, hlc.Timestamp{Wall: 10})
			if q.Len() != 0 || len(overflow) != 0 {
				t.Fatalf("after the overflow: %d queued, Overflow called %d more times", q.Len(), len(overflow))
			}
			// The notification waiting for room when the overflow came is the
			// only other one sent: nothing after the overflow.
			for len(c.sent) > 0 {
				if n := <-c.sent; n.Version.Wall != 2 {
					t.Fatalf("sent after the overflow: %+v", n)
				}
			}
		})
	}
}

// TestNotifyQueueStopWhileWaiting: Stop ends a Run that waits for room.
func TestNotifyQueueStopWhileWaiting(t *testing.T) {
	c := newFakeConn(t, 0)
	q := NewNotifyQueue(NotifyQueueOptions{Room: c.room, Send: c.send})
	done := make(chan struct{})
	go func() { defer close(done); q.Run() }()
	q.Notify("k", OpDelete, nil, hlc.Timestamp{Wall: 1})
	c.waitBlocked()
	q.Stop()
	q.Stop() // twice is fine
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Stop")
	}
	if len(c.sent) != 0 {
		t.Fatal("sent with no room")
	}
}

// TestNotifyQueueAsWatcher: the queue registered with KEYNOTIFY delivers the
// store's notifications in version order while writers run concurrently.
func TestNotifyQueueAsWatcher(t *testing.T) {
	s, _ := newTestStore(t, nil)
	c := newFakeConn(t, 4)
	q := NewNotifyQueue(NotifyQueueOptions{Room: c.room, Send: c.send})
	runQueue(t, q)
	if r := do(s, &Request{Payload: cmd("KEYNOTIFY", "k"), Watcher: q}); r.reply != "+OK\r\n" {
		t.Fatalf("KEYNOTIFY: %q", r.reply)
	}
	const writers, each = 4, 10
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				do(s, setReq(ts(t0, 0, "c"), "k", fmt.Sprint(w, "-", i)))
			}
		}()
	}
	var last hlc.Timestamp
	for range writers * each {
		n := c.nextSent()
		if hlc.Compare(n.Version, last) <= 0 {
			t.Fatalf("version %v after %v", n.Version, last)
		}
		last = n.Version
		c.ack(q)
	}
	wg.Wait()
}

// TestNotifyQueueStalls: a notification waiting for room while the connection
// acknowledges nothing for AckTimeout ends the queue (Stalled), even though
// no further change fills it; acknowledgements keep a slow but live
// connection going.
func TestNotifyQueueStalls(t *testing.T) {
	const timeout = time.Second
	c := newFakeConn(t, 1)
	stalled := make(chan time.Time, 2)
	q := NewNotifyQueue(NotifyQueueOptions{Room: c.room, Send: c.send, AckTimeout: timeout,
		Stalled: func() { stalled <- time.Now() }, Overflow: func() { t.Error("Overflow called for a stall") }})
	done := runQueue(t, q)

	// Live: each ack comes within the timeout, though the head waits longer
	// than the timeout in total.
	q.Notify("k", OpSet, []byte("1"), hlc.Timestamp{Wall: 1})
	c.nextSent()
	q.Notify("k", OpSet, []byte("2"), hlc.Timestamp{Wall: 2})
	c.waitBlocked()
	for range 15 { // 1.5 timeouts in all
		time.Sleep(timeout / 10) // an ack that comes late, but well within the timeout
		q.Acked()                // another message's ack: no room yet, but alive
		c.waitBlocked()
	}
	select {
	case <-stalled:
		t.Fatal("stalled although the connection acknowledged within the timeout")
	default:
	}
	c.ack(q)
	c.nextSent()

	// Stalled: the head waits and nothing is acknowledged.
	q.Notify("k", OpSet, []byte("3"), hlc.Timestamp{Wall: 3})
	waitingSince := time.Now()
	select {
	case at := <-stalled:
		if at.Sub(waitingSince) < timeout {
			t.Fatalf("stalled after %v, AckTimeout %v", at.Sub(waitingSince), timeout)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stalled not called")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the stall")
	}
	if q.Len() != 0 || q.Bytes() != 0 {
		t.Fatalf("a stalled queue keeps %d notifications, %d bytes", q.Len(), q.Bytes())
	}
}

// TestNotifyQueueBudgetAndRelease: notifications count against the queue's
// bytes and the shared budget until released (acknowledged), not only while
// they wait; a queue whose Notify does not fit the budget overflows, and
// what a finished queue held goes back to the budget.
func TestNotifyQueueBudgetAndRelease(t *testing.T) {
	budget := NewByteBudget(100)
	if NewByteBudget(0) != nil || (*ByteBudget)(nil).Used() != 0 {
		t.Fatal("a zero budget is no bound")
	}
	sent := make(chan Notification, 8)
	held := func(n Notification) SendResult { sent <- n; return Unacked } // until Release
	overflowA := make(chan struct{}, 1)
	a := NewNotifyQueue(NotifyQueueOptions{Budget: budget, Send: held, Overflow: func() { overflowA <- struct{}{} }})
	b := NewNotifyQueue(NotifyQueueOptions{Budget: budget, Send: held})
	runQueue(t, a)
	runQueue(t, b)
	value := make([]byte, 29) // 30 bytes with the key
	a.Notify("k", OpSet, value, hlc.Timestamp{Wall: 1})
	a.Notify("k", OpSet, value, hlc.Timestamp{Wall: 2})
	b.Notify("k", OpSet, value, hlc.Timestamp{Wall: 1})
	for range 3 {
		<-sent
	}
	if budget.Used() != 90 || a.Bytes() != 60 {
		t.Fatalf("sent and unacknowledged: budget %d, queue %d; want 90, 60", budget.Used(), a.Bytes())
	}
	a.Release(30) // one acknowledged
	if budget.Used() != 60 {
		t.Fatalf("after Release: budget %d", budget.Used())
	}
	a.Notify("k", OpSet, value, hlc.Timestamp{Wall: 3}) // 90
	<-sent
	a.Notify("k", OpSet, value, hlc.Timestamp{Wall: 4}) // 120 > 100: overflow
	select {
	case <-overflowA:
	case <-time.After(10 * time.Second):
		t.Fatal("no overflow past the budget")
	}
	if budget.Used() != 30 {
		t.Fatalf("the overflowed queue kept %d bytes of the budget; want only b's 30", budget.Used()-30)
	}
	a.Release(30) // a late acknowledgement after the overflow: nothing more to give back
	b.Stop()
	if budget.Used() != 0 {
		t.Fatalf("budget %d after both queues ended", budget.Used())
	}
}

// TestNotifyQueueNoRoom: a notification Send finds no room for (NoRoom) stays
// at the head of the queue, counted, and is sent again after the next
// acknowledgement, before the ones behind it; with no acknowledgement for
// AckTimeout the queue stalls, as when it waits for Room.
func TestNotifyQueueNoRoom(t *testing.T) {
	const timeout = 300 * time.Millisecond
	var full atomic.Bool
	full.Store(true)
	refused, sent := make(chan string, 16), make(chan string, 16)
	stalled := make(chan struct{}, 1)
	q := NewNotifyQueue(NotifyQueueOptions{AckTimeout: timeout, Stalled: func() { stalled <- struct{}{} },
		Send: func(n Notification) SendResult {
			if full.Load() {
				refused <- string(n.Value)
				return NoRoom
			}
			sent <- string(n.Value)
			return Unacked
		}})
	done := runQueue(t, q)
	next := func(ch chan string, what string) string {
		t.Helper()
		select {
		case v := <-ch:
			return v
		case <-time.After(10 * time.Second):
			t.Fatalf("nothing %s", what)
		}
		return ""
	}
	for i := range 3 {
		q.Notify("k", OpSet, []byte(fmt.Sprint(i)), hlc.Timestamp{Wall: int64(i + 1)})
	}
	if v := next(refused, "refused"); v != "0" {
		t.Fatalf("first refused: %q", v)
	}
	q.Acked() // still no room: tried again, refused again
	if v := next(refused, "refused again"); v != "0" {
		t.Fatalf("tried again: %q, want the same head", v)
	}
	if q.Len() != 2 || q.Bytes() != 3*2 {
		t.Fatalf("while refused: %d queued, %d bytes; want the other 2 queued and all 3 counted", q.Len(), q.Bytes())
	}
	full.Store(false)
	q.Acked()
	for i := range 3 {
		if v := next(sent, "sent"); v != fmt.Sprint(i) {
			t.Fatalf("sent %q, want %d", v, i)
		}
	}
	select {
	case v := <-sent:
		t.Fatalf("sent %q twice", v)
	default:
	}

	// No room and no acknowledgement: stalled after AckTimeout.
	full.Store(true)
	q.Notify("k", OpSet, []byte("3"), hlc.Timestamp{Wall: 4})
	next(refused, "refused")
	start := time.Now()
	select {
	case <-stalled:
		if waited := time.Since(start); waited < timeout/2 {
			t.Fatalf("stalled after %v, AckTimeout %v", waited, timeout)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stalled not called")
	}
	<-done
}

// TestNotifyQueueArrayStaysWithinItsBound: a queue kept near MaxQueued while
// its head advances (a watcher acknowledging as fast as the changes come, a
// full queue behind) never holds an array of more than MaxQueued
// notifications (compacting only once half of it has been sent would let
// the array grow to about twice that).
func TestNotifyQueueArrayStaysWithinItsBound(t *testing.T) {
	const maxQueued = 1024
	c := newFakeConn(t, 1)
	c.sent = make(chan Notification, 1)
	overflow := make(chan struct{}, 1)
	q := NewNotifyQueue(NotifyQueueOptions{MaxQueued: maxQueued, Room: c.room, Send: c.send,
		Overflow: func() { overflow <- struct{}{} }})
	runQueue(t, q)
	v := 0
	notify := func() {
		v++
		q.Notify("k", OpSet, nil, hlc.Timestamp{Wall: int64(v)})
	}
	notify()
	c.nextSent() // in flight; the next one will wait for room
	for range maxQueued - 1 {
		notify()
	}
	c.waitBlocked()
	peak := 0
	for range 4 * maxQueued {
		c.ack(q) // room for one more: the head goes out
		c.nextSent()
		c.waitBlocked()
		notify()
		q.mu.Lock()
		peak = max(peak, cap(q.queue))
		q.mu.Unlock()
	}
	select {
	case <-overflow:
		t.Fatal("the queue overflowed: the test kept more than MaxQueued waiting")
	default:
	}
	if peak > maxQueued {
		t.Fatalf("an array of %d notifications for a queue of at most %d", peak, maxQueued)
	}
}
