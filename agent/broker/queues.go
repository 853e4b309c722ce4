package broker

import (
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// DefaultTerminalPendingWrites is the default of Options.TerminalPendingWrites. A terminal
// has one command in flight (two while a retry overlaps a slow ack): 32 packets is far
// beyond what it is sent, and is a 352-byte allocation where a 1,024 queue is 9,472 bytes.
const DefaultTerminalPendingWrites = 32

// terminalReadBuffer is the read buffer of a terminal's connection (mochi's
// ClientNetReadBufferSize, 2 KiB, for everyone else). A terminal sends acks and heartbeats
// of a few hundred bytes; a larger packet is read straight into its own buffer by bufio.
const terminalReadBuffer = 512

// terminalQueues gives terminals a short queue of pending writes.
//
// mochi makes every client's queue of pending writes (a buffered channel of
// *packets.Packet) in newClient, with Capabilities.MaximumClientWritesPending slots, when
// the connection is accepted: before CONNECT, so nothing is known of the client yet. A
// queue of 1,024 is 8 KiB (a 9,472-byte allocation) for every client, though a terminal
// is sent one command at a time. The hook replaces the queue of a client whose first
// SUBSCRIBE is for terminal command topics only (Options.TerminalTopic) by one of
// Options.TerminalPendingWrites slots, through the vendored mochi's Client.ResizeOutbound
// (third_party/mochi, "terminal queues").
//
// When: in OnSubscribe, on the client's reader goroutine, before mochi adds the
// subscriptions, and only while the client has no subscription and no message in flight,
// so no publisher can know the client's queue yet (mochi routes only to subscribers),
// save one routing on a stale subscriber list to a client that took a clean session over:
// what it queued behind the resize keeps the client its full queue.
//
// How, without a data race: mochi's writer goroutine (Client.WriteLoop) reads the queue
// field at each turn of its loop, so only that goroutine may change it. ResizeOutbound
// queues a marker packet (type Reserved, never encoded nor written) and waits; the writer,
// meeting the marker, swaps the field under the client's lock (WritePacket reads the
// queue's length under that lock on other goroutines) and releases the reader. The wait is
// one goroutine hand-off per terminal connection. The hook sees only SUBSCRIBEs, never the
// packets written.
//
// The same SUBSCRIBE gives the terminal a read buffer of terminalReadBuffer bytes instead
// of 2 KiB (Client.SetReadBuffer), on the reader goroutine (the only one that reads the
// buffer), when nothing is buffered beyond the SUBSCRIBE.
//
// A terminal that resumes a kept session has its subscriptions already (publishers may be
// routing to it): it keeps its full queue.
//
// A terminal that later subscribes to more than its commands keeps the short queue:
// messages beyond it are dropped like any client's beyond MaxPendingWrites (counted by
// dropLog, seen by OnPublishDropped).
type terminalQueues struct {
	mqtt.HookBase
	match func(topic string) bool
	slots int32

	swapped atomic.Int64 // queues replaced (tests, metrics)
}

// newTerminalQueues returns the hook; slots <= 0 means DefaultTerminalPendingWrites.
func newTerminalQueues(match func(string) bool, slots int32) *terminalQueues {
	if slots <= 0 {
		slots = DefaultTerminalPendingWrites
	}
	return &terminalQueues{match: match, slots: slots}
}

func (h *terminalQueues) ID() string { return "faceagent-terminal-queues" }

// Provides nothing until a terminal topic matcher is set (SetTerminalTopic), so a broker
// without terminals pays nothing for the hook.
func (h *terminalQueues) Provides(b byte) bool {
	return h.match != nil && b == mqtt.OnSubscribe
}

// OnSubscribe runs on the client's reader goroutine. Its frame stays small (the work is in
// shorten): mochi's SUBSCRIBE path is deep already.
func (h *terminalQueues) OnSubscribe(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if h.isTerminal(cl, pk.Filters) {
		h.shortenReads(cl)
		h.shorten(cl)
	}
	return pk
}

// shortenReads gives cl a smaller read buffer. It runs on cl's reader goroutine between two
// packets, so nothing else uses the buffer.
//
//go:noinline
func (h *terminalQueues) shortenReads(cl *mqtt.Client) {
	if cl.ReadBufferSize() > terminalReadBuffer {
		cl.SetReadBuffer(terminalReadBuffer)
	}
}

// isTerminal reports whether cl subscribes for the first time, to terminal command topics only.
func (h *terminalQueues) isTerminal(cl *mqtt.Client, filters packets.Subscriptions) bool {
	if cl.Net.Inline || cl.Net.Conn == nil || len(filters) == 0 ||
		cl.State.Subscriptions.Len() > 0 || cl.State.Inflight.Len() > 0 {
		return false
	}
	for _, f := range filters {
		if !h.match(f.Filter) {
			return false
		}
	}
	return true
}

// shorten has the writer goroutine replace cl's queue and waits until it has, or until the
// client stops.
//
//go:noinline
func (h *terminalQueues) shorten(cl *mqtt.Client) {
	if cl.ResizeOutbound(int(h.slots)) {
		h.swapped.Add(1)
	}
}

// readBuffer returns the size of cl's read buffer (tests; read it on the reader goroutine,
// or after it has gone).
func (h *terminalQueues) readBuffer(cl *mqtt.Client) int {
	return cl.ReadBufferSize()
}

// pendingWrites returns the capacity of cl's queue of pending writes (tests), under the
// client's lock like WritePacket.
func (h *terminalQueues) pendingWrites(cl *mqtt.Client) int {
	return cl.OutboundCap()
}
