package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// Group commit of session records.
//
// A kept session needs a record for every QoS 1/2 message put in flight and a deletion when
// it is acknowledged; fsynced one by one, they would bound a back office with a persistent
// session by the disk's fsync rate. So the session store sends every change to one
// committer goroutine, which writes everything queued meanwhile as one journal
// record, with one fsync, as soon as the previous one is on disk (no timer: a lone write
// goes out at once, and the batch grows with the load). In a batch only the last change of
// a key counts, and a delete of a record never written is dropped, so a message
// acknowledged before its record was committed costs nothing. In-flight deletes are never
// waited for (losing one redelivers a message after a crash: at-least-once allows it).
// In-flight puts are waited for when the message came from Server().Publish (the agent
// marks a result reported once Publish returns); not for Broker.PublishDeferred, whose
// caller calls Broker.SyncSessions once for a batch. A network client's QoS 1/2 message is
// waited for once, after it is routed to every subscriber (sessionStore.WaitBeforeAck),
// before mochi writes its PUBACK: the records of all its kept sessions share one commit.
// So are its retained messages. A state store answer is waited for in the same way by its
// request's PUBACK (the requester's WaitBeforeAck; a persistent change's answer once the
// service's wait for it is over, answerwait.go). Clients (before CONNACK) and subscriptions
// (before SUBACK) are rare and always waited for, and refused to the client when they
// could not be written.
//
// The committer also holds the live records (the journal's state) in memory. With them it
// compacts the journal in the background (sessioncompact.go), and after a failed write it
// gets the journal going again by itself once space is back (sessionfail.go).

// maxQueuedWrites and maxQueuedWriteBytes bound the writes waiting for the committer, in
// number and in bytes (keys and values; one larger write goes when the queue is empty); a
// publisher that finds the queue full waits (its read loop, or its Publish call). With the
// batch being committed, the committer holds at most twice that. The byte bound matters
// when an fsync is slow and messages are large: 4,096 records of 1 MiB messages would be
// 4 GiB.
const (
	maxQueuedWrites     = 4096
	maxQueuedWriteBytes = 4 << 20
)

// maxBatchRecord is the size past which a group commit is split into several journal
// records (all appended, then one wait: still one fsync in the common case).
const maxBatchRecord = 1 << 20

// DefaultSessionsSegmentSize is the sessions journal's segment size when
// Options.SessionsSegmentSize is 0. Small, for a gateway's flash: the open segment's
// blocks are reserved at its creation, and compaction waits for this many dead bytes.
const DefaultSessionsSegmentSize = 4 << 20

// sessionsMaxRecord is the journal's MaxRecordSize: one session record (a message with its
// properties) larger than this cannot be stored.
const sessionsMaxRecord = 16 << 20

// errRecordTooLarge is returned for a record over sessionsMaxRecord: it is not queued.
var errRecordTooLarge = fmt.Errorf("broker: session record larger than %d bytes", sessionsMaxRecord)

// write is one queued change: a put or delete of key, or (dropClient) the deletion of
// every record of a client id, then the put of key when it is set too: one change, so that
// a clean start's deletion of the old session and the new session's client record are
// written together or not at all.
type write struct {
	key        string
	value      []byte // nil: delete
	dropClient string // non-empty: delete all records of this client first
}

// committer writes queued session records in group commits and mirrors the live ones.
type committer struct {
	j      *journal.Journal
	log    *slog.Logger
	signal *healthSignal // told when the journal begins refusing writes and when it takes them again
	// minDead is the least number of dead bytes a compaction waits for: the journal's
	// segment size (sessioncompact.go).
	minDead int64

	mu          sync.Mutex
	cond        *sync.Cond // queue grew, a commit finished, a retry is due, or closing
	queue       []write
	queuedBytes int            // keys and values in queue
	queued      uint64         // writes ever queued
	committed   uint64         // writes ever committed (or failed)
	failed      []failedWrites // the writes whose commit failed, oldest first (at most maxFailedRanges)
	forgotten   failedWrites   // the latest range that maxFailedRanges pushed out of failed
	lastErr     error          // the latest commit's error (sync)
	closed      bool
	started     bool // run was started (set before, by the owner)
	done        chan struct{}

	// The live records as committed, each client's keys in them, and the bytes they take
	// in a snapshot. Written only by the committer goroutine (and before it starts), under
	// mu; that goroutine reads them without it.
	live      map[string][]byte
	byClient  map[string]map[string]struct{}
	liveBytes int64

	compaction compaction // sessioncompact.go
	health     health     // sessionfail.go

	commits uint64 // group commits written (tests, benchmarks)
}

// failedWrites are the writes numbered from..to, whose commit failed with err.
type failedWrites struct {
	from, to uint64
	err      error
}

// maxFailedRanges bounds committer.failed: commits that fail one after another (a journal
// that failed for good) extend one range; only failures between successes add ranges.
const maxFailedRanges = 64

