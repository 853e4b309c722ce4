// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co

package mqtt

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mochi-mqtt/server/v2/packets"
)

// faceagent patch (byte bounds): everything a client can make the server hold has a bound
// in bytes. Upstream bounded a client's queue of pending writes and its in-flight set in
// packets only (8,192 each, of up to the maximum packet size), the number of its
// subscriptions, the retained messages and the sessions kept for disconnected clients not
// at all: a broker serving a few request/response clients peaked at 291 MB, 200,000
// subscriptions of one client took 528 MB (again after every restart), and one subscriber
// that stopped reading held 1.9 GB of 1 MB messages.
//
// What is counted (Capabilities, 0: no bound):
//
//   - MaximumClientWritesPendingBytes: the messages queued for one client's writer
//     (MessageBytes each). A message that does not fit is held in the client's session
//     when it is QoS 1/2 (in flight, waiting: the writer sends it once its queue is empty,
//     in order; see holdForWriter), and dropped for that client alone when it is QoS 0.
//     One message larger than the bound still goes when the queue is empty, counted in
//     MaximumQueuedBytes until written (so that such messages stay bounded in total).
//   - MaximumSessionBytes: a session's in-flight set (messages queued for it while it is
//     offline or waiting for quota, messages sent and not yet acknowledged), its
//     subscriptions (SubscriptionBytes) and its will (WillBytes); its own QoS 1/2 flows
//     (Inbound) are bounded by the server's Receive Maximum instead. A QoS 1/2 message that does not fit is dropped for that
//     session, the newest one: what is queued stays a prefix of what was published (MQTT
//     lets a server discard messages it cannot store; a message already sent is never
//     taken back, which [MQTT-4.4.0-1] would forbid). A subscription that does not fit is
//     refused (SUBACK 0x97), a will (CONNACK 0x97), a QoS 2 message (PUBREC 0x97).
//   - MaximumQueuedBytes: the same, summed over every session. A session that holds less
//     than its share (MaximumQueuedBytes / MaximumClients) is never refused for it: sessions
//     that fill the total (clients that stopped reading, say) cannot starve the others (a
//     terminal's command, a back office's results), so the total stays within twice the
//     bound.
//   - MaximumRetainedBytes: the retained messages (RetainedBytes each). One that does not
//     fit is refused (PUBACK or PUBREC 0x97) from an MQTT 5 QoS 1/2 publisher, and routed
//     without being retained otherwise (there is no way to tell the publisher).
//   - MaximumSubscriptions: the subscriptions of one session (SUBACK 0x97 beyond).
//   - MaximumInboundBytes: packets over 64 KiB being read and handled at once, all clients
//     together (inboundBudget): a reader whose packet does not fit waits.
//   - MaximumClients: the clients the server knows, connected or kept for their session
//     (network clients; inline ones do not count). A CONNECT of a client id beyond it is
//     refused (CONNACK 0x97; MQTT 3.1.1: 3, server unavailable); resuming or taking over a
//     known session is not.
//
// A QoS 1/2 message dropped for every subscriber is still acknowledged as taken: the hooks
// may have taken it (faceagent's intake journals tasks in OnPublish), and a PUBACK cannot
// say that some took it; an error code would have the publisher send it again to those
// that did. Each drop is the subscriber's, counted and reported.
//
// Every refusal and drop is reported to the hooks that implement QuotaObserver.

// MessageOverhead is what one message costs besides its variable parts: the packet struct
// it lives in (in flight, queued, retained) and its slot.
const MessageOverhead = int64(unsafe.Sizeof(packets.Packet{})) + 32

// ParticleOverhead is what one level of a topic filter or retained topic costs in the
// topics index when no other filter or topic shares it (a particle with its maps: 633 bytes
// a level measured with 32-level filters, 1,171 bytes for a one-level filter with the
// subscription itself).
const ParticleOverhead = 640

// SubscriptionOverhead is what one subscription costs besides its filter's levels: its
// entries in the particle and in the client's own map.
const SubscriptionOverhead = 512

// userPropertyOverhead is the slice slot and string headers of one user property.
const userPropertyOverhead = 32

