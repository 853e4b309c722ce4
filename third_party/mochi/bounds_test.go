// faceagent patch (byte bounds): tests of bounds.go.

package mqtt

import (
	"bufio"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// quotaRecorder is a QuotaObserver counting what it is told.
type quotaRecorder struct {
	HookBase
	mu      sync.Mutex
	dropped map[Quota]int
	refused map[Quota]int
}

func (h *quotaRecorder) ID() string { return "test-quotas" }

// Provides lets everyone in and everything through (mochi refuses without an ACL hook).
func (h *quotaRecorder) Provides(b byte) bool                               { return b == OnACLCheck || b == OnConnectAuthenticate }
func (h *quotaRecorder) OnACLCheck(*Client, string, bool) bool              { return true }
func (h *quotaRecorder) OnConnectAuthenticate(*Client, packets.Packet) bool { return true }
func (h *quotaRecorder) OnQuotaExceeded(_ *Client, q Quota, refused bool, _ *packets.Packet) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dropped == nil {
		h.dropped, h.refused = map[Quota]int{}, map[Quota]int{}
	}
	if refused {
		h.refused[q]++
	} else {
		h.dropped[q]++
	}
}

func (h *quotaRecorder) count(q Quota, refused bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if refused {
		return h.refused[q]
	}
	return h.dropped[q]
}

