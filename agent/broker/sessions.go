package broker

import (
	"strconv"
	"strings"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
	"github.com/mochi-mqtt/server/v2/packets"
)

// sessionStore is mochi's bolt storage hook with restored in-flight messages mended.
//
// mochi v2.7.9's bolt hook stores an outgoing QoS 1/2 message without its packet id
// (OnQosPublish leaves storage.Message.PacketID unset), so after a restart every restored
// in-flight message carries packet id 0: they collapse into one entry, and resending it is
// a malformed PUBLISH that makes a conforming client drop the connection. A back office
// resuming its persistent session then received nothing at all. The packet id is still in
// the record's key ("IFM_" + client id + ":" + packet id), so it is recovered from there.
type sessionStore struct {
	bolt.Hook
}

// StoredInflightMessages returns the stored in-flight messages with their packet ids;
// a record whose key holds no valid packet id cannot be resent and is left out.
func (h *sessionStore) StoredInflightMessages() ([]storage.Message, error) {
	msgs, err := h.Hook.StoredInflightMessages()
	if err != nil {
		return nil, err
	}
	kept := msgs[:0]
	for _, m := range msgs {
		id, ok := inflightPacketID(m.ID)
		if !ok {
			h.Log.Warn("dropping a stored in-flight message without a packet id", "key", m.ID, "client", m.Client)
			continue
		}
		m.PacketID = id
		kept = append(kept, m)
	}
	return kept, nil
}

// inflightPacketID reads the packet id that ends a bolt in-flight key. Client ids may
// contain ':', so the id is what follows the last one.
func inflightPacketID(key string) (uint16, bool) {
	i := strings.LastIndexByte(key, ':')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(key[i+1:], 10, 16)
	if err != nil || n == 0 {
		return 0, false
	}
	return uint16(n), true
}

// OnQosDropped keeps the record of a message cleared from a session that was taken over:
// mochi copied it to the new client under the same packet id (so the record is still that
// message), or the takeover guard redelivers it and stores it again. Deleting it, as the
// bolt hook does, would leave copied messages in flight but no longer on disk.
func (h *sessionStore) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	if cl.IsTakenOver() {
		return
	}
	h.Hook.OnQosDropped(cl, pk)
}

// Inline clients (mochi's own and the state store's responder) live only in this process:
// their subscriptions are made again by the code that owns them at every start. mochi's
// Server.Subscribe reports an inline subscription to the hooks like a network one, so the
// bolt hook stored it under the client id "inline"; after a restart mochi restored it as a
// network subscription of its inline client, and every matching QoS 1 message (each
// terminal heartbeat and ack) was then stored, held in flight for a client that is never
// connected, and written to disk, until the in-flight limit.

// OnSubscribed stores a subscription unless it belongs to an inline client.
func (h *sessionStore) OnSubscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	if cl.Net.Inline {
		return
	}
	h.Hook.OnSubscribed(cl, pk, reasonCodes)
}

// OnUnsubscribed deletes stored subscriptions unless they belong to an inline client.
func (h *sessionStore) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline {
		return
	}
	h.Hook.OnUnsubscribed(cl, pk)
}

// StoredSubscriptions leaves out subscriptions stored for mochi's inline client by earlier
// releases.
func (h *sessionStore) StoredSubscriptions() ([]storage.Subscription, error) {
	subs, err := h.Hook.StoredSubscriptions()
	if err != nil {
		return nil, err
	}
	kept := subs[:0]
	for _, s := range subs {
		if s.Client != mqtt.InlineClientId {
			kept = append(kept, s)
		}
	}
	return kept, nil
}