// MessageBytes is what a message costs in memory, counted against the bounds: the packet
// struct, its topic, payload and variable properties. Acknowledgements in flight count
// their struct too.
func MessageBytes(pk *packets.Packet) int64 {
	p := &pk.Properties
	n := MessageOverhead + int64(len(pk.TopicName)+len(pk.Payload)+
		len(p.ContentType)+len(p.ResponseTopic)+len(p.CorrelationData)+len(p.ReasonString)+
		len(p.AuthenticationMethod)+len(p.AuthenticationData)+8*len(p.SubscriptionIdentifier))
	for _, u := range p.User {
		n += int64(len(u.Key)+len(u.Val)) + userPropertyOverhead
	}
	return n
}

// topicLevels returns the number of levels of a topic name or filter.
func topicLevels(topic string) int64 {
	return int64(strings.Count(topic, "/")) + 1
}

// SubscriptionBytes is what one subscription to filter costs: its levels in the topics
// index (as if no other filter shared them), its filter twice (the index and the client's
// map) and its entries.
func SubscriptionBytes(filter string) int64 {
	return SubscriptionOverhead + 2*int64(len(filter)) + topicLevels(filter)*ParticleOverhead
}

// RetainedBytes is what a retained message costs: the message, its topic as the key, and
// its topic's levels in the index.
func RetainedBytes(pk *packets.Packet) int64 {
	return MessageBytes(pk) + int64(len(pk.TopicName)) + topicLevels(pk.TopicName)*ParticleOverhead
}

// WillBytes is what a client's will costs while its session holds it.
func WillBytes(w *Will) int64 {
	if w.Flag == 0 {
		return 0
	}
	n := MessageOverhead + int64(len(w.TopicName)+len(w.Payload))
	for _, u := range w.User {
		n += int64(len(u.Key)+len(u.Val)) + userPropertyOverhead
	}
	return n
}

// Quota names the bound a refusal or drop was for (QuotaObserver).
type Quota byte

const (
	// QuotaWritesDropped: a QoS 0 message dropped for one client, its queue of pending
	// writes full (packets or bytes).
	QuotaWritesDropped Quota = iota + 1
	// QuotaWritesHeld: a QoS 1/2 message not queued for a client whose queue of pending
	// writes was full, held in its session instead (not a loss).
	QuotaWritesHeld
	// QuotaSessionBytes: a message dropped for one session, or a subscription, will or QoS
	// 2 message refused, for MaximumSessionBytes.
	QuotaSessionBytes
	// QuotaQueuedBytes: the same for MaximumQueuedBytes.
	QuotaQueuedBytes
	// QuotaInflight: a message dropped for one session at MaximumInflight messages.
	QuotaInflight
	// QuotaRetainedBytes: a retained message not kept (MaximumRetainedBytes).
	QuotaRetainedBytes
	// QuotaSubscriptions: a subscription refused (MaximumSubscriptions).
	QuotaSubscriptions
	// QuotaClients: a connection refused (MaximumClients).
	QuotaClients
)

var quotaNames = [...]string{"", "pending_writes", "pending_writes_held", "session_bytes", "queued_bytes",
	"inflight", "retained_bytes", "subscriptions", "clients"}

// String returns the quota's name in snake case ("session_bytes").
func (q Quota) String() string {
	if int(q) < len(quotaNames) {
		return quotaNames[q]
	}
	return "unknown"
}

// QuotaObserver is implemented by a hook that wants to see refusals and drops for the
// bounds above. With refused, cl sent pk (a CONNECT, SUBSCRIBE or PUBLISH) and was refused
// for q (CONNACK, SUBACK, PUBACK or PUBREC 0x97); otherwise pk is a message routed to cl
// and dropped or held for it (a retained message routed without being retained too).
// OnQuotaExceeded runs on the goroutine that hit the bound (a publisher's, the client's
// reader): it must not block, nor keep pk.
type QuotaObserver interface {
	OnQuotaExceeded(cl *Client, q Quota, refused bool, pk *packets.Packet)
}

// refusable reports whether a PUBLISH from cl can be refused with a reason code: from an
// MQTT 5 network client, QoS 1 or 2.
func refusable(cl *Client, pk *packets.Packet) bool {
	return !cl.Net.Inline && cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos > 0
}