func newCommitter(j *journal.Journal, log *slog.Logger) *committer {
	c := &committer{j: j, log: log, done: make(chan struct{}), minDead: DefaultSessionsSegmentSize,
		live: make(map[string][]byte), byClient: make(map[string]map[string]struct{})}
	c.cond = sync.NewCond(&c.mu)
	c.health.init()
	return c
}

// replay loads the journal's records; call before start. With bounds, only the changes it
// admits are applied (restorebounds.go).
func (c *committer) replay(bounds *restoreBounds) error {
	return c.j.Replay(func(rec []byte) error {
		return decodeSessionOps(rec, func(op sessionOp) error {
			if bounds == nil || bounds.admit(op) {
				c.apply(op)
			}
			return nil
		})
	})
}

// apply makes op part of the live state (caller: the committer goroutine, or replay).
func (c *committer) apply(op sessionOp) {
	old, had := c.live[op.key]
	if had {
		c.liveBytes -= snapshotRecordSize(op.key, old)
	}
	client := keyClient(op.key)
	if op.value == nil {
		if had {
			delete(c.live, op.key)
			if keys := c.byClient[client]; keys != nil {
				delete(keys, op.key)
				if len(keys) == 0 {
					delete(c.byClient, client)
				}
			}
		}
		return
	}
	c.live[op.key] = op.value
	c.liveBytes += snapshotRecordSize(op.key, op.value)
	if client != "" {
		keys := c.byClient[client]
		if keys == nil {
			keys = make(map[string]struct{})
			c.byClient[client] = keys
		}
		keys[op.key] = struct{}{}
	}
}

// snapshotRecordSize is what the record key=value takes in a snapshot: one journal frame
// holding one put (appendSessionOps).
func snapshotRecordSize(key string, value []byte) int64 {
	return int64(journal.FrameOverhead + 2 + uvarintLen(len(key)) + len(key) + uvarintLen(len(value)) + len(value))
}

func uvarintLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n))
}

// start starts the committer goroutine (after replay).
func (c *committer) start() {
	c.started = true
	go c.run()
}

// enqueue queues w and returns its sequence number for wait; journal.ErrClosed once
// closed, errRecordTooLarge for a record the journal could not take (not queued).
func (c *committer) enqueue(w write) (uint64, error) {
	if w.value != nil && opSize(sessionOp{key: w.key, value: w.value}) > sessionsMaxRecord {
		return 0, errRecordTooLarge
	}
	n := len(w.key) + len(w.value)
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.roomFor(n) && !c.closed {
		c.cond.Wait()
	}
	if c.closed {
		return 0, journal.ErrClosed
	}
	c.queue = append(c.queue, w)
	c.queuedBytes += n
	c.queued++
	c.cond.Broadcast()
	return c.queued, nil
}

// roomFor reports whether a write of n bytes fits in the queue now. Called with mu held.
func (c *committer) roomFor(n int) bool {
	return len(c.queue) < maxQueuedWrites && (c.queuedBytes == 0 || c.queuedBytes+n <= maxQueuedWriteBytes)
}

// enqueueWait queues w and waits for its commit.
func (c *committer) enqueueWait(w write) error {
	seq, err := c.enqueue(w)
	if err != nil {
		return err
	}
	return c.wait(seq)
}

// wait returns once the write numbered seq is committed, with the error of its commit if
// that failed. A later commit that succeeded does not hide it: the write is not on disk.
func (c *committer) wait(seq uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.committed < seq {
		c.cond.Wait()
	}
	return c.failedSinceLocked(seq-1, seq)
}

// failedSinceLocked returns the error of a failed write numbered after from, up to to, if
// there is one (the latest). Called with mu held.
func (c *committer) failedSinceLocked(from, to uint64) error {
	for i := len(c.failed) - 1; i >= 0; i-- {
		f := c.failed[i]
		if f.to <= from {
			break
		}
		if f.from <= to {
			return f.err
		}
	}
	return nil
}

// recordFailure notes that the writes from..to failed with err. Called with mu held.
func (c *committer) recordFailure(from, to uint64, err error) {
	if n := len(c.failed); n > 0 && c.failed[n-1].to+1 == from {
		c.failed[n-1].to = to
		c.failed[n-1].err = err
		return
	}
	if len(c.failed) == maxFailedRanges {
		c.forgotten = c.failed[0]
		c.failed = append(c.failed[:0], c.failed[1:]...)
	}
	c.failed = append(c.failed, failedWrites{from: from, to: to, err: err})
}

// mark returns the number of writes queued so far, for syncSince.
func (c *committer) mark() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queued
}

// syncSince waits for everything queued so far and returns the error of a write queued
// after mark (mark's return) whose commit failed, if any: nil means that every write queued
// since mark is on disk.
func (c *committer) syncSince(mark uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	seq := c.queued
	for c.committed < seq {
		c.cond.Wait()
	}
	if c.forgotten.to > mark {
		return c.forgotten.err // one of the failures no longer listed was after mark
	}
	return c.failedSinceLocked(mark, seq)
}

