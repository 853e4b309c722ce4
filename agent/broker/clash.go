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
// client's send quota shrinks by one for good. The guard copies such a message when the
// PUBLISH is read (OnPacketRead, before mochi processes it) and puts it back once mochi is
// done with the packet (OnPacketProcessed), unless the id is still taken (a QoS 2 PUBREC
// holds it until PUBREL: that case is left as mochi has it).
type clashGuard struct {
	mqtt.HookBase
	srv *mqtt.Server

	mu      sync.Mutex
	stashed map[*mqtt.Client]packets.Packet // the message taken out by the publish being processed
}

func newClashGuard(srv *mqtt.Server) *clashGuard {
	return &clashGuard{srv: srv, stashed: make(map[*mqtt.Client]packets.Packet)}
}

func (g *clashGuard) ID() string { return "faceagent-inflight-clash" }

func (g *clashGuard) Provides(b byte) bool {
	return b == mqtt.OnPacketRead || b == mqtt.OnPacketProcessed || b == mqtt.OnDisconnect
}

// OnPacketRead copies the outgoing message an incoming QoS 1/2 PUBLISH is about to displace.
func (g *clashGuard) OnPacketRead(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || pk.FixedHeader.Type != packets.Publish || pk.FixedHeader.Qos == 0 {
		return pk, nil
	}
	if held, ok := cl.State.Inflight.Get(pk.PacketID); ok && held.FixedHeader.Type == packets.Publish {
		g.mu.Lock()
		g.stashed[cl] = held.Copy(true)
		g.mu.Unlock()
	}
	return pk, nil
}

// OnPacketProcessed puts the displaced message back once its id is free again.
func (g *clashGuard) OnPacketProcessed(cl *mqtt.Client, pk packets.Packet, _ error) {
	if pk.FixedHeader.Type != packets.Publish {
		return
	}
	g.mu.Lock()
	held, ok := g.stashed[cl]
	delete(g.stashed, cl)
	g.mu.Unlock()
	if !ok || held.PacketID != pk.PacketID {
		return
	}
	if _, taken := cl.State.Inflight.Get(held.PacketID); taken {
		return // a QoS 2 PUBREC, or (after the ids wrapped) a new message
	}
	if cl.State.Inflight.Set(held) {
		atomic.AddInt64(&g.srv.Info.Inflight, 1)
	}
}

// OnDisconnect forgets a copy whose PUBLISH never reached OnPacketProcessed (refused early).
func (g *clashGuard) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	g.mu.Lock()
	delete(g.stashed, cl)
	g.mu.Unlock()
}