// serverBounds are the server-wide counters of the bounds (the retained messages' is
// TopicsIndex.retainedBytes, the known clients' Clients.network).
type serverBounds struct {
	queued  atomic.Int64 // session bytes of every session (MaximumQueuedBytes)
	inbound inboundBudget
}

// QueuedBytes returns the bytes the sessions hold (MaximumQueuedBytes counts them).
func (s *Server) QueuedBytes() int64 { return s.bounds.queued.Load() }

// RetainedBytes returns the bytes the retained messages cost (MaximumRetainedBytes).
func (s *Server) RetainedBytes() int64 { return s.Topics.retainedBytes.Load() }

// SessionBytes returns the bytes cl's session holds (MaximumSessionBytes counts them).
func (cl *Client) SessionBytes() int64 {
	return cl.State.Inflight.bytes.Load() + cl.State.Subscriptions.bytes.Load() + cl.State.willBytes.Load()
}

// PendingWriteBytes returns the bytes of the messages queued for cl's writer.
func (cl *Client) PendingWriteBytes() int64 { return cl.State.pendingBytes.Load() }

// quotaExceeded tells the QuotaObserver hooks.
func (s *Server) quotaExceeded(cl *Client, q Quota, refused bool, pk *packets.Packet) {
	for _, h := range s.hooks.GetAll() {
		if o, ok := h.(QuotaObserver); ok {
			o.OnQuotaExceeded(cl, q, refused, pk)
		}
	}
}

