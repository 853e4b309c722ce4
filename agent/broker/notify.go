package broker

import (
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/internal/sswire"
)

// notifyQueueLen bounds the notifications waiting for one connection, and
// Options.MaxPendingWriteBytes the bytes of those waiting and those sent but not
// acknowledged (they are bytes queued for writing to it, as mochi's queue of
// pending writes holds; statestore.DefaultMaxQueuedBytes without that bound). A
// client that falls this far behind is disconnected (it re-registers when it
// reconnects) rather than silently missing changes.
const notifyQueueLen = statestore.DefaultMaxQueued

// DefaultNotifyAckTimeout is Options.NotifyAckTimeout when it is zero.
const DefaultNotifyAckTimeout = 30 * time.Second

// CodeNotifyOverflow is the DISCONNECT reason for a client whose
// notification queue overflowed.
var CodeNotifyOverflow = packets.Code{
	Code:   packets.ErrQuotaExceeded.Code,
	Reason: "state store: notification queue overflow",
}

// CodeNotifyStalled is the DISCONNECT reason for a client that kept a
// notification waiting for room in its Receive Maximum while acknowledging
// nothing for Options.NotifyAckTimeout.
var CodeNotifyStalled = packets.Code{
	Code:   packets.ErrQuotaExceeded.Code,
	Reason: "state store: notifications not acknowledged",
}

// notifier delivers one connection's KEYNOTIFY notifications. The store
// calls Notify (its statestore.NotifyQueue) with its lock held, in version
// order per key; the queue's goroutine writes the packets straight to the
// registering connection, whether or not it subscribed to the notify topic,
// and so exactly once (wire fact 4), never more unacknowledged than the
// client's Receive Maximum (MQTT 5 section 3.3.4): the next one waits for a
// PUBACK (service.OnQosComplete). Writing from that goroutine keeps a slow
// watcher from stalling the read loop of the client whose SET caused it.
//
// A notification's key and value bytes count against the connection's queue
// bound and the service's budget (Options.MaxBytes, shared by all
// connections) from Notify until the client acknowledges it, not only while
// it waits: a client with a large Receive Maximum that acknowledges nothing is
// held to the same bound. Its packet, once sent, is a message the client's
// session holds (write): a small notification's packet is ~1 KB, which the
// key and value alone would count as a few bytes.
type notifier struct {
	*statestore.NotifyQueue
	svc    *service
	cl     *mqtt.Client
	prefix string // NotifyTopicPrefix/{HEX(clientId)}/command/notify/

	mu      sync.Mutex
	unacked map[uint16]int64 // packet id → Size of a notification not yet acknowledged
}

func newNotifier(s *service, cl *mqtt.Client) *notifier {
	n := &notifier{
		svc:     s,
		cl:      cl,
		prefix:  string(sswire.AppendNotifyTopic(nil, []byte(cl.ID), nil)),
		unacked: make(map[uint16]int64),
	}
	n.NotifyQueue = statestore.NewNotifyQueue(statestore.NotifyQueueOptions{
		MaxQueued:      notifyQueueLen,
		MaxQueuedBytes: s.srv.Options.Capabilities.MaximumClientWritesPendingBytes,
		Budget:         s.notifyBudget,
		AckTimeout:     s.notifyAckTimeout,
		Room:           n.room,
		Send:           n.write,
		Overflow:       n.overflow,
		Stalled:        n.stalled,
	})
	return n
}

// completed is called for every acknowledgement (or drop) of one of cl's
// messages: a notification's bytes are released once its packet id has left
// the client's inflight set. (An id still there was reused, or is a PUBACK of
// the client's own publish under the same id: the notification is still in
// flight, and its bytes stay counted.)
func (n *notifier) completed(id uint16) {
	n.mu.Lock()
	size, ok := n.unacked[id]
	if ok && !n.cl.State.Inflight.Has(id) {
		delete(n.unacked, id)
	} else {
		ok = false
	}
	n.mu.Unlock()
	if ok {
		n.Release(size)
	}
	n.Acked()
}

// NotifyTopic returns the topic of the notifications for key sent to
// clientID: both are upper-case base 16 (wire fact 3; 8 levels).
func NotifyTopic(clientID string, key []byte) string {
	return string(sswire.AppendNotifyTopic(nil, []byte(clientID), key))
}

