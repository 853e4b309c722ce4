package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// sessionStore is the mochi storage hook that keeps kept sessions, their subscriptions and
// in-flight messages, and retained messages in a journal (package journal) in
// DataDir/SessionsDir, written in group commits (groupcommit.go). It replaced mochi's bolt
// hook (bbolt: 138 KB of the binary), and with it the mending that hook needed:
// in-flight records carry their packet id (the bolt hook left it out, so every restored
// message came back with id 0), inline clients are never stored, and a session's records
// go with it when it expires or ends.
type sessionStore struct {
	mqtt.HookBase
	srv      *mqtt.Server
	dir      string   // the journal's directory
	volatile []string // topic filters whose messages are not stored
	log      *slog.Logger
	commit   *committer // set by Init
	// responder is the client id of the state store's responder (set before Start): its
	// messages are answers, whose records the requester's PUBACK waits for (OnQosPublish).
	responder string

	// beforeAck holds, per network publisher (client id), the last record its messages
	// queued while being routed: WaitBeforeAck waits for it, so mochi (patched: PUBACK
	// after routing) acknowledges a QoS 1/2 message only once it is on disk for every kept
	// session it went to.
	ackMu     sync.Mutex
	beforeAck map[string]uint64
}

// legacySessionsFile is the bbolt file of releases before the journal: no longer read.
const legacySessionsFile = "broker-sessions.db"

func (h *sessionStore) ID() string { return "faceagent-sessions" }

func (h *sessionStore) Provides(b byte) bool {
	switch b {
	case mqtt.OnSessionEstablish, mqtt.OnSessionEstablished, mqtt.OnDisconnect, mqtt.OnSubscribed, mqtt.OnUnsubscribed,
		mqtt.OnRetainMessage, mqtt.OnWillSent, mqtt.OnQosPublish, mqtt.OnQosComplete,
		mqtt.OnQosDropped, mqtt.OnClientExpired, mqtt.OnRetainedExpired,
		mqtt.StoredClients, mqtt.StoredInflightMessages, mqtt.StoredRetainedMessages,
		mqtt.StoredSubscriptions:
		return true
	}
	return false
}

// Init opens the journal, replays it and starts the committer.
func (h *sessionStore) Init(any) error {
	if h.log == nil {
		h.log = h.Log
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	legacy := filepath.Join(filepath.Dir(h.dir), legacySessionsFile)
	if _, err := os.Stat(legacy); err == nil {
		h.log.Warn("broker: a sessions file of an earlier release is no longer read; sessions are kept in "+h.dir+" now (the old file may be deleted)", "file", legacy)
	}
	j, err := journal.Open(h.dir, &journal.Options{Logger: h.log})
	if err != nil {
		return err
	}
	c := newCommitter(j, h.log)
	if err := c.replay(); err != nil {
		_ = j.Close()
		return fmt.Errorf("sessions journal %s: %w", h.dir, err)
	}
	c.start()
	h.commit = c
	return nil
}

// Stop commits what is queued and closes the journal.
func (h *sessionStore) Stop() error {
	if h.commit == nil {
		return nil
	}
	c := h.commit
	return c.close()
}

// sync waits until every record queued so far is committed.
func (h *sessionStore) sync() error {
	if h.commit == nil {
		return nil
	}
	return h.commit.sync()
}

// put queues a record and waits for it; errors are logged by the committer.
func (h *sessionStore) putWait(key string, v interface{ MarshalBinary() ([]byte, error) }) {
	b, err := v.MarshalBinary()
	if err != nil {
		h.log.Error("broker: encoding a session record failed", "record", describeKey(key), "error", err)
		return
	}
	_ = h.commit.enqueueWait(write{key: key, value: b})
}

// dropClient deletes every record of client id; waits when some are committed.
func (h *sessionStore) dropClient(id string) {
	known := h.commit.hasClient(id)
	seq, ok := h.commit.enqueue(write{dropClient: id})
	if ok && known {
		_ = h.commit.wait(seq)
	}
}

// OnSessionEstablish deletes what an earlier session of the client id left when this one
// starts clean (mochi discards that session): before mochi takes it over and registers
// the new client, so no record of the new session can be queued before the deletion.
func (h *sessionStore) OnSessionEstablish(cl *mqtt.Client, _ packets.Packet) {
	if !cl.Net.Inline && (cl.Properties.Clean || sessionEndsWithConnection(cl)) {
		h.dropClient(cl.ID)
	}
}

// OnSessionEstablished stores the client of a kept session (not one that ends with its
// connection).
func (h *sessionStore) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	if sessionEndsWithConnection(cl) {
		return
	}
	h.putWait(clientKey(cl.ID), clientRecord(cl))
}

