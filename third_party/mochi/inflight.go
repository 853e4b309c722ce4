// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co
// SPDX-FileContributor: mochi-co

package mqtt

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Inflight is a map of InflightMessage keyed on packet id.
//
// faceagent patch (packet-id spaces): it holds only the messages the server sends the
// client (a QoS 1/2 PUBLISH, then the PUBREL of a QoS 2 one), keyed by the server's packet
// ids, and sendQuota counts them; the client's own QoS 1/2 publishes, keyed by its ids, are
// in ClientState.Inbound, and receiveQuota, kept here, counts those. Upstream kept both
// directions in this map (see Inbound).
//
// faceagent patch (inflight allocations): the map holds pointers to packets of its own,
// taken from inflightPackets and given back when their entry is deleted. It held the
// ~800-byte packets by value, which a Go map keeps out of line anyway: every new entry was
// a fresh 800-byte allocation (3 KB of garbage per task for the agent: a command, the
// broker's PUBACK held while a message is routed, results and forwarded acks in flight to
// the back office), and every scan (NextImmediate, after each packet a client with
// messages in flight sends) copied each entry. Nothing outside this file sees the
// pointers: Get, GetAll and the others hand out copies, as before.
type Inflight struct {
	sync.RWMutex
	internal            map[uint16]*packets.Packet // internal contains the inflight packets
	receiveQuota        int32                      // remaining inbound qos quota for flow control
	sendQuota           int32                      // remaining outbound qos quota for flow control
	maximumReceiveQuota int32                      // maximum allowed receive quota
	maximumSendQuota    int32                      // maximum allowed send quota
	// faceagent patch (wedged peer): the ids Clone brought from the session taken over, until
	// ResendInflightMessages has sent them (takeResend).
	inherited map[uint16]struct{}
	// faceagent patch (inflight allocations): how many entries wait for send quota
	// (Expiry < 0), so that NextImmediate looks through the set only when one does.
	waiting int
	// faceagent patch (byte bounds): MessageBytes of the entries (changed under the lock,
	// read without it), and the server-wide counter they are also added to (bounds.go);
	// nil for a set of no server's, or whose session ended (detach).
	bytes  atomic.Int64
	global *atomic.Int64
	// faceagent patch (counter drift): the set's session has ended (end): entries put in it
	// since count nowhere.
	ended bool
}

// inflightPackets are the packets of deleted Inflight entries, zeroed, for new ones.
// faceagent patch (inflight allocations).
var inflightPackets = sync.Pool{New: func() any { return new(packets.Packet) }}

// releaseInflight zeroes p (it no longer holds its payload or properties) and gives it
// back to inflightPackets. p must be out of every Inflight map. faceagent patch (inflight
// allocations).
func releaseInflight(p *packets.Packet) {
	*p = packets.Packet{}
	inflightPackets.Put(p)
}

// NewInflights returns a new instance of an Inflight packets map.
func NewInflights() *Inflight {
	return &Inflight{
		internal: map[uint16]*packets.Packet{},
	}
}

// Set adds or updates an inflight packet by packet id.
func (i *Inflight) Set(m packets.Packet) bool {
	return i.setFrom(&m)
}

// setFrom is Set with the packet by pointer. faceagent patch (stack): for callers that
// hold the packet on the heap (publishToClient), no copy on their frame.
func (i *Inflight) setFrom(m *packets.Packet) bool {
	i.Lock()
	defer i.Unlock()
	return i.putLocked(m, MessageBytes(m), false)
}

// putLocked is setFrom under the lock; cost is MessageBytes(m), already added to the
// global counter when reserved (admit). faceagent patch (byte bounds): the entries' bytes
// are counted.
func (i *Inflight) putLocked(m *packets.Packet, cost int64, reserved bool) bool {
	p, ok := i.internal[m.PacketID]
	if !ok { // faceagent patch (inflight allocations)
		p = inflightPackets.Get().(*packets.Packet)
		i.internal[m.PacketID] = p
	} else {
		if p.Expiry < 0 {
			i.waiting--
		}
		i.account(-MessageBytes(p))
	}
	*p = *m
	if m.Expiry < 0 {
		i.waiting++
	}
	i.bytes.Add(cost)
	if !reserved && i.global != nil {
		i.global.Add(cost)
	}
	delete(i.inherited, m.PacketID) // faceagent patch (wedged peer): no longer the inherited message
	return !ok
}