// reserveBytes adds n to c unless that takes it over limit (limit <= 0: no bound).
func reserveBytes(c *atomic.Int64, n, limit int64) bool {
	for {
		cur := c.Load()
		if limit > 0 && cur+n > limit {
			return false
		}
		if c.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// sessionRoom reports which bound, if any, n more bytes in cl's session would break. The
// global one is checked, not reserved: callers that must not overshoot reserve it
// themselves (Inflight.admit).
func (s *Server) sessionRoom(cl *Client, n int64) Quota {
	c := s.Options.Capabilities
	held := cl.SessionBytes()
	if c.MaximumSessionBytes > 0 && held+n > c.MaximumSessionBytes {
		return QuotaSessionBytes
	}
	if c.MaximumQueuedBytes > 0 && held+n > fairShare(c) && s.bounds.queued.Load()+n > c.MaximumQueuedBytes {
		return QuotaQueuedBytes
	}
	return 0
}

// fairShare is what a session may hold whatever all sessions hold together:
// MaximumQueuedBytes / MaximumClients (0 without both bounds). At most MaximumClients
// sessions each hold up to it beyond the total, so the total stays within twice
// MaximumQueuedBytes.
func fairShare(c *Capabilities) int64 {
	if c.MaximumQueuedBytes <= 0 || c.MaximumClients <= 0 {
		return 0
	}
	return c.MaximumQueuedBytes / c.MaximumClients
}

// admitInflight puts out, a new message for cl, in cl's in-flight set within the session
// bounds, and reports the bound that refused it (0: put), whether the message counts (in
// Info.Inflight: not in a set whose session has ended, see Inflight.end) and, with send,
// whether it waits for send quota (else it took a unit). The session bound is checked and
// the global one reserved under the set's lock, so concurrent publishers never overshoot
// either.
func (s *Server) admitInflight(cl *Client, out *packets.Packet, send bool) (q Quota, counted, waiting bool) {
	c := s.Options.Capabilities
	others := cl.State.Subscriptions.bytes.Load() + cl.State.willBytes.Load()
	return cl.State.Inflight.admit(out, others, c.MaximumSessionBytes, c.MaximumQueuedBytes, fairShare(c), send)
}

// AdmitInflight puts pk, a new QoS 1/2 message for cl that the caller writes itself
// (WritePacket), in cl's in-flight set within the session bounds, as a routed message is
// admitted (MaximumSessionBytes; MaximumQueuedBytes beyond the session's fair share), and
// reports the bound that refused it (0: put, its bytes counted until it leaves the set).
// Nothing is reported to QuotaObserver hooks: the caller decides what a refusal means. It
// takes no send quota and counts nothing in Info.Inflight; the caller does both for a
// message put. faceagent patch (byte bounds): agent/broker's KEYNOTIFY notifications,
// which it writes to the registering connection itself, went into the set with Set,
// counted but never refused: a watcher that acknowledged nothing held up to its Receive
// Maximum of them whatever its session's bound.
func (s *Server) AdmitInflight(cl *Client, pk *packets.Packet) Quota {
	q, _, _ := s.admitInflight(cl, pk, false)
	return q
}

// admit is setFrom for a new entry m within the bounds: sessionMax for the set's bytes
// plus others, globalMax for the global counter unless they stay within share. It reports
// the bound that refused m, and whether m counts: not when the set's session has ended
// (end), where m is put all the same, for the hooks that look for such messages (a
// publisher routing on a stale subscriber list to a session another connection took over).
//
// With send, m is to be sent: it takes a unit of send quota, or, with none left, waits in
// the set for one (its entry's Expiry -1; m itself is left as it is), and admit reports
// which. faceagent patch (counter drift): publishToClient read the quota before putting
// the message in flight and took a unit after, and a PUBACK handled in between (which
// found no message waiting to send) gave back the unit it then took for a message it left
// waiting: no quota and nothing in flight, the client was sent nothing more.
func (i *Inflight) admit(m *packets.Packet, others, sessionMax, globalMax, share int64, send bool) (q Quota, counted, waiting bool) {
	i.Lock()
	defer i.Unlock()
	cost := MessageBytes(m)
	held := i.bytes.Load() + others + cost
	if sessionMax > 0 && held > sessionMax {
		return QuotaSessionBytes, false, false
	}
	if i.global != nil {
		if held <= share {
			i.global.Add(cost) // within its share: whatever the others hold
		} else if !reserveBytes(i.global, cost, globalMax) {
			return QuotaQueuedBytes, false, false
		}
	}
	i.putLocked(m, cost, true)
	if !send || i.ended {
		return 0, !i.ended, false
	}
	if !i.takeSendQuota() {
		p := i.internal[m.PacketID]
		if p.Expiry >= 0 {
			p.Expiry = -1
			i.waiting++
		}
		return 0, true, true
	}
	return 0, true, false
}

// end removes every message from the set, stops counting it in the global counter
// (detach), and ends it: a message put in it afterwards counts nowhere (admit). It returns
// the messages removed, oldest first, which the caller counts out of Info.Inflight.
//
// faceagent patch (counter drift): a session taken over (or ended) had its set cleared
// (ClearInflights) and detached in two steps; a publisher routing on a stale subscriber
// list put messages in it in between or after, counted in Info.Inflight, and nothing ever
// counted them out (the set is no session's).
func (i *Inflight) end() []packets.Packet {
	i.Lock()
	defer i.Unlock()
	removed := make([]packets.Packet, 0, len(i.internal))
	for id, p := range i.internal {
		removed = append(removed, *p)
		i.account(-MessageBytes(p))
		releaseInflight(p)
		delete(i.internal, id)
	}
	i.waiting = 0
	i.inherited = nil
	if i.global != nil {
		i.global.Add(-i.bytes.Load())
		i.global = nil
	}
	i.ended = true
	sort.Slice(removed, func(a, b int) bool { return createdBefore(&removed[a], &removed[b]) })
	return removed
}

// account adds delta to the set's bytes and the global counter; under the set's lock.
func (i *Inflight) account(delta int64) {
	i.bytes.Add(delta)
	if i.global != nil {
		i.global.Add(delta)
	}
}

// detach takes the set's bytes out of the global counter and stops counting it there: its
// session has ended (a clean session's connection closed, a session taken over, expired).
// Entries that a publisher on a stale subscriber list still adds cost the set only.
func (i *Inflight) detach() {
	i.Lock()
	defer i.Unlock()
	if i.global != nil {
		i.global.Add(-i.bytes.Load())
		i.global = nil
	}
}

// hasWaiting reports whether a message waits in the set to be sent (Expiry < 0).
func (i *Inflight) hasWaiting() bool {
	i.RLock()
	defer i.RUnlock()
	return i.waiting > 0
}

// wait leaves m waiting in the set to be sent (Expiry -1, see holdForWriter). An entry
// under m's id that was not waiting (sent, or queued for the writer) took a unit of send
// quota when it was put in flight (putInflight, or the caller of HoldWrite): it gives it
// back, as a waiting message holds none; takeNextInto or takeResend takes one when it goes.
// faceagent patch (counter drift): holdForWriter kept the unit, and the drain took a
// second one for the same message, which its PUBACK gave back once: each message held for
// a full queue lost the connection one unit, and after Receive Maximum of them it was sent
// nothing more.
//
// A message no longer in the set (expired, or its session ended, since it was put) is not
// put back: nothing would count it, and its PUBACK would count it out a second time.
func (i *Inflight) wait(m *packets.Packet) {
	i.Lock()
	defer i.Unlock()
	p, ok := i.internal[m.PacketID]
	if !ok {
		return
	}
	sent := p.Expiry >= 0
	m.Expiry = -1
	i.putLocked(m, MessageBytes(m), false)
	if sent {
		i.IncreaseSendQuota()
	}
}

// takeNextInto copies the oldest message waiting to be sent (Expiry < 0) to dst, no
// longer waiting (Expiry 0) and with one send quota taken, and reports whether there was
// one the client's send quota allows and the client's writer is not busy (writerBusy).
// The message stays in flight until acknowledged. One call takes each message once: the
// client's reader (sendNextImmediate, after a PUBACK) and its writer (holdForWriter's
// drain) may both look.
//
// faceagent patch (held order): writerBusy is asked under the lock, once a message is seen
// waiting. A publisher queues a message for the writer only while none waits, and
// increments outboundQty before it routes the next: so the messages queued before the
// oldest waiting one are then still in the queue or being written, or written, never
// overtaken. Asked before the lock, a publisher could queue messages and hold the next
// between the question and the take, and the taker wrote that one first.
func (i *Inflight) takeNextInto(dst *packets.Packet, writerBusy func() bool) bool {
	i.Lock()
	defer i.Unlock()
	if i.waiting == 0 {
		return false
	}
	if atomic.LoadInt32(&i.maximumSendQuota) > 0 && atomic.LoadInt32(&i.sendQuota) <= 0 {
		return false
	}
	if writerBusy != nil && writerBusy() {
		return false
	}
	var next *packets.Packet
	for k, v := range i.internal {
		if _, inherited := i.inherited[k]; inherited {
			continue // ResendInflightMessages sends it (takeResend)
		}
		if v.Expiry < 0 && (next == nil || createdBefore(v, next)) {
			next = v
		}
	}
	if next == nil {
		return false
	}
	next.Expiry = 0
	i.waiting--
	i.DecreaseSendQuota()
	*dst = *next
	return true
}

// reservePending makes room for n bytes in cl's queue of pending writes: false when n
// would take it over MaximumClientWritesPendingBytes. One message larger than that bound
// may still go when the queue is empty, if it fits in MaximumQueuedBytes, where it counts
// until written (so that such messages, one for each client, stay bounded in total).
func (cl *Client) reservePending(n int64) bool {
	limit := cl.ops.options.Capabilities.MaximumClientWritesPendingBytes
	for {
		cur := cl.State.pendingBytes.Load()
		oversize := limit > 0 && cur+n > limit
		if oversize && (cur > 0 || !cl.reserveOversize(n)) {
			return false
		}
		if cl.State.pendingBytes.CompareAndSwap(cur, cur+n) {
			return true
		}
		if oversize {
			cl.unreserveOversize(n)
		}
	}
}

// unreservePending gives back what reservePending took for a message of n bytes, written
// or not queued after all.
func (cl *Client) unreservePending(n int64) {
	cl.State.pendingBytes.Add(-n)
	if limit := cl.ops.options.Capabilities.MaximumClientWritesPendingBytes; limit > 0 && n > limit {
		cl.unreserveOversize(n) // only the empty queue's exception takes one this large
	}
}

// dropQueued empties cl's queue of pending writes once cl has stopped: its writer has
// ended or is ending, and nothing queued can be written any more. Each message gives back
// what reservePending took for it (the queue's bytes, and an oversize message's share of
// MaximumQueuedBytes); a QoS 1/2 one stays in the session's in-flight set, for its next
// connection. The writer calls it as it ends, and a caller that queued a packet calls it
// when it finds the client stopped since, in case the writer had ended before the packet
// came.
//
// faceagent patch (counter drift): the writer returned with packets in its queue, and an
// oversize message among them stayed counted in MaximumQueuedBytes for good.
func (cl *Client) dropQueued() {
	for {
		select {
		case pk := <-cl.State.outbound:
			atomic.AddInt32(&cl.State.outboundQty, -1)
			if pk == writerKick {
				continue
			}
			cl.unreservePending(outboundBytes(pk))
			releaseOutbound(pk)
		default:
			return
		}
	}
}

// reserveOversize counts a message larger than the queue's bound in MaximumQueuedBytes.
func (cl *Client) reserveOversize(n int64) bool {
	if cl.ops.bounds == nil {
		return true
	}
	return reserveBytes(&cl.ops.bounds.queued, n, cl.ops.options.Capabilities.MaximumQueuedBytes)
}

func (cl *Client) unreserveOversize(n int64) {
	if cl.ops.bounds != nil {
		cl.ops.bounds.queued.Add(-n)
	}
}

// inboundSmall is the largest packet read without taking from the inbound budget: one
// connection's reader holds at most this much unbudgeted.
const inboundSmall = 64 << 10

// inboundBudget bounds the bytes of large packets (over inboundSmall) being read and
// handled at once, all connections together (Capabilities.MaximumInboundBytes): without
// it every connection could hold a packet of the maximum packet size at once. A reader
// whose packet does not fit waits (reading nothing more) until others are handled, or its
// client closes; one packet larger than the budget goes when nothing else holds any.
type inboundBudget struct {
	mu   sync.Mutex
	used int64
	wake chan struct{} // closed and replaced when room is given back
}

// acquire takes n bytes within limit, waiting for room; false once done is closed.
func (b *inboundBudget) acquire(n, limit int64, done <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= limit {
			b.used += n
			b.mu.Unlock()
			return true
		}
		if b.wake == nil {
			b.wake = make(chan struct{})
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-done:
			return false
		}
	}
}

// release gives back n bytes and wakes the waiting readers.
func (b *inboundBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
}

// InboundBytes returns the bytes of large packets being read and handled now.
func (s *Server) InboundBytes() int64 {
	s.bounds.inbound.mu.Lock()
	defer s.bounds.inbound.mu.Unlock()
	return s.bounds.inbound.used
}

// takeInbound takes a packet of n bytes' share of the inbound budget before it is read;
// an error when the client closed while it waited.
func (cl *Client) takeInbound(n int64) error {
	limit := cl.ops.options.Capabilities.MaximumInboundBytes
	if limit <= 0 || n <= inboundSmall || cl.ops.bounds == nil {
		return nil
	}
	if !cl.ops.bounds.inbound.acquire(n, limit, cl.State.open.Done()) {
		return ErrConnectionClosed
	}
	cl.State.inboundHeld = n
	return nil
}

// releaseInbound gives back what takeInbound took for the packet just handled.
func (cl *Client) releaseInbound() {
	if n := cl.State.inboundHeld; n > 0 {
		cl.State.inboundHeld = 0
		cl.ops.bounds.inbound.release(n)
	}
}

// outboundBytes is what a packet in the queue of pending writes costs: messages count,
// markers do not.
func outboundBytes(pk *packets.Packet) int64 {
	if pk.FixedHeader.Type != packets.Publish {
		return 0
	}
	return MessageBytes(pk)
}

// writerKick is queued to wake a writer with nothing queued when a message was held for it
// (holdForWriter); it is never written nor pooled.
var writerKick = &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Reserved}}

