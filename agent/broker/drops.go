package broker

import (
	"log/slog"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// DefaultMaxPendingWrites is the default of Options.MaxPendingWrites. mochi's own default,
// 8,192, is a 64 KiB channel buffer for every client (inline ones included): 4 MB with 64
// terminals on a gateway whose whole budget is 15 MB. A client whose writes fall 1,024
// packets behind is far behind its Receive Maximum's worth of QoS 1 messages at usual
// settings; what is dropped beyond that is counted and logged (dropLog).
const DefaultMaxPendingWrites = 1024

// dropLogEvery bounds the drop warnings to one a second; the counter has them all.
const dropLogEvery = time.Second

// dropLog counts and reports the messages mochi drops because a subscriber's queue of
// pending writes is full (mochi's OnPublishDropped). mochi drops such a message silently:
// QoS 0 or 1 alike, a QoS 1 one is also taken out of the session's in-flight messages, so it
// is not resent later (its record in the sessions journal stays, so it is resent after a
// restart). A publisher in this process can notice drops with a hook of its own (the agent
// resends results); everyone else sees this counter and the log.
type dropLog struct {
	mqtt.HookBase
	log     *slog.Logger
	dropped atomic.Int64
	logged  atomic.Int64 // unix nanoseconds of the last warning
}

func (h *dropLog) ID() string { return "faceagent-drops" }

func (h *dropLog) Provides(b byte) bool { return b == mqtt.OnPublishDropped }

func (h *dropLog) OnPublishDropped(cl *mqtt.Client, pk packets.Packet) {
	n := h.dropped.Add(1)
	now := time.Now().UnixNano()
	last := h.logged.Load()
	if now-last < int64(dropLogEvery) || !h.logged.CompareAndSwap(last, now) {
		return
	}
	h.log.Warn("broker: message dropped, the client's queue of pending writes is full",
		"client", cl.ID, "topic", pk.TopicName, "qos", pk.FixedHeader.Qos, "dropped_total", n)
}

// DroppedMessages returns how many messages were dropped since New because the receiving
// client's queue of pending writes was full (Options.MaxPendingWrites).
func (b *Broker) DroppedMessages() int64 { return b.drops.dropped.Load() }