// replace puts m in place of the entry under its packet id and reports whether there was
// one; it adds none. faceagent patch (counter drift).
func (i *Inflight) replace(m *packets.Packet) bool {
	i.Lock()
	defer i.Unlock()
	if _, ok := i.internal[m.PacketID]; !ok {
		return false
	}
	i.putLocked(m, MessageBytes(m), false)
	return true
}

// Get returns an inflight packet by packet id.
func (i *Inflight) Get(id uint16) (packets.Packet, bool) {
	i.RLock()
	defer i.RUnlock()

	if m, ok := i.internal[id]; ok {
		return *m, true
	}

	return packets.Packet{}, false
}

// Has reports whether a packet is in flight under id. faceagent patch (inflight
// allocations): Get's copy of the packet, for callers that only look for the id.
func (i *Inflight) Has(id uint16) bool {
	i.RLock()
	defer i.RUnlock()
	_, ok := i.internal[id]
	return ok
}

// TypeOf returns the type of the packet in flight under id (its FixedHeader.Type), and
// whether there is one. faceagent patch (inflight allocations): Get's copy of the
// packet, for callers that only look at its type.
func (i *Inflight) TypeOf(id uint16) (byte, bool) {
	i.RLock()
	defer i.RUnlock()
	if m, ok := i.internal[id]; ok {
		return m.FixedHeader.Type, true
	}
	return 0, false
}

// Len returns the size of the inflight messages map.
func (i *Inflight) Len() int {
	i.RLock()
	defer i.RUnlock()
	return len(i.internal)
}

// Clone returns a new instance of Inflight with the same message data.
// This is used when transferring inflights from a taken-over session.
func (i *Inflight) Clone() *Inflight {
	c := NewInflights()
	i.RLock()
	defer i.RUnlock()
	for k, v := range i.internal {
		p := inflightPackets.Get().(*packets.Packet) // faceagent patch (inflight allocations): a packet of its own
		*p = *v
		c.internal[k] = p
	}
	c.waiting = i.waiting
	// faceagent patch (byte bounds): the copy counts in the global counter too, until the
	// session taken over is cleared and detached.
	c.bytes.Store(i.bytes.Load())
	c.global = i.global
	if c.global != nil {
		c.global.Add(c.bytes.Load())
	}
	// faceagent patch (wedged peer): remember what came from the old session (takeResend).
	if len(i.internal) > 0 {
		c.inherited = make(map[uint16]struct{}, len(i.internal))
		for k := range i.internal {
			c.inherited[k] = struct{}{}
		}
	}
	return c
}

