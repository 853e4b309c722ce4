package store

import (
	"context"
	"encoding/hex"
	"errors"
	"sync"

	"github.com/eclipse/paho.golang/paho"
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// Op is what happened to a watched key.
type Op int

const (
	// OpSet: the key was written; Notification.Value holds the new value.
	OpSet Op = iota + 1
	// OpDelete: the key was deleted (DEL, VDEL or expiry).
	OpDelete
)

func (o Op) String() string {
	switch o {
	case OpSet:
		return "SET"
	case OpDelete:
		return "DELETE"
	}
	return "?"
}

// Notification is one change of a watched key.
type Notification struct {
	Key     string
	Op      Op
	Value   []byte        // OpSet: the new value (shared by every Watch of the key: do not modify)
	Version hlc.Timestamp // the __ts of the notification (the GET's version when Resync)
	// Resync marks a notification after a gap: changes of the key between the notification
	// delivered before it and this one are not known. Either the client made it up after a
	// reconnect (the key changed while the client was away and the real notification was
	// lost with the connection; Value and Version are the ones a GET then returned), or the
	// Watch's reader fell Options.WatchBuffer notifications behind and the oldest were
	// dropped (this is the oldest one kept).
	Resync bool
}

// Watch receives the notifications of one key. Several Watches of one key share one
// KEYNOTIFY registration.
type Watch struct {
	c     *Client
	key   string
	out   chan Notification
	limit int // most notifications queued (Options.WatchBuffer)

	mu      sync.Mutex
	queue   []Notification // queue[head:] waits for the reader
	head    int
	wake    chan struct{} // cap 1: "the queue has something"
	stopped chan struct{} // closed by close()
	once    sync.Once
}

// C delivers the notifications in the order the store sent them. It is closed after Stop or
// Client.Close. Delivery never blocks the client: a reader that falls behind has up to
// Options.WatchBuffer notifications queued for it; past that the oldest are dropped and the
// oldest one kept is marked Resync.
func (w *Watch) C() <-chan Notification { return w.out }

// Key returns the watched key.
func (w *Watch) Key() string { return w.key }

// keyWatch is the client's record of one watched key: its watchers and the last state seen,
// against which a reconnect's GET is compared.
type keyWatch struct {
	watchers []*Watch
	known    bool // exists/version hold a state seen from the store
	exists   bool
	version  hlc.Timestamp
	notified uint64 // counts the notifications applied, so rewatch can tell one came
}

// KeyNotify registers for notifications of key (KEYNOTIFY) and returns a Watch delivering
// them. The registration survives reconnects: the client sends KEYNOTIFY again and reports a
// change it missed meanwhile as a Resync notification.
func (c *Client) KeyNotify(ctx context.Context, key string) (*Watch, error) {
	w := &Watch{c: c, key: key, out: make(chan Notification), limit: c.opts.WatchBuffer,
		wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	kw := c.watches[key]
	first := kw == nil
	if first {
		kw = &keyWatch{}
		c.watches[key] = kw
	}
	kw.watchers = append(kw.watchers, w)
	c.wg.Add(1)
	c.mu.Unlock()
	go w.pump()
	if first {
		// Registered before sending, so a notification racing the response is not dropped.
		if err := c.rewatch(ctx, key); err != nil {
			w.Stop(context.Background())
			return nil, err
		}
	}
	return w, nil
}

// Stop ends this Watch and closes C. The last Watch of a key sends KEYNOTIFY … STOP.
func (w *Watch) Stop(ctx context.Context) error {
	c := w.c
	c.mu.Lock()
	kw := c.watches[w.key]
	last := false
	if kw != nil {
		for i, x := range kw.watchers {
			if x == w {
				kw.watchers = append(kw.watchers[:i], kw.watchers[i+1:]...)
				break
			}
		}
		if len(kw.watchers) == 0 {
			delete(c.watches, w.key)
			last = true
		}
	}
	ready := c.state == stateReady
	c.mu.Unlock()
	w.close()
	if last && ready {
		if err := c.keyNotify(ctx, w.key, true); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return nil
}

// KeyNotifyStop stops every Watch of key and sends KEYNOTIFY key STOP. It returns ErrNotFound
// when the store was not watching the key for this client (":0").
func (c *Client) KeyNotifyStop(ctx context.Context, key string) error {
	c.mu.Lock()
	kw := c.watches[key]
	delete(c.watches, key)
	c.mu.Unlock()
	if kw != nil {
		for _, w := range kw.watchers {
			w.close()
		}
	}
	return c.keyNotify(ctx, key, true)
}

// rewatch sends KEYNOTIFY for key, then GETs it and compares with the last state seen; a
// difference becomes a Resync notification (nothing is sent the first time, when no state
// is known yet).
func (c *Client) rewatch(ctx context.Context, key string) error {
	c.mu.Lock()
	var seen uint64
	if kw := c.watches[key]; kw != nil {
		seen = kw.notified
	}
	c.mu.Unlock()
	if err := c.keyNotify(ctx, key, false); err != nil {
		return err
	}
	e, err := c.Get(ctx, key)
	exists := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	kw := c.watches[key]
	if kw == nil {
		return nil
	}
	if kw.notified != seen {
		// A notification came after the KEYNOTIFY: the watchers have a state at least as
		// new as the GET's, which may be older (the store ran the GET before that change,
		// and its notification overtook the GET's response). A Resync would go back in time.
		return nil
	}
	changed := kw.known && (exists != kw.exists || (exists && hlc.Compare(e.Version, kw.version) != 0))
	kw.known, kw.exists, kw.version = true, exists, e.Version
	if changed {
		n := Notification{Key: key, Op: OpDelete, Resync: true}
		if exists {
			n.Op, n.Value, n.Version = OpSet, e.Value, e.Version
		}
		for _, w := range kw.watchers {
			w.push(n)
		}
	}
	return nil
}

// onNotify handles a PUBLISH on the notification topic: `*4 NOTIFY SET VALUE v` or
// `*2 NOTIFY DELETE` (wire fact 3; the document's `DEL` is accepted too), with __ts.
func (c *Client) onNotify(p *paho.Publish) {
	key, err := hex.DecodeString(p.Topic[len(c.notifyPrefix):])
	if err != nil {
		c.opts.Logger.Warn("store: notification topic with a bad key", "topic", p.Topic)
		return
	}
	var version hlc.Timestamp
	if p.Properties != nil {
		version, _ = c.observe(p.Properties.User)
	}
	n, err := parseNotification(p.Payload)
	if err != nil {
		c.opts.Logger.Warn("store: bad notification", "topic", p.Topic, "err", err)
		return
	}
	n.Key, n.Version = string(key), version
	c.mu.Lock()
	defer c.mu.Unlock()
	kw := c.watches[n.Key]
	if kw == nil {
		return
	}
	if n.Op == OpSet && kw.known && kw.exists && !version.IsZero() && hlc.Compare(version, kw.version) == 0 {
		return // already delivered as a Resync notification
	}
	kw.known, kw.exists, kw.version = true, n.Op == OpSet, version
	kw.notified++
	for _, w := range kw.watchers {
		w.push(n)
	}
}

var errBadNotification = errors.New("store: malformed notification")

func parseNotification(b []byte) (Notification, error) {
	var args [4][]byte
	parts, err := resp3.ParseCommand(b, args[:0])
	if err != nil || len(parts) < 2 || !equalFold(parts[0], "NOTIFY") {
		return Notification{}, errBadNotification
	}
	switch {
	case equalFold(parts[1], "SET") && len(parts) == 4 && equalFold(parts[2], "VALUE"):
		return Notification{Op: OpSet, Value: parts[3]}, nil
	case (equalFold(parts[1], "DELETE") || equalFold(parts[1], "DEL")) && len(parts) == 2:
		return Notification{Op: OpDelete}, nil
	}
	return Notification{}, errBadNotification
}

// equalFold compares ASCII b with upper-case s, ignoring case (wire fact 8).
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x := b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if x != s[i] {
			return false
		}
	}
	return true
}

// push queues n for the reader; it never blocks (it runs on paho's goroutine). A full queue
// drops its oldest notification and marks the next one Resync, so memory stays bounded and
// the reader learns that it missed changes.
func (w *Watch) push(n Notification) {
	w.mu.Lock()
	if w.queued() >= w.limit { // == limit: push is the only producer and limit >= 1
		w.queue[w.head] = Notification{}
		w.head++
		if w.queued() > 0 {
			w.queue[w.head].Resync = true
		} else {
			n.Resync = true
		}
	}
	if w.head > 0 && w.head >= len(w.queue)/2 {
		// Move the live part to the front so the array does not grow forever; amortised O(1).
		live := copy(w.queue, w.queue[w.head:])
		clear(w.queue[live:])
		w.queue, w.head = w.queue[:live], 0
	}
	w.queue = append(w.queue, n)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// queued is the number of notifications waiting. w.mu must be held.
func (w *Watch) queued() int { return len(w.queue) - w.head }

// pop takes the oldest queued notification.
func (w *Watch) pop() (Notification, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queued() == 0 {
		return Notification{}, false
	}
	n := w.queue[w.head]
	w.queue[w.head] = Notification{}
	w.head++
	return n, true
}

func (w *Watch) close() { w.once.Do(func() { close(w.stopped) }) }

// pump moves queued notifications to the reader one at a time, so that a reader that falls
// behind leaves them in the bounded queue.
func (w *Watch) pump() {
	defer w.c.wg.Done()
	defer close(w.out)
	for {
		n, ok := w.pop()
		if !ok {
			select {
			case <-w.wake:
				continue
			case <-w.stopped:
				return
			}
		}
		select {
		case w.out <- n:
		case <-w.stopped:
			return
		}
	}
}
