package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// sessionStore is the mochi storage hook that keeps kept sessions, their subscriptions and
// in-flight messages, and retained messages in a journal (package journal) in
// DataDir/SessionsDir, written in group commits (groupcommit.go); it stands in for mochi's
// bolt hook, so bbolt is not linked. In-flight records carry their packet id (a restored
// message must come back with the id it was sent with), inline clients are never stored,
// and a session's records go with it when it expires or ends.
type sessionStore struct {
	mqtt.HookBase
	srv         *mqtt.Server
	dir         string   // the journal's directory
	segmentSize int64    // the journal's SegmentSize (0: DefaultSessionsSegmentSize)
	volatile    []string // topic filters whose messages are not stored
	log         *slog.Logger
	health      *healthSignal // told when the journal refuses writes, and when it takes them again
	commit      *committer    // set by Init
	// refusedLog rate-limits the errors logged for what the store refused while the journal
	// is down (each a publisher not acknowledged, a subscription or a connection refused).
	refusedLog rateLimit
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

// legacySessionsFile is the bbolt session file of releases without the journal: not read,
// only warned about.
const legacySessionsFile = "broker-sessions.db"

func (h *sessionStore) ID() string { return "faceagent-sessions" }

func (h *sessionStore) Provides(b byte) bool {
	switch b {
	case mqtt.OnDisconnect, mqtt.OnSubscribed, mqtt.OnUnsubscribed,
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
	if h.segmentSize <= 0 {
		h.segmentSize = DefaultSessionsSegmentSize
	}
	j, err := journal.Open(h.dir, &journal.Options{Logger: h.log, SegmentSize: h.segmentSize, MaxRecordSize: sessionsMaxRecord})
	if err != nil {
		return err
	}
	c := newCommitter(j, h.log)
	c.minDead = h.segmentSize
	c.signal = h.health
	var bounds *restoreBounds
	if h.srv != nil {
		bounds = newRestoreBounds(h.srv.Options.Capabilities)
	}
	if err := c.replay(bounds); err != nil {
		_ = j.Close()
		return fmt.Errorf("sessions journal %s: %w", h.dir, err)
	}
	if bounds != nil && bounds.dropped.any() {
		bounds.report(h.log, h.dir)
		c.compactNow() // what was dropped does not come back at the next start
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

// putWait queues a record and waits for its commit; an error says it is not on disk.
func (h *sessionStore) putWait(key string, v interface{ MarshalBinary() ([]byte, error) }) error {
	b, err := v.MarshalBinary()
	if err != nil {
		h.log.Error("broker: encoding a session record failed", "record", describeKey(key), "error", err)
		return err
	}
	return h.commit.enqueueWait(write{key: key, value: b})
}

// dropClient deletes every record of client id; waits when some are committed. A deletion
// that fails is written when the journal takes writes again (sessionfail.go).
func (h *sessionStore) dropClient(id string) {
	known := h.commit.hasClient(id)
	seq, err := h.commit.enqueue(write{dropClient: id})
	if err == nil && known {
		_ = h.commit.wait(seq)
	}
}

// WaitBeforeConnack stores what a network client's session needs on disk before mochi
// (patched, third_party/mochi/README.md) takes over an earlier connection of the client id
// and writes the CONNACK: the deletion of what an earlier session left when this one
// starts clean (mochi discards that session), and the client record of a session kept
// beyond the connection, in one write, so that both are on disk or neither is. An error
// refuses the connection (CONNACK 0x88), and the earlier session stays as it was, on disk
// too. No record of the new session can be queued before: mochi registers the client only
// after this returns.
func (h *sessionStore) WaitBeforeConnack(cl *mqtt.Client) error {
	if cl.Net.Inline {
		return nil
	}
	ends := sessionEndsWithConnection(cl)
	w := write{}
	if cl.Properties.Clean || ends {
		w.dropClient = cl.ID
	}
	if !ends {
		b, err := clientRecord(cl).MarshalBinary()
		if err != nil {
			return err
		}
		w.key, w.value = clientKey(cl.ID), b
	} else if !h.commit.hasClient(cl.ID) {
		// Nothing to delete and nothing to store: queue the (empty) deletion, not waited for.
		_, _ = h.commit.enqueue(w)
		return nil
	}
	err := h.commit.enqueueWait(w)
	if err != nil {
		h.logRefused("broker: a session could not be stored; its connection is refused (CONNACK 0x88)", cl.ID, err)
	}
	return err
}

// OnWillSent stores the client without the will mochi just sent. If that fails, the will
// stays in the record: a restart may send it again.
func (h *sessionStore) OnWillSent(cl *mqtt.Client, _ packets.Packet) {
	if sessionEndsWithConnection(cl) {
		return
	}
	_ = h.putWait(clientKey(cl.ID), clientRecord(cl))
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
// it would come back after a restart as a network subscription of the inline client, and
// every matching QoS 1 message would be held in flight, and written, for a client that is
// never connected. Nor are the subscriptions of a session that ends with its connection
// stored.

// OnSubscribed stores the subscriptions of a kept session. mochi calls it after it
// subscribed and before it writes the SUBACK, with the SUBACK's reason codes: a filter whose
// record could not be stored gets 0x80 (Unspecified error; MQTT 3.1.1: 0x80 Failure)
// instead of its granted QoS, and mochi's subscription is taken back (the one it replaced,
// if any, is put back as stored), so that the client's view, the broker's and the disk's
// agree. mochi sends no retained messages for a refused filter.
func (h *sessionStore) OnSubscribed(cl *mqtt.Client, pk packets.Packet, reasonCodes []byte) {
	if sessionEndsWithConnection(cl) {
		return
	}
	for i, f := range pk.Filters {
		if i >= len(reasonCodes) || reasonCodes[i] >= packets.ErrUnspecifiedError.Code {
			continue // refused: mochi did not subscribe it
		}
		key := subscriptionKey(cl.ID, f.Filter)
		err := h.putWait(key, &storage.Subscription{
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
		if err != nil {
			reasonCodes[i] = packets.ErrUnspecifiedError.Code
			h.unsubscribeUnstored(cl, f.Filter, h.commit.committedValue(key))
			h.logRefused("broker: a subscription could not be stored; refused (SUBACK 0x80)", cl.ID, err)
		}
	}
}

// unsubscribeUnstored takes back mochi's subscription of cl to filter, whose record could
// not be stored, and puts back the subscription stored before (prev, its record), if any.
func (h *sessionStore) unsubscribeUnstored(cl *mqtt.Client, filter string, prev []byte) {
	if h.srv == nil {
		return
	}
	var old storage.Subscription
	if prev != nil && old.UnmarshalBinary(prev) == nil {
		sub := packets.Subscription{Filter: old.Filter, Identifier: old.Identifier, NoLocal: old.NoLocal,
			RetainHandling: old.RetainHandling, Qos: old.Qos, RetainAsPublished: old.RetainAsPublished}
		h.srv.Topics.Subscribe(cl.ID, sub)
		cl.State.Subscriptions.Add(filter, sub)
		return
	}
	if h.srv.Topics.Unsubscribe(filter, cl.ID) {
		atomic.AddInt64(&h.srv.Info.Subscriptions, -1)
	}
	cl.State.Subscriptions.Delete(filter)
}

// OnUnsubscribed deletes the stored subscriptions. mochi has no reason code to change by
// then: a deletion that failed is written when the journal takes writes again
// (sessionfail.go); a restart before that brings the subscription back.
func (h *sessionStore) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	if sessionEndsWithConnection(cl) {
		return
	}
	for _, f := range pk.Filters {
		_ = h.commit.enqueueWait(write{key: subscriptionKey(cl.ID, f.Filter)})
	}
}

// OnRetainMessage stores a retained message, or deletes it (r == -1). A network client's
// QoS 1/2 PUBLISH is acknowledged only once that is on disk (WaitBeforeAck, as for the
// messages it routes to kept sessions: not acknowledged, and disconnected, if it failed);
// Server().Publish and a will wait for it here. A QoS 0 one is not waited for, nor one from
// PublishDeferred (SyncSessions).
func (h *sessionStore) OnRetainMessage(cl *mqtt.Client, pk packets.Packet, r int64) {
	w := write{key: retainedKey(pk.TopicName)}
	if r != -1 {
		m := messageRecord(cl.ID, pk, 0)
		m.T, m.ID, m.PacketID = storage.RetainedKey, pk.TopicName, 0
		b, err := m.MarshalBinary()
		if err != nil {
			h.log.Error("broker: encoding a retained message failed", "topic", pk.TopicName, "error", err)
			return
		}
		w.value = b
	}
	seq, err := h.commit.enqueue(w)
	if err != nil {
		h.log.Error("broker: a retained message cannot be stored; it is kept in memory only", "topic", pk.TopicName, "error", err)
		return
	}
	from, known := h.publisher(pk)
	switch {
	case known && from.Net.Inline:
		_ = h.commit.wait(seq) // Server().Publish
	case cl.Net.Inline || pk.FixedHeader.Qos == 0:
		// PublishDeferred (SyncSessions), or nobody to acknowledge.
	case pk.PacketID != 0 && known:
		h.waitBeforeAck(from.ID, seq) // a network client's PUBLISH: before its PUBACK
	default:
		_ = h.commit.wait(seq) // a will (no packet id): its client is leaving
	}
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
	_, _ = h.commit.enqueue(write{key: inflightKey(cl.ID, pk.PacketID)})
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
		h.logRefused("broker: messages for kept sessions not stored; their publisher is not acknowledged and is disconnected", cl.ID, err)
	}
	return err
}

// logRefused logs what the store refused to a client, at most once every refusedLogEvery
// (a journal that is down refuses every publisher, subscription and connection that needs
// it; its own failure and recovery are logged by the committer).
func (h *sessionStore) logRefused(msg, client string, err error) {
	if n, ok := h.refusedLog.allow(time.Now()); ok {
		h.log.Error(msg, "client", client, "error", err, "suppressed", n)
	}
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
