package broker

import (
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/internal/sswire"
)

// notifyQueueLen bounds the notifications waiting for one connection, and
// Options.MaxPendingWriteBytes their bytes (they are bytes queued for writing
// to it, as mochi's queue of pending writes holds; statestore.
// DefaultMaxQueuedBytes without that bound). A client that falls this far
// behind is disconnected (it re-registers when it reconnects) rather than
// silently missing changes.
const notifyQueueLen = statestore.DefaultMaxQueued

// CodeNotifyOverflow is the DISCONNECT reason for a client whose
// notification queue overflowed.
var CodeNotifyOverflow = packets.Code{
	Code:   packets.ErrQuotaExceeded.Code,
	Reason: "state store: notification queue overflow",
}

// notifier delivers one connection's KEYNOTIFY notifications. The store
// calls Notify (its statestore.NotifyQueue) with its lock held, in version
// order per key; the queue's goroutine writes the packets straight to the
// registering connection, whether or not it subscribed to the notify topic,
// and so exactly once (wire fact 4), never more unacknowledged than the
// client's Receive Maximum (MQTT 5 section 3.3.4): the next one waits for a
// PUBACK (service.OnQosComplete). Writing from that goroutine keeps a slow
// watcher from stalling the read loop of the client whose SET caused it.
type notifier struct {
	*statestore.NotifyQueue
	svc    *service
	cl     *mqtt.Client
	prefix string // NotifyTopicPrefix/{HEX(clientId)}/command/notify/
}

func newNotifier(s *service, cl *mqtt.Client) *notifier {
	n := &notifier{
		svc:    s,
		cl:     cl,
		prefix: string(sswire.AppendNotifyTopic(nil, []byte(cl.ID), nil)),
	}
	n.NotifyQueue = statestore.NewNotifyQueue(statestore.NotifyQueueOptions{
		MaxQueued:      notifyQueueLen,
		MaxQueuedBytes: s.srv.Options.Capabilities.MaximumClientWritesPendingBytes,
		Room:           n.room,
		Send:           n.write,
		Overflow:       n.overflow,
	})
	return n
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

// overflow disconnects a client that fell notifyQueueLen behind.
func (n *notifier) overflow() {
	n.svc.log.Warn("state store: notification queue overflow, disconnecting", "client", n.cl.ID)
	_ = n.svc.srv.DisconnectClient(n.cl, CodeNotifyOverflow)
}

// write sends one notification as a QoS 1 PUBLISH, recorded in the client's
// inflight set so its PUBACK is accounted for (field note).
func (n *notifier) write(note statestore.Notification) {
	if n.cl.Closed() {
		return
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
		return
	}
	pk.PacketID = uint16(id)
	pk.Created = time.Now().Unix() // mochi expires inflight entries from Created
	if n.cl.State.Inflight.Set(pk) {
		// Account for it as mochi does for routed messages, since its PUBACK
		// goes through mochi's processPuback, which undoes both.
		atomic.AddInt64(&n.svc.srv.Info.Inflight, 1)
		n.cl.State.Inflight.DecreaseSendQuota()
	}
	if err := n.cl.WritePacket(pk); err != nil {
		if n.cl.State.Inflight.Delete(pk.PacketID) {
			atomic.AddInt64(&n.svc.srv.Info.Inflight, -1)
			n.cl.State.Inflight.IncreaseSendQuota()
		}
		n.svc.log.Debug("state store: notification not written", "client", n.cl.ID, "error", err)
	}
}
