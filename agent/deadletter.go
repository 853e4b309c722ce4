package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/publish"
)

// DeadLetterDir is the deadletter log's directory inside agent.data_dir.
const DeadLetterDir = "deadletter"

// Bounds of the deadletter backlog (deadletters journalled, not yet accepted upstream).
// A task message whose refused tasks do not fit is not acknowledged, so the back office
// (or its broker) keeps it and sends it again; see deadLetterLog.room.
const (
	maxDeadLetters     = 4096
	maxDeadLetterBytes = 4 << 20
)

// errDeadLetterBacklog is returned by the intake when the deadletters of a message do not
// fit in the backlog: the message is not acknowledged (it is delivered again later).
var errDeadLetterBacklog = errors.New("agent: deadletter backlog full (the upstream broker is not taking them); message not acknowledged")

// deadLetterLog is the durable queue of deadletters, which are reports (docs/design.md
// "Reports"): like results, kept in the journal until the upstream broker accepted them
// and sent in order.
//
// It is a journal of its own (data_dir/deadletter, package agent/journal) beside the
// outbox's. The outbox's journal holds the outbox's versioned msgp table records; a
// deadletter has no device, no message id and nothing to dispatch, so it would only be
// a foreign record kind there. Two record kinds live here:
//
//	add       version 1, 'A', uvarint id, payload (the deadletter JSON)
//	reported  version 1, 'R', uvarint id: every add with an id <= id was accepted upstream
//
// The intake appends the adds and waits for the fsync before the task message is
// acknowledged (in the same accept call that stored the message's good tasks). One
// goroutine publishes the backlog in id order with QoS 1 and appends a reported record
// (lazily: losing it in a crash only sends the deadletter twice) once the broker took
// them. Replay rebuilds the backlog; a snapshot replaces the log when most of it is dead.
type deadLetterLog struct {
	j     *journal.Journal
	pub   publisher
	topic string
	log   *slog.Logger
	m     *agentMetrics

	maxCount, maxBytes int // backlog bounds; defaults maxDeadLetters, maxDeadLetterBytes

	mu      sync.Mutex
	pending []deadLetter // not yet accepted upstream, in id order
	bytes   int          // payload bytes in pending
	nextID  uint64
	records int // records in the journal since the last snapshot (or Open)

	ready    chan struct{} // capacity 1: poked when pending grows
	reported chan struct{} // capacity 1: poked after deadletters were marked reported (tests)
	wg       sync.WaitGroup
}

type deadLetter struct {
	id      uint64
	payload []byte
}

const (
	deadRecordVersion  = 1
	deadRecordAdd      = 'A'
	deadRecordReported = 'R'
)

// compactDeadLetters is how many dead records the log tolerates before a snapshot.
const compactDeadLetters = 1024

// appendDeadRecord encodes one record onto dst.
func appendDeadRecord(dst []byte, kind byte, id uint64, payload []byte) []byte {
	dst = append(dst, deadRecordVersion, kind)
	dst = binary.AppendUvarint(dst, id)
	return append(dst, payload...)
}

// parseDeadRecord decodes one record; payload aliases rec.
func parseDeadRecord(rec []byte) (kind byte, id uint64, payload []byte, err error) {
	if len(rec) < 3 {
		return 0, 0, nil, fmt.Errorf("deadletter record of %d bytes is too short", len(rec))
	}
	if rec[0] != deadRecordVersion {
		return 0, 0, nil, fmt.Errorf("deadletter record version %d is unknown", rec[0])
	}
	kind = rec[1]
	id, n := binary.Uvarint(rec[2:])
	if n <= 0 {
		return 0, 0, nil, errors.New("deadletter record: bad id")
	}
	payload = rec[2+n:]
	switch kind {
	case deadRecordAdd:
		if len(payload) == 0 {
			return 0, 0, nil, errors.New("deadletter record: empty payload")
		}
	case deadRecordReported:
		if len(payload) != 0 {
			return 0, 0, nil, errors.New("deadletter record: trailing bytes after a reported mark")
		}
	default:
		return 0, 0, nil, fmt.Errorf("deadletter record kind %q is unknown", kind)
	}
	return kind, id, payload, nil
}

// openDeadLetters opens (or creates) the log in dir and rebuilds the backlog from it.
func openDeadLetters(dir string, jo journal.Options, pub publisher, topic string, m *agentMetrics, log *slog.Logger) (*deadLetterLog, error) {
	jo.Logger = log
	j, err := journal.Open(dir, &jo)
	if err != nil {
		return nil, err
	}
	d := &deadLetterLog{j: j, pub: pub, topic: topic, log: log, m: m, nextID: 1,
		maxCount: maxDeadLetters, maxBytes: maxDeadLetterBytes, ready: make(chan struct{}, 1), reported: make(chan struct{}, 1)}
	err = j.Replay(func(rec []byte) error {
		kind, id, payload, err := parseDeadRecord(rec)
		if err != nil {
			return err
		}
		d.records++
		d.nextID = max(d.nextID, id+1)
		if kind == deadRecordAdd {
			d.pending = append(d.pending, deadLetter{id: id, payload: append([]byte(nil), payload...)})
			d.bytes += len(payload)
			return nil
		}
		n := 0
		for n < len(d.pending) && d.pending[n].id <= id {
			d.bytes -= len(d.pending[n].payload)
			n++
		}
		d.pending = d.pending[n:]
		return nil
	})
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("replaying %s: %w", dir, err)
	}
	d.pending = append([]deadLetter(nil), d.pending...) // drop what the replay sliced off
	if len(d.pending) > 0 {
		log.Info("deadletters not yet reported upstream", "count", len(d.pending))
		d.ready <- struct{}{}
	}
	d.gauge()
	return d, nil
}

