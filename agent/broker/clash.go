package broker

import (
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// clashGuard keeps an outgoing message that mochi drops when the client publishes with the
// same packet id.
//
// mochi v2.7.9 keeps a client's own QoS 1/2 publishes and the messages sent to that client
// in one in-flight set keyed by packet id, although each side numbers its packets on its
// own. When a client publishes with QoS 1 using the id of a message still in flight to it,
// processPublish deletes that message from the set ("[MQTT-4.3.2-5]") and uses the id for
// its PUBACK. The message is then never resent (a back office with a kept session that
// reconnects misses that result), and the client's PUBACK for it finds nothing, so the
// client's send quota shrinks by one for good. A SUBSCRIBE or UNSUBSCRIBE under such an id
// is refused (0x91), typically a back office subscribing again as it resumes a session with
// results waiting (both sides number from 1). The guard copies such a message when the
// packet is read (OnPacketRead, before mochi processes it), takes it out of the set for a
// SUBSCRIBE or UNSUBSCRIBE, and puts it back once mochi is done with the packet
// (OnPacketProcessed), unless the id is taken by then (a QoS 2 PUBREC holds it until
// PUBREL: that case stays as mochi has it).
type clashGuard struct {
	mqtt.HookBase
	srv      *mqtt.Server
	takeover *takeoverGuard // hands over a message put back after its session moved on

	mu      sync.Mutex
	stashed map[*mqtt.Client]*stash // the message the packet being processed takes out
}

// stash is a displaced outgoing message and whether mochi counted its removal in
// Info.Inflight (it does when a PUBLISH displaces it; the guard's own removal does not).
type stash struct {
	pk      packets.Packet
	counted bool
}

func newClashGuard(srv *mqtt.Server, takeover *takeoverGuard) *clashGuard {
	return &clashGuard{srv: srv, takeover: takeover, stashed: make(map[*mqtt.Client]*stash)}
}

func (g *clashGuard) ID() string { return "faceagent-inflight-clash" }

func (g *clashGuard) Provides(b byte) bool {
	switch b {
	case mqtt.OnPacketRead, mqtt.OnQosComplete, mqtt.OnPacketProcessed, mqtt.OnDisconnect:
		return true
	}
	return false
}

// outgoing reports whether pk is the broker's side of a message it sends: a PUBLISH, or the
// PUBREL that follows a QoS 2 one.
func outgoing(fh packets.FixedHeader) bool {
	return fh.Type == packets.Publish || fh.Type == packets.Pubrel
}

// clashes reports whether an incoming packet of this type takes its id from the client's
// own numbering in a way mochi checks against the in-flight set.
func clashes(fh packets.FixedHeader) bool {
	switch fh.Type {
	case packets.Publish:
		return fh.Qos > 0
	case packets.Subscribe, packets.Unsubscribe:
		return true
	}
	return false
}

// OnPacketRead copies the outgoing message an incoming packet is about to displace (a QoS
// 1/2 PUBLISH) or be refused for (a SUBSCRIBE or UNSUBSCRIBE: mochi answers 0x91 "packet
// identifier in use"; the message is taken out of the set until mochi is done).
func (g *clashGuard) OnPacketRead(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if !cl.Net.Inline && clashes(pk.FixedHeader) {
		g.stashDisplaced(cl, pk.FixedHeader.Type, pk.PacketID)
	}
	return pk, nil
}

// stashDisplaced is OnPacketRead's work for a packet that may clash: a call of its own, so
// that the packets it copies are not in the frame of every client's read.
//
//go:noinline
func (g *clashGuard) stashDisplaced(cl *mqtt.Client, typ byte, id uint16) {
	held, ok := cl.State.Inflight.Get(id)
	if !ok || !outgoing(held.FixedHeader) {
		return
	}
	g.mu.Lock()
	g.stashed[cl] = &stash{pk: held.Copy(true), counted: typ == packets.Publish}
	g.mu.Unlock()
	if typ != packets.Publish {
		cl.State.Inflight.Delete(id) // back in OnPacketProcessed, or OnDisconnect
	}
}

// OnQosComplete puts a message displaced by a QoS 1 PUBLISH back as soon as mochi has
// released the id (its PUBACK is written and out of the set): the client may have its
// PUBACK, drop the connection and resume the session meanwhile. Only that PUBLISH's own
// PUBACK does: mochi (patched, PUBACK after storing) writes the acknowledgements it held
// for the client's earlier PUBLISHes first, while the displacing one's still holds the id.
func (g *clashGuard) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	if inboundCompletion(&pk) {
		g.restoreID(cl, pk.PacketID)
	}
}

// OnPacketProcessed puts the displaced message back once its id is free again.
func (g *clashGuard) OnPacketProcessed(cl *mqtt.Client, pk packets.Packet, _ error) {
	if !cl.Net.Inline && clashes(pk.FixedHeader) { // inline clients' packets stash nothing (OnPacketRead)
		g.restore(cl)
	}
}

// OnDisconnect puts back a message whose packet mochi refused before OnPacketProcessed (the
// connection ends then): a kept session resends it.
func (g *clashGuard) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	g.restore(cl)
}

// restore puts back the message stashed for cl, if there is one.
func (g *clashGuard) restore(cl *mqtt.Client) {
	g.mu.Lock()
	st, ok := g.stashed[cl]
	delete(g.stashed, cl)
	g.mu.Unlock()
	if ok {
		g.putBack(cl, st)
	}
}

// restoreID puts back the message stashed for cl if its packet id is id.
func (g *clashGuard) restoreID(cl *mqtt.Client, id uint16) {
	g.mu.Lock()
	st, ok := g.stashed[cl]
	if ok && st.pk.PacketID != id {
		ok = false
	}
	if ok {
		delete(g.stashed, cl)
	}
	g.mu.Unlock()
	if ok {
		g.putBack(cl, st)
	}
}

// putBack is restore's work once a message was stashed: a call of its own so that the
// packets it copies are not in restore's frame, which is on the stack of every client's
// QoS 1 publish (under everything the agent does with it). The map holds pointers for the
// same reason.
//
//go:noinline
func (g *clashGuard) putBack(cl *mqtt.Client, st *stash) {
	if cl.IsTakenOver() {
		// The session resumed on a new connection that copied the set without it.
		if st.pk.FixedHeader.Type == packets.Publish {
			g.takeover.rescue(cl, st.pk)
		}
		return
	}
	if _, taken := cl.State.Inflight.Get(st.pk.PacketID); taken {
		return // a QoS 2 PUBREC, or (after the ids wrapped) a new message
	}
	if cl.State.Inflight.Set(st.pk) && st.counted {
		atomic.AddInt64(&g.srv.Info.Inflight, 1)
	}
}