// holdForWriter leaves out (in cl's in-flight set already) waiting there (Expiry -1)
// instead of queueing it: cl's queue of pending writes is full, or older messages wait
// ahead of it. The writer sends waiting messages, oldest first, once its queue is empty
// (drainWaiting), as does the reader after each packet while send quota is left
// (sendNextImmediate); a resumed session is sent them too. The send quota out took is
// given back until it goes (Inflight.wait). A writer with nothing queued is woken.
func (cl *Client) holdForWriter(out *packets.Packet) {
	cl.State.Inflight.wait(out)
	if len(cl.State.outbound) == 0 {
		select {
		case cl.State.outbound <- writerKick:
			atomic.AddInt32(&cl.State.outboundQty, 1)
		default: // filled since: the writer looks once it has written those
		}
	}
}

// HoldWrite leaves pk, a QoS 1/2 message in flight to the client already (its send quota
// taken), waiting in its in-flight set for the writer goroutine, which sends it once its
// queue of pending writes is empty (a resumed session gets it too); the quota is given
// back until then. For a caller whose QueueWrite found the queue full: the message is
// neither lost nor written on the caller's goroutine.
func (cl *Client) HoldWrite(pk packets.Packet) {
	if pk.FixedHeader.Qos == 0 || !cl.State.Inflight.Has(pk.PacketID) {
		return
	}
	cl.holdForWriter(&pk)
}