// OnWillSent stores the client without the will mochi just sent.
func (h *sessionStore) OnWillSent(cl *mqtt.Client, _ packets.Packet) {
	if sessionEndsWithConnection(cl) {
		return
	}
	h.putWait(clientKey(cl.ID), clientRecord(cl))
}

// OnDisconnect deletes a session that ends now (expire), unless it was taken over: its
// records are the new connection's then.
func (h *sessionStore) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if !expire || cl.Net.Inline || cl.IsTakenOver() || errors.Is(cl.StopCause(), packets.ErrSessionTakenOver) {
		return
	}
	h.forgetPublisher(cl.ID)
	h.dropClient(cl.ID)
}

// OnClientExpired deletes an expired session's client, subscriptions and messages.
func (h *sessionStore) OnClientExpired(cl *mqtt.Client) {
	h.forgetPublisher(cl.ID)
	h.dropClient(cl.ID)
}

// clientRecord is mochi's stored form of cl (as the bolt hook made it).
func clientRecord(cl *mqtt.Client) *storage.Client {
	props := cl.Properties.Props.Copy(false)
	return &storage.Client{
		ID:              cl.ID,
		T:               storage.ClientKey,
		Remote:          cl.Net.Remote,
		Listener:        cl.Net.Listener,
		Username:        cl.Properties.Username,
		Clean:           cl.Properties.Clean,
		ProtocolVersion: cl.Properties.ProtocolVersion,
		Properties: storage.ClientProperties{
			SessionExpiryInterval:     props.SessionExpiryInterval,
			SessionExpiryIntervalFlag: props.SessionExpiryIntervalFlag,
			AuthenticationMethod:      props.AuthenticationMethod,
			AuthenticationData:        props.AuthenticationData,
			RequestProblemInfo:        props.RequestProblemInfo,
			RequestProblemInfoFlag:    props.RequestProblemInfoFlag,
			RequestResponseInfo:       props.RequestResponseInfo,
			ReceiveMaximum:            props.ReceiveMaximum,
			TopicAliasMaximum:         props.TopicAliasMaximum,
			User:                      props.User,
			MaximumPacketSize:         props.MaximumPacketSize,
		},
		Will: storage.ClientWill(cl.Properties.Will),
	}
}

// Inline clients (mochi's own and the state store's responder) live only in this process:
// their subscriptions are made again by the code that owns them at every start. mochi's
// Server.Subscribe reports an inline subscription to the hooks like a network one; stored,
// it came back after a restart as a network subscription of the inline client, and every
// matching QoS 1 message was then held in flight, and written, for a client that is never
// connected. Nor are the subscriptions of a session that ends with its connection stored.

