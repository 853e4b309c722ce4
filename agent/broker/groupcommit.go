package broker

import (
	"log/slog"
	"slices"
	"sync"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// Group commit of session records.
//
// A record for every QoS 1/2 message put in flight for a kept session and a deletion when
// it is acknowledged, each fsynced on its own, bounded a back office with a persistent
// session to a few hundred tasks a second. The session store sends every change to one
// committer goroutine instead, which writes everything queued meanwhile as one journal
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
// A state store answer is waited for in the same way by its request's PUBACK (the
// requester's WaitBeforeAck; a persistent change's answer once the service's wait for it
// is over, answerwait.go). Clients, subscriptions and retained
// messages are rare and always waited for, as each was its own transaction before.
//
// The committer also holds the live records (the journal's state) in memory: a snapshot
// replaces the log once dead records outnumber live ones compactFactor times.

// maxQueuedWrites bounds the writes waiting for the committer; a publisher that finds the
// queue full waits (its read loop, or its Publish call).
const maxQueuedWrites = 4096

// Compaction: a snapshot is written when more than compactMinDead records are dead and
// they outnumber the live ones compactFactor times, so the journal stays within about
// (compactFactor+1) times the live state plus compactMinDead records.
const (
	compactFactor  = 4
	compactMinDead = 4096
)

// maxBatchRecord is the size past which a group commit is split into several journal
// records (all appended, then one wait: still one fsync in the common case).
const maxBatchRecord = 1 << 20

// write is one queued change: a put or delete of key, or (dropClient) the deletion of
// every record of a client id.
type write struct {
	key        string
	value      []byte // nil: delete
	dropClient string // non-empty: delete all records of this client (key unused)
}

// committer writes queued session records in group commits and mirrors the live ones.
type committer struct {
	j   *journal.Journal
	log *slog.Logger

	mu        sync.Mutex
	cond      *sync.Cond // queue grew, a commit finished, or closing
	queue     []write
	queued    uint64         // writes ever queued
	committed uint64         // writes ever committed (or failed)
	failed    []failedWrites // the writes whose commit failed, oldest first (at most maxFailedRanges)
	lastErr   error          // the latest commit's error (sync)
	closed    bool
	started   bool // run was started (set before, by the owner)
	done      chan struct{}

	// The live records as committed, and each client's keys in them. Written only by the
	// committer goroutine (and before it starts), under mu.
	live     map[string][]byte
	byClient map[string]map[string]struct{}
	dead     int // records in the journal that a later record replaced or deleted

	commits   uint64 // group commits written (tests, benchmarks)
	snapshots uint64 // compactions (tests)
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
	c := &committer{j: j, log: log, done: make(chan struct{}),
		live: make(map[string][]byte), byClient: make(map[string]map[string]struct{})}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// replay loads the journal's records; call before start.
func (c *committer) replay() error {
	return c.j.Replay(func(rec []byte) error {
		return decodeSessionOps(rec, func(op sessionOp) error {
			c.apply(op)
			return nil
		})
	})
}

// apply makes op part of the live state (caller: the committer goroutine, or replay).
func (c *committer) apply(op sessionOp) {
	_, had := c.live[op.key]
	if had {
		c.dead++ // the record op replaces or deletes
	}
	client := keyClient(op.key)
	if op.value == nil {
		if had {
			c.dead++ // the delete record itself
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
	if client != "" {
		keys := c.byClient[client]
		if keys == nil {
			keys = make(map[string]struct{})
			c.byClient[client] = keys
		}
		keys[op.key] = struct{}{}
	}
}

// start starts the committer goroutine (after replay).
func (c *committer) start() {
	c.started = true
	go c.run()
}

// enqueue queues w and returns its sequence number for wait; false once closed.
func (c *committer) enqueue(w write) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.queue) >= maxQueuedWrites && !c.closed {
		c.cond.Wait()
	}
	if c.closed {
		return 0, false
	}
	c.queue = append(c.queue, w)
	c.queued++
	c.cond.Broadcast()
	return c.queued, true
}

// enqueueWait queues w and waits for its commit.
func (c *committer) enqueueWait(w write) error {
	seq, ok := c.enqueue(w)
	if !ok {
		return journal.ErrClosed
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
	for i := len(c.failed) - 1; i >= 0; i-- {
		if f := c.failed[i]; seq >= f.from && seq <= f.to {
			return f.err
		} else if seq > f.to {
			break
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
		c.failed = append(c.failed[:0], c.failed[1:]...)
	}
	c.failed = append(c.failed, failedWrites{from: from, to: to, err: err})
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
	return c.j.Close()
}

func (c *committer) run() {
	defer close(c.done)
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closed {
			c.cond.Wait()
		}
		if len(c.queue) == 0 {
			c.mu.Unlock()
			return
		}
		batch, upTo := c.queue, c.queued
		c.queue = nil
		c.cond.Broadcast() // room in the queue
		c.mu.Unlock()

		err := c.commit(batch)

		c.mu.Lock()
		if err != nil {
			c.recordFailure(c.committed+1, upTo, err)
		}
		c.lastErr = err
		c.committed = upTo
		c.cond.Broadcast()
		c.mu.Unlock()
		if err == nil && c.dead > compactMinDead && c.dead > compactFactor*len(c.live) {
			c.compact()
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
// at all when every change deletes a record that was never written.
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
	if err != nil {
		c.log.Error("broker: writing to the sessions journal failed", "records", len(ops), "error", err)
	}
	return err
}

// compact replaces the journal by a snapshot of the live records. Only the committer
// appends, so nothing races with the checkpoint; the live map changes only here, on this
// goroutine, so it is read without the lock.
func (c *committer) compact() {
	cp, err := c.j.Checkpoint()
	if err == nil {
		var rec []byte
		err = c.j.WriteSnapshot(cp, func(emit func([]byte) error) error {
			for k, v := range c.live {
				rec = appendSessionOps(rec[:0], []sessionOp{{key: k, value: v}})
				if err := emit(rec); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		c.log.Warn("broker: compacting the sessions journal failed; trying again later", "error", err)
		c.mu.Lock()
		c.dead = 0 // try again after as many dead records as it took this time
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	c.dead = 0
	c.snapshots++
	c.mu.Unlock()
}