// sync waits for everything queued so far, with the error of the commit of the last of
// it, or else of the latest commit, if that failed.
func (c *committer) sync() error {
	c.mu.Lock()
	seq := c.queued
	c.mu.Unlock()
	if err := c.wait(seq); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// hasClient reports whether client has committed records.
func (c *committer) hasClient(client string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byClient[client]) > 0
}

// committedValue returns the committed value of key (nil when there is none).
func (c *committer) committedValue(key string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live[key]
}

// onDiskHas reports whether key is committed (tests).
func (c *committer) onDiskHas(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.live[key]
	return ok
}

// records returns copies of the committed values whose keys are of kind, in key order.
func (c *committer) records(kind byte) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0)
	for k := range c.live {
		if k[0] == kind {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = c.live[k]
	}
	return vals
}

// close commits what is queued, stops the committer and closes the journal.
func (c *committer) close() error {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	if c.started {
		<-c.done
	}
	c.health.stop()
	c.waitCompaction()
	return c.j.Close()
}

func (c *committer) run() {
	defer close(c.done)
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closed && !c.health.retryDueLocked() {
			c.cond.Wait()
		}
		if len(c.queue) == 0 && c.closed {
			c.mu.Unlock()
			return
		}
		batch, upTo := c.queue, c.queued
		c.queue, c.queuedBytes = nil, 0
		c.cond.Broadcast() // room in the queue
		retry := c.health.broken != nil && (c.closed || c.health.retryDueLocked())
		c.mu.Unlock()

		if retry {
			c.recover() // Close tries once more whatever the backoff says
		}
		if len(batch) == 0 {
			continue // a retry was due, nothing queued
		}
		err := c.brokenErr()
		if err == nil {
			if err = c.commit(batch); err != nil {
				c.fail(err)
			}
		}
		if err != nil {
			c.refuse(batch)
		}

		c.mu.Lock()
		if err != nil {
			c.recordFailure(c.committed+1, upTo, err)
		}
		c.lastErr = err
		c.committed = upTo
		if err == nil {
			c.health.backoff = retryFirst // the next failure's backoff starts over
		}
		c.cond.Broadcast()
		c.mu.Unlock()
		if err == nil {
			c.maybeCompact()
		}
	}
}

// effective reduces batch to the last change of each key, in the order of those last
// changes, leaving out deletes of records that are not committed.
func (c *committer) effective(batch []write) []sessionOp {
	pending := make(map[string]int, len(batch)) // key → index in ops
	var ops []sessionOp
	set := func(key string, value []byte) {
		if i, ok := pending[key]; ok {
			ops[i].key = "" // superseded
		}
		pending[key] = len(ops)
		ops = append(ops, sessionOp{key: key, value: value})
	}
	for _, w := range batch {
		if w.dropClient == "" {
			set(w.key, w.value)
			continue
		}
		var drop []string
		for k := range c.byClient[w.dropClient] {
			drop = append(drop, k)
		}
		for k, i := range pending {
			if ops[i].value != nil && keyClient(k) == w.dropClient {
				drop = append(drop, k)
			}
		}
		slices.Sort(drop)
		for _, k := range drop {
			set(k, nil)
		}
		if w.key != "" {
			set(w.key, w.value)
		}
	}
	out := ops[:0]
	for _, op := range ops {
		if op.key == "" {
			continue
		}
		if _, ok := c.live[op.key]; op.value == nil && !ok {
			continue
		}
		out = append(out, op)
	}
	return out
}

// commit writes the effective changes of batch and waits for them to be durable; nothing
// at all when every change deletes a record that was never written. An error is the
// journal's: it refuses appends from then on (sessionfail.go gets it going again).
func (c *committer) commit(batch []write) error {
	ops := c.effective(batch)
	if len(ops) == 0 {
		return nil
	}
	var last journal.Seq
	var err error
	rec := make([]byte, 0, 512)
	for start := 0; start < len(ops) && err == nil; {
		end, size := start, 1
		for end < len(ops) && (end == start || size+opSize(ops[end]) <= maxBatchRecord) {
			size += opSize(ops[end])
			end++
		}
		rec = appendSessionOps(rec[:0], ops[start:end])
		last, err = c.j.AppendAsync(rec)
		start = end
	}
	if err == nil {
		err = c.j.Wait(last)
	}
	c.mu.Lock()
	c.commits++
	if err == nil {
		for _, op := range ops {
			c.apply(op)
		}
	}
	c.mu.Unlock()
	if err != nil && !errors.Is(err, journal.ErrNoSpace) && !errors.Is(err, journal.ErrFailed) && !errors.Is(err, journal.ErrClosed) {
		// Not the journal refusing appends (an append refused on its own): say so, the
		// journal does not.
		c.log.Error("broker: writing to the sessions journal failed", "records", len(ops), "error", err)
	}
	return err
}
