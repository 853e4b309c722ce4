package report

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/publish"
)

// DeadLetterDir is the deadletter log's directory inside agent.data_dir.
const DeadLetterDir = "deadletter"

// Bounds of the deadletter backlog (deadletters journalled, not yet accepted upstream).
// A task message whose refused tasks do not fit is not acknowledged, so the back office
// (or its broker) keeps it and sends it again; see DeadLetters.Room.
const (
	MaxDeadLetters     = 4096
	MaxDeadLetterBytes = 4 << 20
	// CompactDeadLetters is how many dead records the log tolerates before a snapshot.
	CompactDeadLetters = 1024
	// DeadLetterBatch is how many deadletters a publishing round takes, at least.
	DeadLetterBatch = 64
)

// deadLetterKind is the record kind of a deadletter.
const deadLetterKind = 'A'

// ErrDeadLetterBacklog is returned when the deadletters of a message do not fit in the
// backlog: the message is not acknowledged (it is delivered again later).
var ErrDeadLetterBacklog = errors.New("agent: deadletter backlog full (the upstream broker is not taking them); message not acknowledged")

// DeadLetterOptions configure the deadletter log.
type DeadLetterOptions struct {
	Journal journal.Options // backlog.SegmentSize segments
	Topic   string          // faceagent/{gw}/deadletter
	// MaxCount and MaxBytes bound the backlog (0: MaxDeadLetters, MaxDeadLetterBytes).
	MaxCount, MaxBytes int
	Logger             *slog.Logger
	Metrics            *DeadLetterMetrics
	// Observe is the backlog's hook (backlog.Options.Observe), for tests.
	Observe func(backlog.Event)
}

// DeadLetters is the durable queue of deadletters, which are reports: like results, kept
// in the journal until the upstream broker accepted them, and sent in order. It is a
// durable, unkeyed backlog (agent/backlog) of its own in data_dir/deadletter, beside the
// outbox's journal: a deadletter has no device, no message id and nothing to dispatch.
//
// The intake asks Room before it stores anything of a message, then Adds the message's
// deadletters and waits for them to be durable before the message is acknowledged.
type DeadLetters struct {
	b *backlog.Backlog
}

// OpenDeadLetters opens (or creates) the log in dir and rebuilds the backlog from it.
func OpenDeadLetters(dir string, o DeadLetterOptions) (*DeadLetters, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	topic := o.Topic
	b, err := backlog.Open(dir, backlog.Options{
		Journal: o.Journal, Kinds: []backlog.Kind{{Code: deadLetterKind, Name: "deadletter"}}, Durability: backlog.Durable(),
		MaxCount: orDefault(o.MaxCount, MaxDeadLetters), MaxBytes: orDefault(o.MaxBytes, MaxDeadLetterBytes), Policy: backlog.Refuse,
		CompactAfter: CompactDeadLetters, Batch: DeadLetterBatch,
		Topic: func(byte, string) string { return topic },
		OnFailed: func(err error, retryIn time.Duration) {
			log.Warn("publishing a deadletter failed; will retry", "in", retryIn, "err", err)
		},
		Observe: o.Observe, Metrics: o.Metrics.backlog(), Logger: log,
	})
	if err != nil {
		return nil, err
	}
	return &DeadLetters{b: b}, nil
}

// Room reports whether n more deadletters of size bytes fit in the backlog
// (ErrDeadLetterBacklog when not, counted). Checked before anything of a message is
// stored: a message that cannot be dead-lettered is refused whole, so its good tasks are
// not stored twice.
func (d *DeadLetters) Room(n, size int) error {
	if !d.b.Room(n, size) {
		return ErrDeadLetterBacklog
	}
	return nil
}

// Add journals the deadletters and returns once they are durable. It does not check the
// bound (Room does, before the message's tasks are stored).
func (d *DeadLetters) Add(payloads [][]byte) error { return d.b.AddAll(deadLetterKind, "", payloads) }

// Start publishes the backlog through pub, in order, until ctx ends; Wait waits for it.
func (d *DeadLetters) Start(ctx context.Context, pub publish.Publisher) { d.b.Start(ctx, pub) }

// Wait returns once what Start began has ended.
func (d *DeadLetters) Wait() { d.b.Wait() }

// Close flushes and closes the log; Start's goroutines must have ended.
func (d *DeadLetters) Close() error { return d.b.Close() }

// Backlog is the deadletters' backlog (stats, entries, bounds, the journal's health).
func (d *DeadLetters) Backlog() *backlog.Backlog { return d.b }

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
