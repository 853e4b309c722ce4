package broker

import (
	mqtt "github.com/mochi-mqtt/server/v2"
)

// Defaults of the bounds in Options (0 there). Together they keep the daemon's worst case,
// whatever its clients do, with a 1 MiB max packet size, under a 256 MiB soft memory limit
// (docs/benchmarks.md, "Worst-case memory of the broker's bounds", the state store full
// included): a gateway serves its terminals (one connection and one
// subscription each), a back office or two and a few state store clients. Boards with
// less memory set smaller ones (boards/*.toml).
const (
	// DefaultMaxClients: 64 terminals and as many others, or 128 terminals. A connection
	// is the costliest thing a client can add (its buffers, stacks and queues at their
	// bounds), so this is the bound that weighs most in the worst case.
	DefaultMaxClients = 128
	// DefaultMaxSubscriptions: a back office subscribes to a handful of filters, a
	// terminal to one, a state store client to its responses and notifications.
	DefaultMaxSubscriptions = 64
	// DefaultMaxPendingWriteBytes: about 50 results or terminal commands queued for one
	// client's writer. QoS 1/2 messages beyond it wait in the client's session (counted in
	// MaxSessionBytes) and are written, in order, once the queue is empty; QoS 0 ones are
	// dropped for that client.
	DefaultMaxPendingWriteBytes = 64 << 10
	// DefaultMaxSessionBytes: about 3,500 results of 300 bytes (1.2 KB each counted: the
	// message struct is most of it) for a back office that is away, and its subscriptions.
	DefaultMaxSessionBytes = 4 << 20
	// DefaultMaxQueuedBytes: three full sessions, or many small ones; a session under its
	// share (96 KiB) is admitted even when the total is full.
	DefaultMaxQueuedBytes = 12 << 20
	// DefaultMaxRetainedBytes: the agent retains nothing; room for others' status topics.
	DefaultMaxRetainedBytes = 4 << 20
	// DefaultMaxInboundBytes: eight packets of the default max_packet_size (1 MiB) read at
	// once; smaller packets (64 KiB or less) do not count.
	DefaultMaxInboundBytes = 8 << 20
)

// boundOr returns v, def when v is 0, and 0 (no bound) when v is negative.
func boundOr[T int32 | int64](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// applyBounds sets mochi's capabilities from o's bounds (mochi: 0 is no bound).
func applyBounds(caps *mqtt.Capabilities, o *Options) {
	caps.MaximumClients = boundOr(o.MaxClients, DefaultMaxClients)
	if caps.MaximumClients == 0 {
		caps.MaximumClients = 1<<63 - 1 // mochi compares, 0 would refuse everyone
	}
	caps.MaximumSubscriptions = boundOr(o.MaxSubscriptions, DefaultMaxSubscriptions)
	caps.MaximumClientWritesPendingBytes = boundOr(o.MaxPendingWriteBytes, DefaultMaxPendingWriteBytes)
	caps.MaximumSessionBytes = boundOr(o.MaxSessionBytes, DefaultMaxSessionBytes)
	caps.MaximumQueuedBytes = boundOr(o.MaxQueuedBytes, DefaultMaxQueuedBytes)
	caps.MaximumRetainedBytes = boundOr(o.MaxRetainedBytes, DefaultMaxRetainedBytes)
	caps.MaximumInboundBytes = boundOr(o.MaxInboundBytes, DefaultMaxInboundBytes)
}

// QueuedBytes returns the bytes the sessions hold now (Options.MaxQueuedBytes counts them).
func (b *Broker) QueuedBytes() int64 { return b.srv.QueuedBytes() }

// RetainedBytes returns the bytes the retained messages cost now (Options.MaxRetainedBytes).
func (b *Broker) RetainedBytes() int64 { return b.srv.RetainedBytes() }
