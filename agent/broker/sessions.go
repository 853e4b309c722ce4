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
	srv      *mqtt.Server
	volatile []string   // topic filters whose messages are not stored
	commit   *committer // nil: the bolt hook writes each record itself
}

// Init opens the database and starts the committer of in-flight records.
func (h *sessionStore) Init(config any) error {
	if err := h.Hook.Init(config); err != nil {
		return err
	}
	db, err := boltDB(&h.Hook)
	if err != nil {
		h.Log.Warn("broker: in-flight records are written one transaction each", "error", err)
		return nil
	}
	h.commit = newCommitter(db, nil, h.Log)
	return nil
}

// Stop commits the queued in-flight records, then closes the database.
func (h *sessionStore) Stop() error {
	if h.commit != nil {
		h.commit.close()
	}
	return h.Hook.Stop()
}

// sync waits until every in-flight record queued so far is committed.
func (h *sessionStore) sync() error {
	if h.commit == nil {
		return nil
	}
	return h.commit.sync()
}

// inflightKey is the bolt hook's key of an in-flight record.
func inflightKey(cl *mqtt.Client, pk packets.Packet) string {
	return storage.InflightKey + "_" + cl.ID + ":" + pk.FormatID()
}

// inflightRecord is the bolt hook's record of an in-flight message (bolt.Hook.OnQosPublish),
// with the packet id it leaves out.
func inflightRecord(cl *mqtt.Client, pk packets.Packet, sent int64) []byte {
	props := pk.Properties.Copy(false)
	m := &storage.Message{
		ID:          inflightKey(cl, pk),
		T:           storage.InflightKey,
		Client:      cl.ID,
		Origin:      pk.Origin,
		PacketID:    pk.PacketID,
		FixedHeader: pk.FixedHeader,
		TopicName:   pk.TopicName,
		Payload:     pk.Payload,
		Sent:        sent,
		Created:     pk.Created,
		Properties: storage.MessageProperties{
			PayloadFormat:          props.PayloadFormat,
			MessageExpiryInterval:  props.MessageExpiryInterval,
			ContentType:            props.ContentType,
			ResponseTopic:          props.ResponseTopic,
			CorrelationData:        props.CorrelationData,
			SubscriptionIdentifier: props.SubscriptionIdentifier,
			TopicAlias:             props.TopicAlias,
			User:                   props.User,
		},
	}
	b, _ := m.MarshalBinary()
	return b
}

// deleteInflight removes pk's record (queued behind its put when the committer runs).
func (h *sessionStore) deleteInflight(cl *mqtt.Client, pk packets.Packet) {
	if h.commit == nil {
		h.Hook.OnQosComplete(cl, pk)
		return
	}
	h.commit.enqueue(write{key: inflightKey(cl, pk)})
}

// fromInline reports whether pk was published in this process by a registered inline
// client (Server.Publish): its publisher gets no PUBACK but Publish's return. The clients
// of Broker.PublishDeferred and of the state store's responses are not registered.
func (h *sessionStore) fromInline(pk packets.Packet) bool {
	if h.srv == nil {
		return false
	}
	o, ok := h.srv.Clients.Get(pk.Origin)
	return ok && o.Net.Inline
}

// isVolatile reports whether topic matches Options.VolatileTopics.
func (h *sessionStore) isVolatile(topic string) bool {
	for _, f := range h.volatile {
		if topicMatches(f, topic) {
			return true
		}
	}
	return false
}

// topicMatches reports whether an MQTT topic filter (with + and #) matches topic.
func topicMatches(filter, topic string) bool {
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			return true
		}
		tl, trest, tmore := strings.Cut(topic, "/")
		if fl != "+" && fl != tl {
			return false
		}
		if !fmore || !tmore {
			return !fmore && !tmore || (fmore && frest == "#")
		}
		filter, topic = frest, trest
	}
}

// StoredInflightMessages returns the stored in-flight messages with their packet ids;
// a record whose key holds no valid packet id cannot be resent and is left out.
func (h *sessionStore) StoredInflightMessages() ([]storage.Message, error) {
	msgs, err := h.Hook.StoredInflightMessages()
	if err != nil {
		return nil, err
	}
	if h.commit != nil {
		h.commit.mu.Lock()
		for _, m := range msgs {
			h.commit.onDisk[m.ID] = struct{}{}
		}
		h.commit.mu.Unlock()
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
	h.deleteInflight(cl, pk)
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