// OnSubscribed stores the subscriptions of a kept session.
func (h *sessionStore) OnSubscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	if sessionEndsWithConnection(cl) {
		return
	}
	for i, f := range pk.Filters {
		if i >= len(reasonCodes) || reasonCodes[i] >= packets.ErrUnspecifiedError.Code {
			continue // refused: mochi did not subscribe it
		}
		h.putWait(subscriptionKey(cl.ID, f.Filter), &storage.Subscription{
			ID:                cl.ID + ":" + f.Filter,
			T:                 storage.SubscriptionKey,
			Client:            cl.ID,
			Qos:               reasonCodes[i],
			Filter:            f.Filter,
			Identifier:        f.Identifier,
			NoLocal:           f.NoLocal,
			RetainHandling:    f.RetainHandling,
			RetainAsPublished: f.RetainAsPublished,
		})
	}
}

// OnUnsubscribed deletes the stored subscriptions.
func (h *sessionStore) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	if sessionEndsWithConnection(cl) {
		return
	}
	for _, f := range pk.Filters {
		_ = h.commit.enqueueWait(write{key: subscriptionKey(cl.ID, f.Filter)})
	}
}

// OnRetainMessage stores a retained message, or deletes it (r == -1).
func (h *sessionStore) OnRetainMessage(cl *mqtt.Client, pk packets.Packet, r int64) {
	if r == -1 {
		_ = h.commit.enqueueWait(write{key: retainedKey(pk.TopicName)})
		return
	}
	m := messageRecord(cl.ID, pk, 0)
	m.T, m.ID, m.PacketID = storage.RetainedKey, pk.TopicName, 0
	h.putWait(retainedKey(pk.TopicName), m)
}

// OnRetainedExpired deletes an expired retained message.
func (h *sessionStore) OnRetainedExpired(topic string) {
	_ = h.commit.enqueueWait(write{key: retainedKey(topic)})
}

// messageRecord is mochi's stored form of pk for client, with its packet id.
func messageRecord(client string, pk packets.Packet, sent int64) *storage.Message {
	props := pk.Properties.Copy(false)
	return &storage.Message{
		ID:          fmt.Sprintf("%s:%d", client, pk.PacketID),
		T:           storage.InflightKey,
		Client:      client,
		Origin:      pk.Origin,
		PacketID:    pk.PacketID,
		FixedHeader: pk.FixedHeader,
		TopicName:   pk.TopicName,
		Payload:     pk.Payload,
		Sent:        sent,
		Created:     pk.Created,
		Properties: storage.MessageProperties{
			PayloadFormat:          props.PayloadFormat,
			PayloadFormatFlag:      props.PayloadFormatFlag,
			MessageExpiryInterval:  props.MessageExpiryInterval,
			ContentType:            props.ContentType,
			ResponseTopic:          props.ResponseTopic,
			CorrelationData:        props.CorrelationData,
			SubscriptionIdentifier: props.SubscriptionIdentifier,
			TopicAlias:             props.TopicAlias,
			User:                   props.User,
		},
	}
}

// inflightRecord encodes pk, in flight to cl, for the journal.
func inflightRecord(cl *mqtt.Client, pk packets.Packet, sent int64) ([]byte, error) {
	return messageRecord(cl.ID, pk, sent).MarshalBinary()
}

// deleteInflight removes pk's record (queued behind its put).
func (h *sessionStore) deleteInflight(cl *mqtt.Client, pk packets.Packet) {
	h.commit.enqueue(write{key: inflightKey(cl.ID, pk.PacketID)})
}

// publisher returns the registered client that published pk: a network client, or the
// inline client of Server.Publish (whose publisher gets no PUBACK but Publish's return).
// The clients of Broker.PublishDeferred and of the state store's responses are not
// registered (OnQosPublish tells the responder by its id).
func (h *sessionStore) publisher(pk packets.Packet) (*mqtt.Client, bool) {
	if h.srv == nil {
		return nil, false
	}
	return h.srv.Clients.Get(pk.Origin)
}

// waitBeforeAck makes the next WaitBeforeAck of the network client id wait for record seq.
func (h *sessionStore) waitBeforeAck(id string, seq uint64) {
	h.ackMu.Lock()
	defer h.ackMu.Unlock()
	if h.beforeAck == nil {
		h.beforeAck = make(map[string]uint64)
	}
	h.beforeAck[id] = max(h.beforeAck[id], seq)
}

