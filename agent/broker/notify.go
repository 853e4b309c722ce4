package broker

import (
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/internal/sswire"
)

// notifyQueueLen bounds the notifications waiting for one connection. A
// client that falls this far behind is disconnected (it re-registers when it
// reconnects) rather than silently missing changes.
const notifyQueueLen = 1024

// CodeNotifyOverflow is the DISCONNECT reason for a client whose
// notification queue overflowed.
var CodeNotifyOverflow = packets.Code{
	Code:   packets.ErrQuotaExceeded.Code,
	Reason: "state store: notification queue overflow",
}

// notifier delivers one connection's KEYNOTIFY notifications. The store
// calls Notify with its lock held, in version order per key; Notify only
// queues, and run writes the packets straight to the registering
// connection, whether or not it subscribed to the notify topic, and so
// exactly once (wire fact 4). Writing from this goroutine keeps a slow
// watcher from stalling the read loop of the client whose SET caused it.
type notifier struct {
	svc      *service
	cl       *mqtt.Client
	prefix   string // NotifyTopicPrefix/{HEX(clientId)}/command/notify/
	queue    chan packets.Packet
	overflow atomic.Bool
	done     chan struct{}
	stopOnce sync.Once
}

func newNotifier(s *service, cl *mqtt.Client) *notifier {
	return &notifier{
		svc:    s,
		cl:     cl,
		prefix: string(sswire.AppendNotifyTopic(nil, []byte(cl.ID), nil)),
		queue:  make(chan packets.Packet, notifyQueueLen),
		done:   make(chan struct{}),
	}
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

// Notify implements statestore.Watcher.
func (n *notifier) Notify(key string, op statestore.Op, value []byte, version hlc.Timestamp) {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   n.topic(key),
		Payload:     statestore.AppendNotification(nil, op, value),
		Properties: packets.Properties{
			ContentType: contentType,
			User:        []packets.UserProperty{{Key: "__ts", Val: version.String()}},
		},
	}
	select {
	case n.queue <- pk:
	default:
		if n.overflow.CompareAndSwap(false, true) {
			n.stop() // run disconnects the client
		}
	}
}

func (n *notifier) stop() { n.stopOnce.Do(func() { close(n.done) }) }

func (n *notifier) run() {
	defer n.svc.wg.Done()
	for {
		select {
		case pk := <-n.queue:
			n.write(pk)
		case <-n.done:
			if n.overflow.Load() {
				n.svc.log.Warn("state store: notification queue overflow, disconnecting", "client", n.cl.ID)
				_ = n.svc.srv.DisconnectClient(n.cl, CodeNotifyOverflow)
			}
			return
		}
	}
}

// write sends one notification as a QoS 1 PUBLISH, recorded in the client's
// inflight set so its PUBACK is accounted for (field note).
func (n *notifier) write(pk packets.Packet) {
	if n.cl.Closed() {
		return
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