// drainWaiting sends the messages waiting in the in-flight set, oldest first, while
// nothing is queued for the writer and send quota allows. It runs on the writer goroutine.
func (cl *Client) drainWaiting() {
	if !cl.State.Inflight.hasWaiting() {
		return
	}
	pk := outboundPackets.Get().(*packets.Packet)
	defer releaseOutbound(pk)
	for !cl.Closed() && cl.State.Inflight.takeNextInto(pk, cl.writerBusy) {
		if err := cl.WritePacket(*pk); err != nil {
			cl.ops.log.Debug("failed publishing packet", "error", err, "client", cl.ID)
			return
		}
	}
}

// writerBusy reports whether cl's writer has packets queued, or one it is writing
// (outboundQty counts a packet out once written): a waiting message goes after them.
// faceagent patch (held order): the client's reader sent a waiting message after a PUBACK
// whatever was queued, and WritePacket buffered it for the writer's next write to flush
// ahead of that write's packet; the writer's drain checked the queue before it took the
// message, where a publisher could queue older ones in between.
func (cl *Client) writerBusy() bool {
	return len(cl.State.outbound) > 0 || atomic.LoadInt32(&cl.State.outboundQty) > 0
}

// flushIdle writes what WritePacket buffered (outbuf) when the writer's queue is empty.
// WritePacket buffers a packet written while the queue holds more, for the writer's next
// write to flush; a writerKick (or a resize marker) is taken without a write, so a packet
// another goroutine wrote behind one (the reader sending a message that waited for send
// quota) stayed in the buffer. It runs on the writer goroutine. faceagent patch (byte
// bounds): such a message waited for the client's next packet (a PINGRESP, up to a
// keepalive later).
func (cl *Client) flushIdle() {
	cl.Lock()
	defer cl.Unlock()
	if cl.Net.outbuf == nil || len(cl.State.outbound) > 0 || cl.Closed() {
		return
	}
	if err := cl.flushOutbuf(); err != nil {
		cl.Stop(err) // as WritePacket: the stream is unusable
	}
}