// topic returns the notification topic of key: prefix + HEX(key).
func (n *notifier) topic(key string) string {
	b := make([]byte, 0, len(n.prefix)+2*len(key))
	return string(sswire.AppendUpperHex(append(b, n.prefix...), []byte(key)))
}

// room reports whether cl accepts one more unacknowledged QoS 1 PUBLISH:
// fewer in its inflight set than its Receive Maximum ([MQTT-3.3.4-9]). mochi
// clamps the Receive Maximum to Capabilities.MaximumInflight; a client that
// announced none (or speaks MQTT 3.1.1) gets the broker's MaximumInflight,
// beyond which mochi would drop its routed messages. The inflight set holds
// mochi's routed messages too, so both share the one quota.
func (n *notifier) room() bool {
	limit := int(n.cl.Properties.Props.ReceiveMaximum)
	if limit == 0 {
		limit = int(n.svc.srv.Options.Capabilities.MaximumInflight)
	}
	return n.cl.State.Inflight.Len() < limit
}

func (n *notifier) run() {
	defer n.svc.wg.Done()
	n.Run()
}

// overflow disconnects a client that fell notifyQueueLen (or the byte
// bounds) behind.
func (n *notifier) overflow() {
	n.svc.log.Warn("state store: notification queue overflow, disconnecting", "client", n.cl.ID)
	_ = n.svc.srv.DisconnectClient(n.cl, CodeNotifyOverflow)
}

// stalled disconnects a client that acknowledged nothing for
// NotifyAckTimeout while a notification waited for room.
func (n *notifier) stalled() {
	n.svc.log.Warn("state store: notifications not acknowledged, disconnecting", "client", n.cl.ID,
		"ack_timeout", n.svc.notifyAckTimeout)
	_ = n.svc.srv.DisconnectClient(n.cl, CodeNotifyStalled)
}

// write sends one notification as a QoS 1 PUBLISH, recorded in the client's
// inflight set so its PUBACK is accounted for (docs/design.md "Library
// facts"). The notification is a message its session holds until
// acknowledged: it is admitted within the session's bounds as mochi admits a
// routed message (MaxSessionBytes; MaxQueuedBytes beyond the session's fair
// share), and waits in the queue for an acknowledgement when they have no
// room (NoRoom). It reports Unacked when completed releases the
// notification's bytes, Done when the queue does, now.
func (n *notifier) write(note statestore.Notification) statestore.SendResult {
	if n.cl.Closed() {
		return statestore.Done
	}
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   n.topic(note.Key),
		Payload:     statestore.AppendNotification(nil, note.Op, note.Value),
		Properties: packets.Properties{
			ContentType: contentType,
			User:        []packets.UserProperty{{Key: "__ts", Val: note.Version.String()}},
		},
	}
	id, err := n.cl.NextPacketID()
	if err != nil {
		n.svc.log.Warn("state store: no packet id for a notification", "client", n.cl.ID, "error", err)
		return statestore.Done
	}
	pk.PacketID = uint16(id)
	pk.Created = time.Now().Unix() // mochi expires inflight entries from Created
	// Tracked before it is in the inflight set: its PUBACK may come back
	// before WritePacket returns.
	n.mu.Lock()
	n.unacked[pk.PacketID] = note.Size()
	n.mu.Unlock()
	if q := n.svc.srv.AdmitInflight(n.cl, &pk); q != 0 {
		n.mu.Lock()
		delete(n.unacked, pk.PacketID)
		n.mu.Unlock()
		return statestore.NoRoom
	}
	// Accounted for as mochi accounts for routed messages, since its PUBACK
	// goes through mochi's processPuback, which undoes both.
	atomic.AddInt64(&n.svc.srv.Info.Inflight, 1)
	n.cl.State.Inflight.DecreaseSendQuota()
	if err := n.cl.WritePacket(pk); err != nil {
		if n.cl.State.Inflight.Delete(pk.PacketID) {
			atomic.AddInt64(&n.svc.srv.Info.Inflight, -1)
			n.cl.State.Inflight.IncreaseSendQuota()
		}
		n.svc.log.Debug("state store: notification not written", "client", n.cl.ID, "error", err)
		n.mu.Lock()
		_, tracked := n.unacked[pk.PacketID]
		delete(n.unacked, pk.PacketID)
		n.mu.Unlock()
		if tracked {
			return statestore.Done // the queue releases it
		}
		return statestore.Unacked // completed did
	}
	return statestore.Unacked // completed releases it (or has already)
}
