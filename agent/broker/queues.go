package broker

import (
	"bufio"
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// DefaultTerminalPendingWrites is the default of Options.TerminalPendingWrites. A terminal
// has one command in flight (two while a retry overlaps a slow ack): 32 packets is far
// beyond what it is sent, and costs 352 bytes instead of the 9.5 KB of a 1,024 queue.
const DefaultTerminalPendingWrites = 32

// terminalReadBuffer is the read buffer of a terminal's connection (mochi's
// ClientNetReadBufferSize, 2 KiB, for everyone else). A terminal sends acks and heartbeats
// of a few hundred bytes; a larger packet is read straight into its own buffer by bufio.
const terminalReadBuffer = 512

// terminalQueues gives terminals a short queue of pending writes.
//
// mochi v2.7.9 makes every client's queue (ClientState.outbound, a buffered channel of
// *packets.Packet) in newClient, with Capabilities.MaximumClientWritesPending slots, when
// the connection is accepted: before CONNECT, so nothing is known of the client yet. A
// queue of 1,024 is 8 KiB (a 9,472-byte allocation) for every client, though a terminal
// is sent one command at a time. The hook replaces the queue of a client whose first
// SUBSCRIBE is for terminal command topics only (Options.TerminalTopic) by one of
// Options.TerminalPendingWrites slots.
//
// When: in OnSubscribe, on the client's reader goroutine, before mochi adds the
// subscriptions, and only while the client has no subscription and no message in flight,
// so no publisher can know the client's queue yet (mochi routes only to subscribers),
// save one routing on a stale subscriber list to a client that took a clean session over:
// what it queued behind the marker keeps the client its full queue (swap).
//
// How, without a data race: mochi's writer goroutine (Client.WriteLoop) reads the field at
// each turn of its loop, so only that goroutine may change it. The hook sends it a marker
// packet on the old queue (its only packet: nothing was routed to the client yet) and
// waits; the writer passes it to WritePacket, whose OnPacketEncode (this hook, on the
// writer goroutine) swaps the field under the client's lock (WritePacket reads the queue's
// length under that lock on other goroutines) and releases the reader. The marker has
// packet type 0 (reserved), which WritePacket refuses to encode: nothing is written
// (WriteLoop logs the error at debug level, and counts the marker out of
// ClientState.outboundQty, which it was never counted into: that counter then reads one
// less than the queue holds; mochi v2.7.9 never reads it).
// The wait is one goroutine hand-off per terminal connection.
//
// The same SUBSCRIBE gives the terminal a read buffer of terminalReadBuffer bytes instead
// of 2 KiB, on the reader goroutine (the only one that reads ClientConnection.bconn), when
// nothing is buffered beyond the SUBSCRIBE.
//
// A terminal that resumes a kept session has its subscriptions already (publishers may be
// routing to it): it keeps its full queue.
//
// A terminal that later subscribes to more than its commands keeps the short queue:
// messages beyond it are dropped like any client's beyond MaxPendingWrites (counted by
// dropLog, seen by OnPublishDropped).
type terminalQueues struct {
	mqtt.HookBase
	match  func(topic string) bool
	slots  int32
	layout clientLayout

	mu      sync.Mutex
	pending map[*mqtt.Client]chan struct{} // swaps the writer is asked for, closed when done
	swapped atomic.Int64                   // queues replaced (tests, metrics)
}

// clientLayout locates the unexported fields of mochi's ClientState the hook uses.
type clientLayout struct {
	outbound uintptr // offset of ClientState.outbound (chan *packets.Packet)
	open     uintptr // offset of ClientState.open (context.Context, done when the client stops)
	bconn    uintptr // offset of ClientConnection.bconn (*bufio.Reader over the connection)
}

var errClientLayout = errors.New("broker: mochi's client is not laid out as v2.7.9's (State.outbound, State.open, Net.bconn)")

// findClientLayout checks that mochi's ClientState has the fields the hook replaces and
// reads, with the expected types.
func findClientLayout() (clientLayout, error) {
	st := reflect.TypeFor[mqtt.ClientState]()
	out, ok := st.FieldByName("outbound")
	if !ok || out.Type != reflect.TypeFor[chan *packets.Packet]() {
		return clientLayout{}, errClientLayout
	}
	open, ok := st.FieldByName("open")
	if !ok || open.Type != reflect.TypeFor[context.Context]() {
		return clientLayout{}, errClientLayout
	}
	bconn, ok := reflect.TypeFor[mqtt.ClientConnection]().FieldByName("bconn")
	if !ok || bconn.Type != reflect.TypeFor[*bufio.Reader]() {
		return clientLayout{}, errClientLayout
	}
	return clientLayout{outbound: out.Offset, open: open.Offset, bconn: bconn.Offset}, nil
}

func (l clientLayout) bconnOf(cl *mqtt.Client) **bufio.Reader {
	return (**bufio.Reader)(unsafe.Add(unsafe.Pointer(&cl.Net), l.bconn))
}

func (l clientLayout) outboundOf(cl *mqtt.Client) *chan *packets.Packet {
	return (*chan *packets.Packet)(unsafe.Add(unsafe.Pointer(&cl.State), l.outbound))
}

func (l clientLayout) openOf(cl *mqtt.Client) context.Context {
	return *(*context.Context)(unsafe.Add(unsafe.Pointer(&cl.State), l.open))
}

func newTerminalQueues(match func(string) bool, slots int32) (*terminalQueues, error) {
	layout, err := findClientLayout()
	if err != nil {
		return nil, err
	}
	if slots <= 0 {
		slots = DefaultTerminalPendingWrites
	}
	return &terminalQueues{match: match, slots: slots, layout: layout,
		pending: make(map[*mqtt.Client]chan struct{})}, nil
}

func (h *terminalQueues) ID() string { return "faceagent-terminal-queues" }

// Provides nothing until a terminal topic matcher is set (SetTerminalTopic), so a broker
// without terminals pays nothing for the hook.
func (h *terminalQueues) Provides(b byte) bool {
	return h.match != nil && (b == mqtt.OnSubscribe || b == mqtt.OnPacketEncode)
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
	r := h.layout.bconnOf(cl)
	if *r == nil || (*r).Size() <= terminalReadBuffer || (*r).Buffered() > 0 {
		return
	}
	*r = bufio.NewReaderSize(cl.Net.Conn, terminalReadBuffer)
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

// marker is the packet that asks the writer goroutine for the swap; type 0 is reserved and
// never encoded.
var marker = packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Reserved}}