// newBoundsServer returns a server with an inline client and caps, and the hook.
func newBoundsServer(t *testing.T, caps func(*Capabilities)) (*Server, *quotaRecorder) {
	t.Helper()
	c := NewDefaultServerCapabilities()
	caps(c)
	s := New(&Options{InlineClient: true, Capabilities: c, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	rec := &quotaRecorder{}
	if err := s.AddHook(rec, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, rec
}

// pipeClient registers a connected MQTT 5 client id subscribed to filter with QoS 1, its
// writer running, and returns the far end of its connection (nothing reads it yet).
func pipeClient(t *testing.T, s *Server, id, filter string) (*Client, net.Conn) {
	t.Helper()
	near, far := net.Pipe()
	t.Cleanup(func() { near.Close(); far.Close() })
	cl := s.NewClient(near, "t", id, false)
	cl.Properties.ProtocolVersion = 5
	go cl.WriteLoop()
	t.Cleanup(func() { cl.Stop(nil) })
	s.Clients.Add(cl)
	sub := packets.Subscription{Filter: filter, Qos: 1}
	s.Topics.Subscribe(id, sub)
	cl.State.Subscriptions.Add(filter, sub)
	return cl, far
}

// readPublish reads one packet from r and returns it decoded (MQTT 5).
func readPublish(t *testing.T, conn net.Conn, r *bufio.Reader) packets.Packet {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := r.ReadByte()
	if err != nil {
		t.Fatal(err)
	}
	var pk packets.Packet
	if err := pk.FixedHeader.Decode(b); err != nil {
		t.Fatal(err)
	}
	n, _, err := packets.DecodeLength(r)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatal(err)
	}
	pk.ProtocolVersion = 5
	if pk.FixedHeader.Type != packets.Publish {
		t.Fatalf("read a packet of type %d, want PUBLISH", pk.FixedHeader.Type)
	}
	if err := pk.PublishDecode(body); err != nil {
		t.Fatal(err)
	}
	return pk
}

// payload returns an n-byte payload starting with i.
func payload(i uint64, n int) []byte {
	p := make([]byte, n)
	binary.BigEndian.PutUint64(p, i)
	return p
}

// A client that stops reading: QoS 1 messages beyond its queue's bytes wait in its session
// (not dropped), QoS 0 ones are dropped for it alone; the queue never holds more than its
// bound but one message; once the client reads again it gets every QoS 1 message, once, in
// order, without anything published meanwhile.
func TestPendingWriteBytesHoldQoS1InOrder(t *testing.T) {
	const bound = 16 << 10
	s, rec := newBoundsServer(t, func(c *Capabilities) {
		c.MaximumClientWritesPendingBytes = bound
		c.MaximumClientWritesPending = 1024
	})
	cl, far := pipeClient(t, s, "slow", "slow/#")
	const n, size = 200, 1 << 10
	var peak int64
	for i := 0; i < n; i++ {
		if err := s.Publish("slow/q1", payload(uint64(i), size), false, 1); err != nil {
			t.Fatal(err)
		}
		if err := s.Publish("slow/q0", payload(uint64(i), size), false, 0); err != nil {
			t.Fatal(err)
		}
		peak = max(peak, cl.PendingWriteBytes())
	}
	if peak > bound+MessageBytes(&packets.Packet{TopicName: "slow/q1", Payload: make([]byte, size)}) {
		t.Errorf("pending writes peaked at %d bytes, bound %d", peak, bound)
	}
	if rec.count(QuotaWritesHeld, false) == 0 || rec.count(QuotaWritesDropped, false) == 0 {
		t.Fatalf("held %d, dropped %d: the queue never filled", rec.count(QuotaWritesHeld, false), rec.count(QuotaWritesDropped, false))
	}
	if cl.State.Inflight.Len() != n {
		t.Errorf("%d QoS 1 messages in the session, want %d", cl.State.Inflight.Len(), n)
	}

	r := bufio.NewReader(far)
	next := uint64(0)
	for next < n {
		pk := readPublish(t, far, r)
		if pk.FixedHeader.Qos == 0 {
			continue
		}
		if got := binary.BigEndian.Uint64(pk.Payload); got != next {
			t.Fatalf("QoS 1 message %d arrived where %d was due", got, next)
		}
		next++
	}
	if got := cl.PendingWriteBytes(); got != 0 {
		t.Errorf("%d bytes still counted pending after everything was read", got)
	}
}

// Messages in a session are counted (in flight, queued while away, waiting); one that
// would take the session or all sessions over their bounds is dropped for that session,
// the newest, and reported.
func TestSessionAndQueuedBytesDropTheNewest(t *testing.T) {
	msg := MessageBytes(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "s/x", Payload: make([]byte, 1000)})
	sub := SubscriptionBytes("s/#")
	s, rec := newBoundsServer(t, func(c *Capabilities) {
		c.MaximumSessionBytes = 10*msg + sub
		c.MaximumQueuedBytes = 25*msg + sub + 2*SubscriptionBytes("t/y")
	})
	// Sessions whose clients are away (mochi keeps their messages in flight).
	a, _ := pipeClient(t, s, "a", "s/#")
	a.Stop(nil)
	for i := 0; i < 30; i++ {
		if err := s.Publish("s/x", payload(uint64(i), 1000), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	if a.State.Inflight.Len() != 10 {
		t.Errorf("session a holds %d messages, want 10 (max_session_bytes)", a.State.Inflight.Len())
	}
	for _, m := range a.State.Inflight.GetAll(false) {
		if i := binary.BigEndian.Uint64(m.Payload); i >= 10 {
			t.Errorf("session a holds message %d: not one of the oldest", i)
		}
	}
	if n := rec.count(QuotaSessionBytes, false); n != 20 {
		t.Errorf("dropped for max_session_bytes: %d, want 20", n)
	}

	// Two more sessions share what is left of max_queued_bytes: 15 messages.
	b, _ := pipeClient(t, s, "b", "t/y")
	c, _ := pipeClient(t, s, "c", "t/y")
	b.Stop(nil)
	c.Stop(nil)
	for i := 0; i < 30; i++ {
		if err := s.Publish("t/y", payload(uint64(i), 1000), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.State.Inflight.Len() + c.State.Inflight.Len(); n != 15 {
		t.Errorf("sessions b and c hold %d messages, want 15 (what max_queued_bytes leaves)", n)
	}
	if q, all := rec.count(QuotaQueuedBytes, false), rec.count(QuotaSessionBytes, false)-20+rec.count(QuotaQueuedBytes, false); q == 0 || all != 45 {
		t.Errorf("dropped for max_queued_bytes %d, in all %d; want some, 45", q, all)
	}
	if got, want := s.QueuedBytes(), a.SessionBytes()+b.SessionBytes()+c.SessionBytes(); got != want {
		t.Errorf("QueuedBytes %d, sessions hold %d", got, want)
	}
	if s.QueuedBytes() > s.Options.Capabilities.MaximumQueuedBytes {
		t.Errorf("QueuedBytes %d over the bound", s.QueuedBytes())
	}

	// The sessions end: nothing stays counted.
	for _, cl := range []*Client{a, b, c} {
		cl.ClearInflights()
		s.UnsubscribeClient(cl)
		s.releaseSession(cl)
	}
	if got := s.QueuedBytes(); got != 0 {
		t.Errorf("QueuedBytes %d after the sessions ended", got)
	}
}

// Inflight's bytes follow its entries through Set (replacing), Delete, Clone and detach,
// in the set and in the global counter.
func TestInflightBytesFollowEntries(t *testing.T) {
	var global atomic.Int64
	i := NewInflights()
	i.global = &global
	p1 := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 1, TopicName: "a", Payload: make([]byte, 100)}
	p2 := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 2, TopicName: "b", Payload: make([]byte, 300)}
	i.Set(p1)
	i.Set(p2)
	want := MessageBytes(&p1) + MessageBytes(&p2)
	if i.bytes.Load() != want || global.Load() != want {
		t.Fatalf("bytes %d, global %d, want %d", i.bytes.Load(), global.Load(), want)
	}
	p1b := p1
	p1b.Payload = make([]byte, 50)
	i.Set(p1b) // replaces
	want = MessageBytes(&p1b) + MessageBytes(&p2)
	if i.bytes.Load() != want || global.Load() != want {
		t.Fatalf("after replacing: bytes %d, global %d, want %d", i.bytes.Load(), global.Load(), want)
	}
	c := i.Clone()
	if c.bytes.Load() != want || global.Load() != 2*want {
		t.Fatalf("clone: bytes %d, global %d, want %d and %d", c.bytes.Load(), global.Load(), want, 2*want)
	}
	i.Delete(1)
	i.detach()
	if global.Load() != want {
		t.Fatalf("after detaching the original: global %d, want %d", global.Load(), want)
	}
	i.Set(p1) // a detached set counts itself only
	if global.Load() != want {
		t.Fatalf("a detached set changed the global counter: %d", global.Load())
	}
	c.Delete(1)
	c.Delete(2)
	if c.bytes.Load() != 0 || global.Load() != 0 {
		t.Fatalf("empty: bytes %d, global %d", c.bytes.Load(), global.Load())
	}
}

// The reader (after a PUBACK) and the writer (its queue empty) may both look for a waiting
// message: each is taken once.
func TestTakeNextOnce(t *testing.T) {
	i := NewInflights()
	const n = 2000
	for id := uint16(1); id <= n; id++ {
		i.Set(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: id, Expiry: -1})
	}
	var taken [2][]uint16
	var wg sync.WaitGroup
	for g := range taken {
		g := g
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pk packets.Packet
			for i.takeNextInto(&pk, nil) {
				taken[g] = append(taken[g], pk.PacketID)
			}
		}()
	}
	wg.Wait()
	seen := map[uint16]bool{}
	for _, ids := range taken {
		prev := uint16(0)
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("message %d taken twice", id)
			}
			if id < prev {
				t.Fatalf("goroutine took %d after %d: not oldest first", id, prev)
			}
			seen[id], prev = true, id
		}
	}
	if len(seen) != n || i.hasWaiting() {
		t.Fatalf("%d taken of %d; waiting left: %v", len(seen), n, i.hasWaiting())
	}
}