// forgetPublisher drops what a client whose session ended had left to wait for.
func (h *sessionStore) forgetPublisher(id string) {
	h.ackMu.Lock()
	delete(h.beforeAck, id)
	h.ackMu.Unlock()
}

// WaitBeforeAck returns once the records that routing cl's QoS 1/2 messages queued (one
// per kept session each went to, OnQosPublish) are committed. mochi (patched,
// third_party/mochi/README.md) calls it on cl's read loop before it writes the PUBACKs or
// PUBRECs of the messages it routed since it last wrote some: a publisher to kept
// sessions is acknowledged once its messages are on disk, with one group commit for the
// messages it had in flight that were read together.
//
// If the commit failed, it returns the error: mochi then writes none of the held
// acknowledgements and disconnects the publisher, which sends the messages again (the
// journal may have recovered by then, or the publisher keeps them).
//
// The record is forgotten only once committed, and only if no later one came meanwhile:
// two connections share a client id during a session takeover (the old one's read loop
// may still be flushing while the new one's messages are routed), and the old one's wait
// must not take the new one's record away from it.
func (h *sessionStore) WaitBeforeAck(cl *mqtt.Client) error {
	h.ackMu.Lock()
	seq, ok := h.beforeAck[cl.ID]
	h.ackMu.Unlock()
	if !ok {
		return nil
	}
	err := h.commit.wait(seq)
	h.ackMu.Lock()
	if h.beforeAck[cl.ID] == seq {
		delete(h.beforeAck, cl.ID)
	}
	h.ackMu.Unlock()
	if err != nil {
		h.log.Error("broker: messages for kept sessions not stored; their publisher is not acknowledged and is disconnected", "client", cl.ID, "error", err)
	}
	return err
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

// OnQosDropped keeps the record of a message cleared from a session that was taken over:
// mochi copied it to the new client under the same packet id (so the record is still that
// message), or the takeover guard redelivers it and stores it again. Deleting it would
// leave copied messages in flight but no longer on disk.
func (h *sessionStore) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	if cl.IsTakenOver() || sessionEndsWithConnection(cl) {
		return
	}
	h.deleteInflight(cl, pk)
}

// StoredClients returns the kept sessions' clients.
func (h *sessionStore) StoredClients() ([]storage.Client, error) {
	return decodeRecords[storage.Client](h.commit, kindClient, "client")
}

// StoredSubscriptions returns the kept sessions' subscriptions.
func (h *sessionStore) StoredSubscriptions() ([]storage.Subscription, error) {
	return decodeRecords[storage.Subscription](h.commit, kindSubscription, "subscription")
}

// StoredInflightMessages returns the messages in flight, with their packet ids.
func (h *sessionStore) StoredInflightMessages() ([]storage.Message, error) {
	all, err := decodeRecords[storage.Message](h.commit, kindInflight, "message")
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, m := range all {
		if m.PacketID == 0 {
			h.log.Warn("broker: dropping a stored in-flight message without a packet id", "client", m.Client)
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

// StoredRetainedMessages returns the retained messages.
func (h *sessionStore) StoredRetainedMessages() ([]storage.Message, error) {
	return decodeRecords[storage.Message](h.commit, kindRetained, "message")
}

// decodeRecords decodes every live journal record of kind, in key order; what names the
// record in errors.
func decodeRecords[T any, PT interface {
	*T
	UnmarshalBinary([]byte) error
}](c *committer, kind byte, what string) ([]T, error) {
	var out []T
	for _, v := range c.records(kind) {
		var x T
		if err := PT(&x).UnmarshalBinary(v); err != nil {
			return nil, fmt.Errorf("sessions journal: %s record: %w", what, err)
		}
		out = append(out, x)
	}
	return out, nil
}