// clientsFull reports whether cl may not connect for MaximumClients: as many network
// clients are known (connected, or kept for their session) and cl's id is not one of
// them, or as many are connected and cl does not take over a connected one (the
// connection it replaces goes: the count does not grow). Concurrent CONNECTs may overshoot
// by their number.
//
// faceagent patch (session takeover): at MaximumClients connected, every CONNECT was
// refused, a takeover too: a client whose old connection was left half-open (a terminal
// after a network fault) could not come back until that connection's keepalive ran out.
func (s *Server) clientsFull(cl *Client) bool {
	limit := s.Options.Capabilities.MaximumClients
	existing, known := s.Clients.Get(cl.ID)
	if known && !existing.Net.Inline && !existing.Closed() {
		return false
	}
	if atomic.LoadInt64(&s.Info.ClientsConnected) >= limit {
		return true
	}
	return s.Clients.network.Load() >= limit && !known
}

// willRoom reports the bound cl's will breaks (0: none), and counts it in cl's session when
// it fits.
func (s *Server) willRoom(cl *Client) Quota {
	n := WillBytes(&cl.Properties.Will)
	if n == 0 {
		return 0
	}
	if q := s.sessionRoom(cl, n); q != 0 {
		return q
	}
	cl.State.willBytes.Store(n)
	s.bounds.queued.Add(n)
	return 0
}

