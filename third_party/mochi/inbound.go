// SPDX-License-Identifier: MIT

package mqtt

import (
	"sync"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Inbound is the server's side of a client's own QoS 1/2 publishes, keyed by the packet ids
// the client chose: the PUBACK or PUBREC held until the message is routed and stored
// (AckWaiter), and a QoS 2 flow from its PUBREC until the client's PUBREL.
//
// faceagent patch (packet-id spaces): upstream kept these in the client's Inflight set,
// with the messages the server sends the client, under one key, although MQTT numbers the
// two directions independently [MQTT-2.2.1]: a client's PUBLISH ids and the server's
// PUBLISH ids to that client are unrelated. An acknowledgement (held until routing was
// durable, or a PUBREC until PUBREL) overwrote or displaced a message in flight to the
// client under the same id: that message was never sent again, the client's PUBACK for it
// found nothing and the send quota it took never came back (a request/response client with
// several requests in flight got no response after max-in-flight of them), and the session
// store kept its record for good. Inflight now holds only the messages the server sends.
//
// Bounds: a flow that took receive quota is one of at most the server's Receive Maximum;
// the flows a resumed session carries over (see carry) took none, and a client that never
// sends PUBREL can hold at most one per packet id (65,535 × 24 bytes; their PUBREC packets
// are released once written).
type Inbound struct {
	mu    sync.Mutex
	flows map[uint16]inboundFlow // made by the first put
}

// inboundFlow is one of the client's QoS 1/2 publishes that the server has not finished.
type inboundFlow struct {
	ack     *packets.Packet // the PUBACK or PUBREC to write (from inflightPackets); nil once written
	qos2    bool            // a PUBREC: the flow ends with the client's PUBREL, not when it is written
	charged bool            // took a unit of the connection's receive quota (Inflight.receiveQuota)
	taken   bool            // a QoS 2 message whose PUBREC was written once: the server has it
}

// NewInbound returns an empty set of inbound flows.
func NewInbound() *Inbound {
	return &Inbound{}
}

// Len returns how many of the client's QoS 1/2 publishes are not finished.
func (in *Inbound) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.flows)
}

// Has reports whether the client's QoS 1/2 publish under id is not finished: its PUBACK or
// PUBREC is not written yet, or its QoS 2 flow waits for PUBREL. A SUBSCRIBE or
// UNSUBSCRIBE of the client's under such an id is refused [MQTT-2.2.1-3].
func (in *Inbound) Has(id uint16) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	_, ok := in.flows[id]
	return ok
}

// inboundState is what the server holds under one of the client's packet ids.
type inboundState byte

const (
	inboundNone   inboundState = iota // nothing
	inboundPuback                     // a PUBACK not written yet
	inboundQos2                       // a QoS 2 flow: its PUBREC not written yet, or waiting for PUBREL
)

// state returns what is held under id.
func (in *Inbound) state(id uint16) inboundState {
	in.mu.Lock()
	defer in.mu.Unlock()
	f, ok := in.flows[id]
	switch {
	case !ok:
		return inboundNone
	case f.qos2:
		return inboundQos2
	}
	return inboundPuback
}

// put holds ack (a PUBACK or PUBREC) to be written for the client's publish under
// ack.PacketID and reports whether that starts a flow, which the caller charges to the
// receive quota; a flow already there (the client published again under an id it had no
// acknowledgement for) takes the new acknowledgement and keeps its charge.
func (in *Inbound) put(ack *packets.Packet) (started bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.flows == nil {
		in.flows = make(map[uint16]inboundFlow)
	}
	f, ok := in.flows[ack.PacketID]
	if f.ack == nil {
		f.ack = inflightPackets.Get().(*packets.Packet)
	}
	*f.ack = *ack
	f.qos2 = ack.FixedHeader.Type == packets.Pubrec
	f.charged = f.charged || !ok
	in.flows[ack.PacketID] = f
	return !ok
}

// pending copies the acknowledgement to write under id to dst and reports whether there is
// one (dst is left alone when not).
func (in *Inbound) pending(id uint16, dst *packets.Packet) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	f, ok := in.flows[id]
	if !ok || f.ack == nil {
		return false
	}
	*dst = *f.ack
	return true
}

// written records that the acknowledgement pending under id was written: a PUBACK ends its
// flow, a PUBREC leaves it waiting for PUBREL. It reports whether a flow ended that took
// receive quota, which the caller gives back.
func (in *Inbound) written(id uint16) (release bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	f, ok := in.flows[id]
	if !ok || f.ack == nil {
		return false
	}
	releaseInflight(f.ack)
	f.ack = nil
	if f.qos2 {
		f.taken = true
		in.flows[id] = f
		return false
	}
	delete(in.flows, id)
	return f.charged
}

// drop ends the flow under id if its acknowledgement is not written yet (its message was
// not stored: AckWaiter), and reports whether it took receive quota. A QoS 2 flow whose
// PUBREC was written before (the client sent its PUBLISH again) only loses the PUBREC to
// write again: its message was taken then, and the flow waits for PUBREL.
func (in *Inbound) drop(id uint16) (release bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	f, ok := in.flows[id]
	if !ok || f.ack == nil {
		return false
	}
	releaseInflight(f.ack)
	if f.taken {
		f.ack = nil
		in.flows[id] = f
		return false
	}
	delete(in.flows, id)
	return f.charged
}

// end ends the flow under id (the client's PUBREL) and reports whether it took receive
// quota.
func (in *Inbound) end(id uint16) (release bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	f, ok := in.flows[id]
	if !ok {
		return false
	}
	if f.ack != nil {
		releaseInflight(f.ack)
	}
	delete(in.flows, id)
	return f.charged
}

// rearm holds ack (a PUBREC) to be written again for a QoS 2 flow waiting for PUBREL, whose
// publish the client sent again, and reports whether it did: not when the flow's PUBREC is
// still to be written (it answers both), nor for another kind of flow.
func (in *Inbound) rearm(ack *packets.Packet) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	f, ok := in.flows[ack.PacketID]
	if !ok || !f.qos2 || f.ack != nil {
		return false
	}
	f.ack = inflightPackets.Get().(*packets.Packet)
	*f.ack = *ack
	in.flows[ack.PacketID] = f
	return true
}

// carry returns what a session resumed on a new connection keeps of in: its QoS 2 flows,
// each waiting for the client's PUBREL, none charged to the new connection's receive quota
// (the client does not count them against its send quota either). The session state of
// MQTT 5 section 4.1 holds them: a client that had the PUBREC sends PUBREL, which completes
// the flow; one that had not sends the PUBLISH again, which is answered with a PUBREC and
// not delivered a second time [MQTT-4.3.3-10]. A PUBACK not yet written is not carried: the
// client sends that PUBLISH again (QoS 1: at least once), and its new PUBACK follows the
// storage of the copy routed on the new connection.
func (in *Inbound) carry() *Inbound {
	c := NewInbound()
	in.mu.Lock()
	defer in.mu.Unlock()
	for id, f := range in.flows {
		if !f.qos2 {
			continue
		}
		if c.flows == nil {
			c.flows = make(map[uint16]inboundFlow)
		}
		c.flows[id] = inboundFlow{qos2: true, taken: true}
	}
	return c
}