// Subscriptions count per session (MaximumSubscriptions, then bytes); one replaced costs
// nothing more; the topics index keeps none of an expired session's subscriptions.
func TestSubscriptionBoundsAndExpiry(t *testing.T) {
	s, _ := newBoundsServer(t, func(c *Capabilities) {
		c.MaximumSubscriptions = 3
		c.MaximumSessionBytes = 1 << 20
	})
	cl, _ := pipeClient(t, s, "c", "a/1")
	for _, f := range []string{"a/2", "a/3"} {
		if q := s.subscriptionRefused(cl, f); q != 0 {
			t.Fatalf("%s refused (%v) below the bound", f, q)
		}
		s.Topics.Subscribe(cl.ID, packets.Subscription{Filter: f})
		cl.State.Subscriptions.Add(f, packets.Subscription{Filter: f})
	}
	if q := s.subscriptionRefused(cl, "a/4"); q != QuotaSubscriptions {
		t.Errorf("a fourth subscription: %v, want QuotaSubscriptions", q)
	}
	if q := s.subscriptionRefused(cl, "a/2"); q != 0 {
		t.Errorf("a subscription replaced: %v", q)
	}
	want := SubscriptionBytes("a/1") + SubscriptionBytes("a/2") + SubscriptionBytes("a/3")
	if cl.SessionBytes() != want || s.QueuedBytes() != want {
		t.Errorf("session %d, global %d, want %d", cl.SessionBytes(), s.QueuedBytes(), want)
	}
	long := "x/" + string(make([]byte, 2<<20))
	if q := s.subscriptionRefused(cl, long); q != QuotaSubscriptions {
		t.Errorf("over both bounds: %v", q)
	}
	cl.State.Subscriptions.Delete("a/3")
	s.Topics.Unsubscribe("a/3", cl.ID)
	if q := s.subscriptionRefused(cl, long); q != QuotaSessionBytes {
		t.Errorf("a 2 MB filter: %v, want QuotaSessionBytes", q)
	}

	// The session expires (the client left with an expiry of 1 s, 2 s ago).
	cl.Properties.Props.SessionExpiryInterval, cl.Properties.Props.SessionExpiryIntervalFlag = 1, true
	cl.Stop(nil)
	s.clearExpiredClients(time.Now().Unix() + 2)
	if _, ok := s.Clients.Get("c"); ok {
		t.Fatal("the expired session's client is still known")
	}
	if subs := s.Topics.Subscribers("a/1"); len(subs.Subscriptions) != 0 {
		t.Errorf("the topics index still routes to the expired session: %v", subs.Subscriptions)
	}
	if s.Topics.root.particles.len() != 0 {
		t.Errorf("%d particles left in the index", s.Topics.root.particles.len())
	}
	if s.QueuedBytes() != 0 || s.Clients.network.Load() != 0 {
		t.Errorf("after expiry: QueuedBytes %d, network clients %d", s.QueuedBytes(), s.Clients.network.Load())
	}
}

