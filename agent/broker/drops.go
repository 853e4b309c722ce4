package broker

import (
	"log/slog"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// DefaultMaxPendingWrites is the default of Options.MaxPendingWrites. The queue is a
// channel buffer allocated for every client (inline ones included), 8 bytes a slot, so its
// length multiplies by the clients: 1,024 keeps it at 8 KiB a client where mochi's own
// 8,192 would be 64 KiB. The queue's bytes are bounded too (Options.MaxPendingWriteBytes).
const DefaultMaxPendingWrites = 1024

// dropLogEvery bounds the warnings to one a second for each bound; the counters have them
// all.
const dropLogEvery = time.Second

// quotaKinds is the number of mochi's Quota values, 1-based (mqtt.QuotaClients is the last).
const quotaKinds = int(mqtt.QuotaClients) + 1

// dropLog counts and reports what mochi (patched: "byte bounds", third_party/mochi/
// README.md) refuses or drops for the broker's bounds: messages dropped for one subscriber
// (its queue of pending writes full for a QoS 0 message, its session's bytes or the total
// full, its in-flight count reached), QoS 1/2 messages held in a session because its
// client's queue was full (not a loss), and connections, subscriptions, wills, QoS 2
// messages and retained messages refused. Each kind is logged at most once a second,
// with its count.
type dropLog struct {
	mqtt.HookBase
	log     *slog.Logger
	dropped [quotaKinds]atomic.Int64 // messages dropped or held for a subscriber
	refused [quotaKinds]atomic.Int64 // packets refused to their sender
	logged  [quotaKinds]atomic.Int64 // unix nanoseconds of the last warning
}

func (h *dropLog) ID() string { return "faceagent-drops" }

// Provides nothing: mochi calls OnQuotaExceeded on every hook that has it.
func (h *dropLog) Provides(byte) bool { return false }

// OnQuotaExceeded implements mqtt.QuotaObserver.
func (h *dropLog) OnQuotaExceeded(cl *mqtt.Client, q mqtt.Quota, refused bool, pk *packets.Packet) {
	if int(q) >= quotaKinds {
		return
	}
	var n int64
	if refused {
		n = h.refused[q].Add(1)
	} else {
		n = h.dropped[q].Add(1)
	}
	now := time.Now().UnixNano()
	last := h.logged[q].Load()
	if now-last < int64(dropLogEvery) || !h.logged[q].CompareAndSwap(last, now) {
		return
	}
	h.log.Warn("broker: "+quotaText(q, refused), "client", cl.ID, "topic", pk.TopicName,
		"bound", q.String(), "total", h.dropped[q].Load()+h.refused[q].Load(), "this", n)
}

// quotaText says what happened for a warning.
func quotaText(q mqtt.Quota, refused bool) string {
	switch q {
	case mqtt.QuotaWritesDropped:
		return "QoS 0 message dropped for a client: its queue of pending writes is full"
	case mqtt.QuotaWritesHeld:
		return "QoS 1/2 message held in a session: its client's queue of pending writes is full"
	case mqtt.QuotaInflight:
		return "message dropped for a session: it holds max_queued_messages"
	case mqtt.QuotaRetainedBytes:
		return "retained message not retained: max_retained_bytes"
	case mqtt.QuotaSubscriptions:
		return "subscription refused (0x97): max_subscriptions"
	case mqtt.QuotaClients:
		return "connection refused (0x97): max_clients"
	}
	bound := "max_session_bytes"
	if q == mqtt.QuotaQueuedBytes {
		bound = "max_queued_bytes"
	}
	if refused {
		return "subscription, will or QoS 2 message refused (0x97): " + bound
	}
	return "message dropped for a session: " + bound
}

// DroppedMessages returns how many messages were dropped for a subscriber since New: a QoS
// 0 one whose queue of pending writes was full (Options.MaxPendingWrites,
// MaxPendingWriteBytes), and a QoS 1/2 one whose session was full (MaxSessionBytes,
// MaxQueuedBytes, max_queued_messages).
func (b *Broker) DroppedMessages() int64 {
	var n int64
	for _, q := range []mqtt.Quota{mqtt.QuotaWritesDropped, mqtt.QuotaSessionBytes, mqtt.QuotaQueuedBytes, mqtt.QuotaInflight} {
		n += b.drops.dropped[q].Load()
	}
	return n
}

// Dropped returns how many messages were dropped for a subscriber for bound q since New
// (mqtt.QuotaWritesHeld: QoS 1/2 messages held in a session instead of being queued,
// which are not lost).
func (b *Broker) Dropped(q mqtt.Quota) int64 {
	if int(q) >= quotaKinds {
		return 0
	}
	return b.drops.dropped[q].Load()
}

// Refused returns how many connections, subscriptions, wills, QoS 2 messages and retained
// messages were refused for bound q since New (mqtt.QuotaRetainedBytes: retained messages
// not retained, refused or not).
func (b *Broker) Refused(q mqtt.Quota) int64 {
	if int(q) >= quotaKinds {
		return 0
	}
	if q == mqtt.QuotaRetainedBytes {
		return b.drops.refused[q].Load() + b.drops.dropped[q].Load()
	}
	return b.drops.refused[q].Load()
}