// takeResend returns, ordered as GetAll, the messages a resumed session's new connection
// must be sent again: those Clone brought from the session taken over, and those waiting
// for send quota (Expiry < 0), which nothing else writes. It forgets the inherited ids.
//
// faceagent patch (wedged peer): ResendInflightMessages sent every message in the set. One
// routed to the new client after it was registered (mochi registers it before CONNACK and
// resends after) is also in its queue of pending writes, and went out twice. The client's
// lock, taken by NextPacketID, used to hold such a publisher back while the CONNACK was
// written, which made that rare.
//
// faceagent patch (send quota): of the QoS 1/2 PUBLISHes among them it returns only as
// many as the send quota (the new connection's Receive Maximum, less what is already in
// flight on it) allows, oldest first, and takes that quota; the rest wait for it in the set
// (Expiry -1, DUP set on those sent before), sent one per PUBACK or PUBCOMP as a message
// routed to a client with no quota left is (sendNextImmediate). A PUBREL is always sent and
// takes quota: its PUBLISH is unacknowledged until the PUBCOMP. Upstream resent every
// message: a client with a smaller Receive Maximum than the messages in flight got more
// unacknowledged PUBLISHes than it allows [MQTT-3.3.4-9] (a strict one disconnects with
// 0x93 and gets the same flood on its next resume), and the waiting ones, still Expiry -1,
// went out again with the next free quota. A client without a Receive Maximum (MQTT
// 3.1.1: maximumSendQuota 0) has no quota, and gets them all as before.
//
// faceagent patch (resend once): every message it returns is no longer waiting (Expiry 0
// in the set), also without send quota. It returned those early, still waiting: a message
// that waited in the session taken over (its connection's queue of pending writes full)
// was resent here and sent again by the writer's drain (takeNextInto, which no longer
// skipped it as inherited) under the same packet id, without DUP.
func (i *Inflight) takeResend() []packets.Packet {
	i.Lock()
	defer i.Unlock()
	m := []packets.Packet{}
	for k, v := range i.internal {
		if _, ok := i.inherited[k]; ok || v.Expiry < 0 {
			m = append(m, *v)
		}
	}
	i.inherited = nil
	sort.Slice(m, func(i, j int) bool {
		return createdBefore(&m[i], &m[j])
	})
	unlimited := atomic.LoadInt32(&i.maximumSendQuota) == 0
	send := m[:0]
	for _, pk := range m {
		p := i.internal[pk.PacketID]
		if !unlimited {
			switch {
			case pk.FixedHeader.Type == packets.Pubrel:
				i.DecreaseSendQuota()
			case pk.FixedHeader.Type != packets.Publish || pk.FixedHeader.Qos == 0:
			case atomic.LoadInt32(&i.sendQuota) > 0:
				i.DecreaseSendQuota()
			default:
				if p.Expiry >= 0 { // sent before: waits again, and goes out as a duplicate
					p.Expiry = -1
					p.FixedHeader.Dup = true
					i.waiting++
				}
				continue
			}
		}
		// faceagent patch (resend once): sent now, so no longer waiting (as in takeNextInto),
		// with send quota or without. pk keeps -1: never sent, no DUP
		// (ResendInflightMessages).
		if p.Expiry < 0 {
			p.Expiry = 0
			i.waiting--
		}
		send = append(send, pk)
	}
	return send
}

// createdBefore orders messages in flight by creation (Created, in seconds, as upstream
// compared it) and, created in the same second, by packet id. faceagent patch (send
// quota): upstream's sort by Created alone left messages of the same second in the map's
// random order, so those waiting for send quota went out shuffled.
func createdBefore(a, b *packets.Packet) bool {
	if uint16(a.Created) != uint16(b.Created) {
		return uint16(a.Created) < uint16(b.Created)
	}
	return a.PacketID < b.PacketID
}

// GetAll returns all the inflight messages.
func (i *Inflight) GetAll(immediate bool) []packets.Packet {
	i.RLock()
	defer i.RUnlock()

	m := []packets.Packet{}
	for _, v := range i.internal {
		if !immediate || (immediate && v.Expiry < 0) {
			m = append(m, *v)
		}
	}

	sort.Slice(m, func(i, j int) bool {
		return uint16(m[i].Created) < uint16(m[j].Created)
	})

	return m
}

// NextImmediate returns the next inflight packet which is indicated to be sent immediately.
// This typically occurs when the quota has been exhausted, and we need to wait until new quota
// is free to continue sending.
//
// faceagent patch (deadlock): one read lock. It took one and then GetAll took it again: a
// Set or Delete (a publisher, on its goroutine) waiting between the two blocked the second
// for good (sync.RWMutex), hanging the client's reader and the publisher.
//
// faceagent patch (inflight allocations): it looks for the first in GetAll's order itself,
// copying only that one, and only when an entry waits for quota (waiting). The server
// calls it after each packet of a client with messages in flight and send quota left, and
// GetAll copied every entry (a back office with 100 messages in flight: 80 KB copied for
// each packet it sent) to find, usually, none.
func (i *Inflight) NextImmediate() (packets.Packet, bool) {
	i.RLock()
	defer i.RUnlock()
	if i.waiting == 0 {
		return packets.Packet{}, false
	}
	var next *packets.Packet
	for _, v := range i.internal {
		if v.Expiry < 0 && (next == nil || createdBefore(v, next)) { // faceagent patch (send quota): same second, by id
			next = v
		}
	}
	if next == nil {
		return packets.Packet{}, false
	}
	return *next, true
}