// Retained messages count (replacing, deleting, expiring); one that would take them over
// the bound is not retained, the one it would have replaced stays.
func TestRetainedBytesBound(t *testing.T) {
	x := NewTopicsIndex()
	pk := func(topic string, n int) packets.Packet {
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: true}, TopicName: topic, Payload: make([]byte, n)}
	}
	a, b := pk("r/a", 1000), pk("r/b/c", 1000)
	limit := RetainedBytes(&a) + RetainedBytes(&b)
	for _, p := range []packets.Packet{a, b} {
		if _, ok := x.retain(p, limit); !ok {
			t.Fatalf("%s refused within the bound", p.TopicName)
		}
	}
	if x.retainedBytes.Load() != limit {
		t.Fatalf("retained bytes %d, want %d", x.retainedBytes.Load(), limit)
	}
	big := pk("r/a", 1001)
	if _, ok := x.retain(big, limit); ok {
		t.Fatal("a replacement one byte over the bound was retained")
	}
	if got, _ := x.Retained.Get("r/a"); len(got.Payload) != 1000 {
		t.Fatalf("the refused replacement changed the retained message (%d bytes)", len(got.Payload))
	}
	small := pk("r/a", 10)
	if _, ok := x.retain(small, limit); !ok {
		t.Fatal("a smaller replacement refused")
	}
	x.retain(packets.Packet{TopicName: "r/a"}, limit) // empty: deletes
	x.expireRetained("r/b/c")
	if x.retainedBytes.Load() != 0 || x.Retained.Len() != 0 || x.root.particles.len() != 0 {
		t.Fatalf("after delete and expiry: %d bytes, %d messages, %d particles", x.retainedBytes.Load(), x.Retained.Len(), x.root.particles.len())
	}
}

// Clients counts network clients (inline ones not), through Add over an existing id,
// Delete and deleteIf; clientsFull refuses a new id at the bound but not a known one.
func TestClientsBound(t *testing.T) {
	s, _ := newBoundsServer(t, func(c *Capabilities) { c.MaximumClients = 2 })
	if s.Clients.network.Load() != 0 {
		t.Fatalf("the inline client counts: %d", s.Clients.network.Load())
	}
	a, _ := pipeClient(t, s, "a", "x")
	pipeClient(t, s, "b", "x")
	a.Stop(nil) // away, its session kept: still counts
	c := s.NewClient(nil, "t", "c", false)
	if !s.clientsFull(c) {
		t.Error("a third client id let in at max_clients 2")
	}
	again := s.NewClient(nil, "t", "a", false)
	if s.clientsFull(again) {
		t.Error("a client resuming its kept session refused")
	}
	s.Clients.Add(again) // takes a's place
	if s.Clients.network.Load() != 2 {
		t.Errorf("network clients %d after a takeover, want 2", s.Clients.network.Load())
	}
	s.Clients.deleteIf("a", a) // the old client: not the one registered
	if s.Clients.network.Load() != 2 {
		t.Errorf("deleteIf removed a client that took the id over")
	}
	s.Clients.Delete("a")
	if s.Clients.network.Load() != 1 || s.clientsFull(c) {
		t.Errorf("network clients %d; a new id refused: %v", s.Clients.network.Load(), s.clientsFull(c))
	}
}

