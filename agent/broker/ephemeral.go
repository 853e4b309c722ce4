package broker

import (
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Writes the session store leaves out. Writing every QoS 1/2 message sent (OnQosPublish)
// and every acknowledgement (OnQosComplete) for every client would put an fsync in each
// terminal command's path and bound the agent's throughput by the disk (agent
// BenchmarkThroughput64x20ms/agent-persist, docs/benchmarks.md). A session that
// started clean and ends with its connection has nothing to resume after a restart, so
// neither it, its subscriptions nor its messages are written; and mochi's $SYS counters are
// not stored at all (one write a second, which also woke an idle agent: the store does not
// provide OnSysInfoTick).

// sessionEndsWithConnection reports whether cl's session began empty and is discarded at
// disconnect, mochi's own rule (server.go: expire) with a clean start: MQTT 3.1.1 clean
// session, or MQTT 5 clean start with a session expiry of 0 (which DISCONNECT cannot
// raise). Such a session never holds a message restored from the store.
func sessionEndsWithConnection(cl *mqtt.Client) bool {
	if cl.Net.Inline {
		return true // see sessionStore.OnSubscribed
	}
	if !cl.Properties.Clean {
		return false
	}
	return cl.Properties.ProtocolVersion < 5 || cl.Properties.Props.SessionExpiryInterval == 0
}

// OnQosPublish stores an outgoing QoS 1/2 message unless its session ends with the
// connection or its topic is volatile, through the committer (groupcommit.go).
//
// mochi (patched: packet-id spaces, third_party/mochi/README.md) reports through
// OnQosPublish, OnQosComplete and OnQosDropped only the messages the broker sends a client
// (a PUBLISH, and the PUBREL of a QoS 2 one), never its acknowledgements of the client's
// own publishes, whose packet ids are the client's: every in-flight record is keyed by the
// client and a packet id the broker chose, one message at a time.
func (h *sessionStore) OnQosPublish(cl *mqtt.Client, pk packets.Packet, sent int64, _ int) {
	if sessionEndsWithConnection(cl) || h.isVolatile(pk.TopicName) {
		return
	}
	rec, err := inflightRecord(cl, pk, sent)
	if err != nil {
		h.log.Error("broker: encoding an in-flight record failed", "client", cl.ID, "error", err)
		return
	}
	seq, err := h.commit.enqueue(write{key: inflightKey(cl.ID, pk.PacketID), value: rec})
	if err != nil {
		return
	}
	switch from, known := h.publisher(pk); {
	case pk.FixedHeader.Type == packets.Publish && pk.FixedHeader.Dup:
		// A resumed session's resend (mochi's ResendInflightMessages, one message after the
		// other before the new connection is read): the record was committed when the
		// message was routed, so it is not waited for; waiting would cost a commit per
		// message.
	case pk.Origin == h.responder && h.responder != "":
		// A state store answer, for the requester's kept session (it subscribes to its
		// response topic): its request's PUBACK waits for it. The service routes it on
		// the requester's read loop before mochi flushes that PUBACK, or, for a change of
		// a persistent key, from the store's persistence goroutine before the service's
		// WaitBeforeAck returns (answerwait.go).
		h.waitBeforeAck(cl.ID, seq)
	case known && from.Net.Inline:
		// The inline publisher takes Publish's return as "stored": the agent marks a
		// result reported then.
		_ = h.commit.wait(seq)
	case known:
		// A network publisher's PUBACK waits for it, once the message is routed to all
		// (WaitBeforeAck).
		h.waitBeforeAck(pk.Origin, seq)
	}
}

// OnQosComplete deletes a delivered message's record; a session that ends with the
// connection has none (OnQosPublish did not write it).
func (h *sessionStore) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	if sessionEndsWithConnection(cl) {
		return
	}
	h.deleteInflight(cl, pk)
}