// room reports whether n more deadletters of size bytes fit in the backlog, and counts a
// refusal when they do not. Checked before anything of a message is stored: a message
// that cannot be dead-lettered is refused whole, so its good tasks are not stored twice.
func (d *deadLetterLog) room(n, size int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pending)+n > d.maxCount || d.bytes+size > d.maxBytes {
		d.m.deadLettersRefused.Inc()
		return errDeadLetterBacklog
	}
	return nil
}

// add journals the deadletters and returns once they are durable. It does not check the
// bound (room does, before the message's tasks are stored).
func (d *deadLetterLog) add(payloads [][]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	var last journal.Seq
	var buf []byte
	d.mu.Lock()
	for _, p := range payloads {
		buf = appendDeadRecord(buf[:0], deadRecordAdd, d.nextID, p)
		seq, err := d.j.AppendAsync(buf)
		if err != nil {
			d.mu.Unlock()
			return err
		}
		last = seq
		d.pending = append(d.pending, deadLetter{id: d.nextID, payload: p})
		d.bytes += len(p)
		d.nextID++
		d.records++
	}
	d.mu.Unlock()
	d.gauge()
	poke(d.ready)
	return d.j.Wait(last)
}

func (d *deadLetterLog) gauge() {
	d.mu.Lock()
	n := len(d.pending)
	d.mu.Unlock()
	d.m.deadLetterBacklog.Set(float64(n))
}

// start runs the publisher goroutine until ctx ends.
func (d *deadLetterLog) start(ctx context.Context) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		publishBacklog(ctx, d.ready, d.drain, func(err error, retryIn time.Duration) {
			d.log.Warn("publishing a deadletter failed; will retry", "in", retryIn, "err", err)
		})
	}()
}

const deadLetterBatch = 64

// drain publishes up to one batch from the head of the backlog in order, then marks what
// the broker took as reported. It returns whether more is waiting, and how many went.
func (d *deadLetterLog) drain(ctx context.Context) (more bool, sent int, err error) {
	d.mu.Lock()
	batch := d.pending[:min(len(d.pending), publish.BatchFor(d.pub, deadLetterBatch))]
	d.mu.Unlock()
	// In order, up to the publisher's window in flight; sent is the prefix accepted.
	mark := publish.MarkOf(d.pub)
	sent, err = publish.InOrder(ctx, d.pub, len(batch), func(i int) (string, []byte, bool) {
		return d.topic, batch[i].payload, false
	})
	if sent > 0 {
		if serr := publish.SyncSince(d.pub, mark); serr != nil {
			return true, 0, serr // not stored: sent again
		}
		d.m.deadLettersPublished.Add(uint64(sent))
		if merr := d.markReported(batch[sent-1].id, sent); merr != nil && err == nil {
			err = merr
		}
	}
	d.mu.Lock()
	more = len(d.pending) > 0
	d.mu.Unlock()
	return more && err == nil, sent, err
}

// markReported drops the first n deadletters (ids up to id) from the backlog and records
// that; it compacts the log when compactDeadLetters of its records are dead, or more dead
// bytes than both a segment and the backlog (deadBytesDue).
func (d *deadLetterLog) markReported(id uint64, n int) error {
	d.mu.Lock()
	for _, dl := range d.pending[:n] {
		d.bytes -= len(dl.payload)
	}
	d.pending = d.pending[n:]
	if len(d.pending) == 0 {
		d.pending = nil // let the backing array go
	}
	_, err := d.j.AppendLazy(appendDeadRecord(nil, deadRecordReported, id, nil))
	d.records++
	compact := d.records-len(d.pending) >= compactDeadLetters ||
		deadBytesDue(d.j, int64(d.bytes+len(d.pending)*recordOverhead), smallLogSegment)
	d.mu.Unlock()
	d.gauge()
	poke(d.reported)
	if err != nil {
		return err
	}
	if compact {
		if err := d.compact(); err != nil {
			d.log.Error("compacting the deadletter log failed; it keeps growing until the next try", "err", err)
		}
	}
	return nil
}

// compact replaces the log by the backlog (a snapshot of its adds).
func (d *deadLetterLog) compact() error {
	d.mu.Lock()
	cp, err := d.j.Checkpoint() // under the lock: no add may land between it and the copy
	if err != nil {
		d.mu.Unlock()
		return err
	}
	live := append([]deadLetter(nil), d.pending...)
	d.records = len(live)
	d.mu.Unlock()
	var buf []byte
	return d.j.WriteSnapshot(cp, func(emit func([]byte) error) error {
		for _, dl := range live {
			buf = appendDeadRecord(buf[:0], deadRecordAdd, dl.id, dl.payload)
			if err := emit(buf); err != nil {
				return err
			}
		}
		return nil
	})
}

// close flushes and closes the log; the publisher goroutine must have ended.
func (d *deadLetterLog) close() error { return d.j.Close() }