// One message larger than the queue's bound goes when the queue is empty, counted in
// MaximumQueuedBytes until it is written; not while another is queued, nor when the
// total has no room for it.
func TestOversizeMessageCountsInTheTotal(t *testing.T) {
	const bound = 1 << 10
	big := int64(4 << 10)
	s, _ := newBoundsServer(t, func(c *Capabilities) {
		c.MaximumClientWritesPendingBytes = bound
		c.MaximumQueuedBytes = 2 * big
	})
	cl, _ := pipeClient(t, s, "o", "o")
	base := s.QueuedBytes() // the subscription
	if !cl.reservePending(big) {
		t.Fatal("an oversize message refused on an empty queue")
	}
	if got := s.QueuedBytes() - base; got != big {
		t.Fatalf("the oversize message counts %d in the total, want %d", got, big)
	}
	if cl.reservePending(100) {
		t.Fatal("a message queued behind an oversize one")
	}
	cl.unreservePending(big)
	if got := s.QueuedBytes(); got != base {
		t.Fatalf("total %d after the oversize message went, want %d", got, base)
	}
	other, _ := pipeClient(t, s, "p", "p")
	if !other.reservePending(big) {
		t.Fatal("a second client's oversize message refused with room in the total")
	}
	if cl.reservePending(2 * big) {
		t.Fatal("an oversize message taken with no room left in the total")
	}
	other.unreservePending(big)
}

// The inbound budget: readers take what fits, one packet larger than the budget goes alone,
// a reader waits for room and stops waiting when its client closes.
func TestInboundBudget(t *testing.T) {
	var b inboundBudget
	never := make(chan struct{})
	if !b.acquire(80, 100, never) {
		t.Fatal("80 of 100 refused")
	}
	got := make(chan bool, 1)
	go func() { got <- b.acquire(50, 100, never) }()
	for parked := false; !parked; { // until the reader waits for room
		b.mu.Lock()
		parked = b.wake != nil
		b.mu.Unlock()
		runtime.Gosched()
	}
	select {
	case <-got:
		t.Fatal("50 more taken over the budget of 100")
	default:
	}
	b.release(80)
	if !<-got {
		t.Fatal("the waiting reader did not get its room")
	}
	b.release(50)
	if !b.acquire(500, 100, never) {
		t.Fatal("a packet larger than the budget refused with nothing else held")
	}
	closed := make(chan struct{})
	go func() { got <- b.acquire(1, 100, closed) }()
	close(closed)
	if <-got {
		t.Fatal("a reader whose client closed got room")
	}
	b.release(500)
	if b.used != 0 {
		t.Fatalf("%d bytes left held", b.used)
	}
}