// refuseEarly drops pk for cl before publishToClient copies it when a bound will refuse it
// anyway: under a flood (clients that stopped reading, sessions full) most messages are
// refused, and each copy of its payload was garbage. The checks that count (admitInflight,
// reservePending) come later, on the copy.
func (s *Server) refuseEarly(cl *Client, sub packets.Subscription, pk *packets.Packet) error {
	qos := min(pk.FixedHeader.Qos, sub.Qos, s.Options.Capabilities.MaximumQos)
	n := MessageBytes(pk)
	if qos > 0 {
		q := s.sessionRoom(cl, n)
		if q == 0 && cl.State.Inflight.Len() >= int(s.Options.Capabilities.MaximumInflight) {
			q = QuotaInflight
			atomic.AddInt64(&s.Info.InflightDropped, 1)
		}
		if q == 0 {
			return nil
		}
		s.quotaExceeded(cl, q, false, pk)
		return packets.ErrQuotaExceeded
	}
	limit := s.Options.Capabilities.MaximumClientWritesPendingBytes
	if cur := cl.State.pendingBytes.Load(); limit > 0 && cur > 0 && cur+n > limit && cl.Net.Conn != nil && !cl.Closed() {
		s.publishDropped(cl, pk)
		s.quotaExceeded(cl, QuotaWritesDropped, false, pk)
		return packets.ErrPendingClientWritesExceeded
	}
	return nil
}

// connectFailed ends what cl's session held when its connection failed between the will
// being counted and the session being established (CONNACK not written, say): a session
// that ends with the connection is removed, as clientGone would; a kept one that cl
// registered stays, as upstream left it, for its client to resume (it expires as any
// other). A session cl never registered (refused by a ConnackWaiter) gives back what it
// counted, its will, whether kept or not.
//
// faceagent patch (counter drift): a kept session's connection refused before it was
// registered kept its will counted in MaximumQueuedBytes for good, one will per refused
// CONNECT (a client retrying against a full disk).
func (s *Server) connectFailed(cl *Client) {
	unlock := s.sessions.lock(cl.ID) // faceagent patch (session takeover)
	defer unlock()
	if cl.IsTakenOver() {
		return // the connection that took it over ended it (inheritClientSession)
	}
	if cur, ok := s.Clients.Get(cl.ID); ok && cur == cl {
		expire := (cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.SessionExpiryInterval == 0) ||
			(cl.Properties.ProtocolVersion < 5 && cl.Properties.Clean)
		if !expire {
			return
		}
		cl.ClearInflights()
		s.UnsubscribeClient(cl)
		s.Clients.deleteIf(cl.ID, cl)
	}
	s.releaseSession(cl)
}

// subscriptionRefused reports the bound, if any, that refuses cl's subscription to filter:
// one it does not have yet, beyond MaximumSubscriptions or its session's bytes.
func (s *Server) subscriptionRefused(cl *Client, filter string) Quota {
	if _, ok := cl.State.Subscriptions.Get(filter); ok {
		return 0 // replaced: costs nothing more
	}
	if max := s.Options.Capabilities.MaximumSubscriptions; max > 0 && cl.State.Subscriptions.Len() >= int(max) {
		return QuotaSubscriptions
	}
	return s.sessionRoom(cl, SubscriptionBytes(filter))
}

// releaseSession takes what cl's ended session held out of the global counters: its
// in-flight set stops counting there, its will goes (its subscriptions were deleted, which
// counts them out).
func (s *Server) releaseSession(cl *Client) {
	cl.State.Inflight.detach()
	if n := cl.State.willBytes.Swap(0); n > 0 {
		s.bounds.queued.Add(-n)
	}
}

// expireSession removes what an expired session held: its subscriptions from the topics
// index (upstream left them there for good: every expired session's subscriptions stayed
// in the index), its in-flight messages, its will, and its entry in Clients. The hooks
// were told (OnClientExpired), and the storage hook deletes its records itself, so none
// is told of each subscription or message.
func (s *Server) expireSession(cl *Client) {
	for filter := range cl.State.Subscriptions.GetAll() {
		cl.State.Subscriptions.Delete(filter)
		if s.Topics.Unsubscribe(filter, cl.ID) {
			atomic.AddInt64(&s.Info.Subscriptions, -1)
		}
	}
	atomic.AddInt64(&s.Info.Inflight, -int64(len(cl.State.Inflight.end()))) // faceagent patch (counter drift)
	s.releaseSession(cl)
	s.Clients.deleteIf(cl.ID, cl)
}