// shorten has the writer goroutine replace cl's queue and waits until it has, or until the
// client stops.
//
//go:noinline
func (h *terminalQueues) shorten(cl *mqtt.Client) {
	old := *h.layout.outboundOf(cl)
	if cap(old) <= int(h.slots) || len(old) > 0 {
		return
	}
	done := make(chan struct{})
	h.mu.Lock()
	if _, busy := h.pending[cl]; busy {
		h.mu.Unlock()
		return
	}
	h.pending[cl] = done
	h.mu.Unlock()
	pk := marker
	select {
	case old <- &pk:
	default: // not reached: nothing else can be queued yet
		h.forget(cl)
		return
	}
	select {
	case <-done:
	case <-h.layout.openOf(cl).Done():
		h.forget(cl) // the writer has stopped, or will drop the marker
	}
}

func (h *terminalQueues) forget(cl *mqtt.Client) {
	h.mu.Lock()
	delete(h.pending, cl)
	h.mu.Unlock()
}

// OnPacketEncode runs in WritePacket for every packet written. For the marker it runs on
// cl's writer goroutine: it swaps the queue there.
func (h *terminalQueues) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Reserved {
		h.swap(cl)
	}
	return pk
}

//go:noinline
func (h *terminalQueues) swap(cl *mqtt.Client) {
	h.mu.Lock()
	done, ok := h.pending[cl]
	delete(h.pending, cl)
	h.mu.Unlock()
	if !ok {
		return
	}
	// A publisher routing on a stale subscriber list (mochi routes by client id, and a
	// client taking a clean session over gets what was meant for the one it replaced) may
	// have queued behind the marker: replaced, the old queue would keep its messages
	// unread and unreported. Keep it, as for a resumed session. (A publisher that read the
	// field before the swap and sends just after this check is not covered: mochi sends
	// without the client's lock.)
	if len(*h.layout.outboundOf(cl)) > 0 {
		close(done)
		return
	}
	short := make(chan *packets.Packet, h.slots)
	cl.Lock()
	*h.layout.outboundOf(cl) = short
	cl.Unlock()
	h.swapped.Add(1)
	close(done)
}

// readBuffer returns the size of cl's read buffer (tests; read it on the reader goroutine,
// or after it has gone).
func (h *terminalQueues) readBuffer(cl *mqtt.Client) int {
	return (*h.layout.bconnOf(cl)).Size()
}

// pendingWrites returns the capacity of cl's queue of pending writes (tests), under the
// client's lock like WritePacket.
func (h *terminalQueues) pendingWrites(cl *mqtt.Client) int {
	cl.RLock()
	defer cl.RUnlock()
	return cap(*h.layout.outboundOf(cl))
}