// Sessions that fill the total cannot starve the others: a session holding less than its
// share (MaximumQueuedBytes / MaximumClients) still gets messages when the total is full,
// one over it does not, and the total stays within twice the bound.
func TestFairShareOfTheTotal(t *testing.T) {
	msg := MessageBytes(&packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "f/x", Payload: make([]byte, 1000)})
	s, rec := newBoundsServer(t, func(c *Capabilities) {
		c.MaximumClients = 4
		c.MaximumQueuedBytes = 40 * msg // share: 10 messages
		c.MaximumSessionBytes = 100 * msg
	})
	hog, _ := pipeClient(t, s, "hog", "f/#")
	hog.Stop(nil) // away: everything routed to it stays
	for i := 0; i < 60; i++ {
		if err := s.Publish("f/x", payload(uint64(i), 1000), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	if rec.count(QuotaQueuedBytes, false) == 0 {
		t.Fatal("the hog never filled the total")
	}
	small, _ := pipeClient(t, s, "small", "g")
	small.Stop(nil)
	for i := 0; i < 20; i++ {
		if err := s.Publish("g", payload(uint64(i), 1000), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := small.State.Inflight.Len(); n < 8 || n > 10 {
		t.Errorf("the small session got %d messages with the total full; want up to its share (10, its subscription included)", n)
	}
	if q := s.QueuedBytes(); q > 2*s.Options.Capabilities.MaximumQueuedBytes {
		t.Errorf("total %d over twice the bound %d", q, s.Options.Capabilities.MaximumQueuedBytes)
	}
}

// AdmitInflight admits a message the caller writes itself as a routed one is: within the
// session's bound, and within the total beyond the session's fair share; what it puts is
// counted until deleted, and nothing is reported to the hooks.
func TestAdmitInflight(t *testing.T) {
	msg := func(id uint16) *packets.Packet {
		return &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: id,
			TopicName: "n/x", Payload: make([]byte, 1000)}
	}
	cost := MessageBytes(msg(1))
	s, rec := newBoundsServer(t, func(c *Capabilities) {
		c.MaximumClients = 4
		c.MaximumQueuedBytes = 40 * cost // share: 10 messages
		c.MaximumSessionBytes = 30 * cost
	})
	cl, _ := pipeClient(t, s, "watcher", "unused")
	base := cl.SessionBytes() // its subscription
	put := 0
	for id := uint16(1); id <= 40; id++ {
		if q := s.AdmitInflight(cl, msg(id)); q != 0 {
			if q != QuotaSessionBytes {
				t.Fatalf("message %d refused for %v, want the session's bound", id, q)
			}
			break
		}
		put++
	}
	if max := int((30*cost - base) / cost); put != max {
		t.Fatalf("%d messages admitted, the session's bound holds %d", put, max)
	}
	if got, want := cl.SessionBytes(), base+int64(put)*cost; got != want {
		t.Fatalf("session bytes %d, want %d", got, want)
	}
	if rec.count(QuotaSessionBytes, false)+rec.count(QuotaSessionBytes, true) != 0 {
		t.Fatal("a refusal was reported to the hooks")
	}
	// The total full (a session away holding it), a second watcher is admitted up to its
	// share only.
	hog, _ := pipeClient(t, s, "hog", "f/#")
	hog.Stop(nil)
	for i := 0; i < 60; i++ {
		if err := s.Publish("f/x", payload(uint64(i), 1000), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	second, _ := pipeClient(t, s, "second", "unused")
	n := 0
	for id := uint16(1); id <= 20; id++ {
		if q := s.AdmitInflight(second, msg(id)); q != 0 {
			if q != QuotaQueuedBytes {
				t.Fatalf("refused for %v with the total full, want the total's bound", q)
			}
			break
		}
		n++
	}
	if n < 8 || n > 10 {
		t.Fatalf("%d messages admitted with the total full; want up to the share (10, the subscription included)", n)
	}
	for id := uint16(1); id <= uint16(put); id++ {
		cl.State.Inflight.Delete(id)
	}
	if got := cl.SessionBytes(); got != base {
		t.Fatalf("session bytes %d after the deletes, want %d", got, base)
	}
}

// A message held in the session behind the writer's queue goes after what is queued,
// whoever sends it: here the client's reader after a PUBACK (sendNextImmediate) while the
// writer has not yet written the message queued before. Before, the reader took the held
// message and wrote it into the write buffer, which the writer flushed ahead of the
// packet it was writing: a subscriber reading slowly got a QoS 1 stream out of order (the
// agent's forwarded acks, off by the queue's length).
func TestHeldMessageGoesAfterTheQueuedOnes(t *testing.T) {
	s, _ := newBoundsServer(t, func(c *Capabilities) {
		c.MaximumClientWritesPendingBytes = 1 // the first message is queued, the next held
	})
	near, far := net.Pipe()
	t.Cleanup(func() { _ = near.Close(); _ = far.Close() })
	cl := s.NewClient(near, "t", "k", false)
	cl.Properties.ProtocolVersion = 5
	sub := packets.Subscription{Filter: "out", Qos: 1}
	for i := uint64(0); i < 2; i++ {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "out", Payload: payload(i, 8)}
		if err := s.publishToClient(cl, sub, &pk); err != nil {
			t.Fatal(err)
		}
	}
	if cl.OutboundLen() != 1 || !cl.State.Inflight.hasWaiting() {
		t.Fatalf("queued %d, a message waiting %v: want 1 queued, 1 waiting", cl.OutboundLen(), cl.State.Inflight.hasWaiting())
	}
	s.sendNextImmediate(cl) // what the reader does after a PUBACK, send quota left
	go cl.WriteLoop()
	t.Cleanup(func() { cl.Stop(nil) })
	r := bufio.NewReader(far)
	for want := uint64(0); want < 2; want++ {
		if got := binary.BigEndian.Uint64(readPublish(t, far, r).Payload); got != want {
			t.Fatalf("message %d arrived where %d was due", got, want)
		}
	}
}
