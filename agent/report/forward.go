package report

import (
	"context"
	"log/slog"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/publish"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// ForwardDir is the directory of the forwarded acks' and heartbeats' log inside
// agent.data_dir.
const ForwardDir = "forward"

// Bounds and timings of the forward log.
const (
	// MaxForwarded and MaxForwardedBytes bound the backlog (acks and heartbeats journalled
	// and not yet accepted upstream; bytes are payload plus device id). About 1.5 MiB of
	// memory when full: it stays inside the gateway's budget during a long outage.
	MaxForwarded      = 8192
	MaxForwardedBytes = 1 << 20
	// ForwardWriteDelay is how long a message may wait before its record goes to the
	// journal (written, and fsynced per journal.sync, at once then): one the upstream
	// broker accepted sooner is never written (backlog.WriteBehind). It is also the
	// journal's LazyDelay, for the reported records.
	ForwardWriteDelay = 50 * time.Millisecond
	// forwardBatch is how many messages the publisher takes from the backlog per round.
	forwardBatch = 64
	// forwardGather is how long the publisher lets acks and heartbeats gather after the
	// first one before it publishes them: they are information for the back office, not
	// part of any task's delivery, and a burst of acks (terminals answering together) then
	// costs one publishing round, one sync and one reported record instead of one each.
	forwardGather = 5 * time.Millisecond
	// CompactForwarded is how many dead records the log tolerates before a snapshot.
	CompactForwarded = 8192
)

// Record kinds of the forward log.
const (
	KindAck       = 'A'
	KindHeartbeat = 'H'
)

// ForwardOptions configure the forward log.
type ForwardOptions struct {
	Journal journal.Options // backlog.SegmentSize segments
	Prefix  string          // faceagent/{gw}/devices/
	// MaxCount and MaxBytes bound the backlog (0: MaxForwarded, MaxForwardedBytes).
	MaxCount, MaxBytes int
	// WriteDelay is the write-behind delay (0: ForwardWriteDelay; negative: each message
	// is written at once, as if the upstream always took longer).
	WriteDelay time.Duration
	// CompactAfter is how many dead records start a snapshot (0: CompactForwarded).
	CompactAfter int
	// Own, if set, reports whether an ack's messageId is one of the agent's own commands
	// (a reconciliation's ListPersons and corrections): such acks are not forwarded. They
	// are no answer to anything the back office sent (the sync reports tell it what a
	// reconciliation did), and a repair's pages of up to a thousand persons each, or its
	// thousands of corrections, would otherwise fill the backlog's bounds and drop the
	// acks of tasks.
	Own     func(messageID string) bool
	Logger  *slog.Logger
	Metrics *ForwardMetrics
	// Observe is the backlog's hook (backlog.Options.Observe), for tests.
	Observe func(backlog.Event)
}

// Forwarder copies terminals' acks and heartbeats to faceagent/{gw}/devices/{id}/ack and
// …/heartbeat: QoS 1, kept in the journal until the upstream broker accepted them, sent
// in order on reconnect. It is a keyed, write-behind backlog (agent/backlog) of its own in
// data_dir/forward, keyed by device id:
//
//   - Ack and Heartbeat are called on the device event path (the pumps, mqttlink's
//     delivery goroutines, concurrently): they encode, admit the message to the backlog
//     and return. They never wait for the upstream broker or the disk.
//   - Write-behind: what the broker took within ForwardWriteDelay — every ack while the
//     upstream keeps up — costs the log nothing. A crash loses what came in the last
//     ForwardWriteDelay and is not yet accepted.
//   - Heartbeats coalesce: a device's new heartbeat replaces its older one not yet sent,
//     so after an outage each device's latest heartbeat goes up. Acks never coalesce.
//   - Acks of the agent's own commands (ForwardOptions.Own: a reconciliation's
//     ListPersons and corrections) are not forwarded, so no reconciliation takes room
//     in the backlog.
//   - The backlog is bounded. When full, the oldest acks not yet sent are dropped to make
//     room: the results, from the outbox's journal, carry every task's outcome; a
//     forwarded ack is the terminal's word for it. A message is refused only when no ack
//     is left to drop.
type Forwarder struct {
	b   *backlog.Backlog
	own func(messageID string) bool
	log *slog.Logger
}

// OpenForwarder opens (or creates) the log in dir and rebuilds the backlog from it.
func OpenForwarder(dir string, o ForwardOptions) (*Forwarder, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	delay := o.WriteDelay
	if delay == 0 {
		delay = ForwardWriteDelay
	}
	prefix := o.Prefix
	b, err := backlog.Open(dir, backlog.Options{
		Journal: o.Journal, Keyed: true,
		Kinds: []backlog.Kind{{Code: KindAck, Name: "ack", Droppable: true}, {Code: KindHeartbeat, Name: "heartbeat", Coalesce: true}},
		// The reported records are lazy with the same delay (backlog.Open).
		Durability: backlog.WriteBehind(delay),
		MaxCount:   orDefault(o.MaxCount, MaxForwarded), MaxBytes: orDefault(o.MaxBytes, MaxForwardedBytes), Policy: backlog.DropOldest,
		CompactAfter: orDefault(o.CompactAfter, CompactForwarded), Batch: forwardBatch, Gather: forwardGather,
		Topic: func(kind byte, device string) string {
			if kind == KindAck {
				return prefix + device + "/ack"
			}
			return prefix + device + "/heartbeat"
		},
		OnFailed: func(err error, retryIn time.Duration) {
			log.Warn("forwarding to the upstream broker failed; will retry", "in", retryIn, "err", err)
		},
		Observe: o.Observe, Metrics: o.Metrics.backlog(), Logger: log,
	})
	if err != nil {
		return nil, err
	}
	return &Forwarder{b: b, own: o.Own, log: log}, nil
}

// Ack forwards a terminal's ack: journalled (write-behind) and queued for the publisher;
// the ack of one of the agent's own commands (ForwardOptions.Own) is not forwarded.
func (f *Forwarder) Ack(deviceID string, a face.Ack) {
	if f == nil || f.own != nil && f.own(a.MessageID) {
		return
	}
	payload, err := a.AppendJSON(make([]byte, 0, 48+len(a.MessageID)+len(a.Message)))
	if err != nil {
		f.log.Debug("forwarding an ack", "device", deviceID, "err", err)
		return
	}
	f.add(KindAck, deviceID, payload)
}

// Heartbeat forwards a terminal's heartbeat; it replaces the device's heartbeat not yet
// sent, if any.
func (f *Forwarder) Heartbeat(deviceID string, h face.Heartbeat) {
	if f == nil {
		return
	}
	payload, err := h.AppendJSON(nil)
	if err != nil {
		f.log.Debug("forwarding a heartbeat", "device", deviceID, "err", err)
		return
	}
	f.add(KindHeartbeat, deviceID, payload)
}

// add admits one message; refusals are counted by the backlog (Dropped).
func (f *Forwarder) add(kind byte, deviceID string, payload []byte) {
	if !backlog.KeyOK(deviceID) {
		f.log.Warn("not forwarding: the device id cannot be a topic level", "device", deviceID)
		return
	}
	_ = f.b.Add(kind, deviceID, payload)
}

// Start publishes the backlog through pub, in order, until ctx ends; Wait waits for it.
func (f *Forwarder) Start(ctx context.Context, pub publish.Publisher) { f.b.Start(ctx, pub) }

// Wait returns once what Start began has ended.
func (f *Forwarder) Wait() { f.b.Wait() }

// Close appends the records of the messages not yet written, then flushes and closes the
// log; Start's goroutines must have ended. Messages from then on are not taken.
func (f *Forwarder) Close() error { return f.b.Close() }

// Backlog is the forwarder's backlog (stats, entries, the journal's health).
func (f *Forwarder) Backlog() *backlog.Backlog { return f.b }