// Delete removes an in-flight message from the map. Returns true if the message existed.
func (i *Inflight) Delete(id uint16) bool {
	ok, _, _ := i.remove(id)
	return ok
}

// remove is Delete, and also reports whether the message was sent (not waiting for send
// quota, Expiry >= 0), so holding a unit of send quota until its acknowledgement, and
// whether it counted in Info.Inflight: not in a set whose session has ended (end), whose
// messages count nowhere. faceagent patch (counter drift): an acknowledgement for a
// message of an ended set (its id taken again after the set was emptied, while the
// client's PUBACK for the id's earlier message was still being read) counted a message out
// of Info.Inflight that was never counted in.
func (i *Inflight) remove(id uint16) (ok, sent, counted bool) {
	i.Lock()
	defer i.Unlock()

	p, ok := i.internal[id]
	delete(i.internal, id)
	delete(i.inherited, id) // faceagent patch (wedged peer)
	if ok {
		if p.Expiry < 0 {
			i.waiting--
		}
		sent, counted = p.Expiry >= 0, !i.ended
		i.account(-MessageBytes(p)) // faceagent patch (byte bounds)
		releaseInflight(p)          // faceagent patch (inflight allocations)
	}

	return ok, sent, counted
}

// TakeRecieveQuota reduces the receive quota by 1.
func (i *Inflight) DecreaseReceiveQuota() {
	if atomic.LoadInt32(&i.receiveQuota) > 0 {
		atomic.AddInt32(&i.receiveQuota, -1)
	}
}

// TakeRecieveQuota increases the receive quota by 1.
func (i *Inflight) IncreaseReceiveQuota() {
	if atomic.LoadInt32(&i.receiveQuota) < atomic.LoadInt32(&i.maximumReceiveQuota) {
		atomic.AddInt32(&i.receiveQuota, 1)
	}
}

// ResetReceiveQuota resets the receive quota to the maximum allowed value.
func (i *Inflight) ResetReceiveQuota(n int32) {
	atomic.StoreInt32(&i.receiveQuota, n)
	atomic.StoreInt32(&i.maximumReceiveQuota, n)
}

// DecreaseSendQuota reduces the send quota by 1.
func (i *Inflight) DecreaseSendQuota() {
	i.takeSendQuota()
}

// takeSendQuota takes a unit of send quota and reports whether it did: true without a
// quota (no Receive Maximum: maximumSendQuota 0), false when none is left. faceagent patch
// (counter drift): a compare-and-swap, as IncreaseSendQuota, where a check and an add let
// concurrent callers (a publisher, the client's reader, the housekeeping's expiry) take the
// quota past its bounds.
func (i *Inflight) takeSendQuota() bool {
	if atomic.LoadInt32(&i.maximumSendQuota) == 0 {
		return true
	}
	for {
		q := atomic.LoadInt32(&i.sendQuota)
		if q <= 0 {
			return false
		}
		if atomic.CompareAndSwapInt32(&i.sendQuota, q, q-1) {
			return true
		}
	}
}

// IncreaseSendQuota increases the send quota by 1.
func (i *Inflight) IncreaseSendQuota() {
	for {
		q := atomic.LoadInt32(&i.sendQuota)
		if q >= atomic.LoadInt32(&i.maximumSendQuota) {
			return
		}
		if atomic.CompareAndSwapInt32(&i.sendQuota, q, q+1) {
			return
		}
	}
}

// ResetSendQuota resets the send quota to the maximum allowed value.
func (i *Inflight) ResetSendQuota(n int32) {
	atomic.StoreInt32(&i.sendQuota, n)
	atomic.StoreInt32(&i.maximumSendQuota, n)
}
