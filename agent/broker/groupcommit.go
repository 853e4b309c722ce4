package broker

import (
	"errors"
	"log/slog"
	"reflect"
	"sync"
	"unsafe"

	"github.com/mochi-mqtt/server/v2/hooks/storage/bolt"
	"go.etcd.io/bbolt"
)

// Group commit of in-flight message records.
//
// mochi's bolt hook makes one fsynced bbolt transaction per QoS 1/2 message it puts in
// flight for a kept session and one more when the message is acknowledged: a back office
// with a persistent session bounded the agent to about 270 tasks a second. The session
// store sends those writes to one committer goroutine instead, which writes everything
// queued meanwhile in one transaction as soon as the previous one is on disk (no timer: a
// lone write goes out at once, and the batch grows with the load). In a batch only the
// last operation on a key counts, and a delete of a record never written is dropped, so a
// message acknowledged before its record was committed costs nothing. Deletes are never
// waited for (losing one redelivers a message after a crash: at-least-once allows it).
// Puts are waited for when the message came from Server().Publish (the agent marks a
// result reported once Publish returns); not for Broker.PublishDeferred, whose caller calls
// Broker.SyncSessions once for a batch; nor for a message from a network client: mochi
// acknowledged that publisher before routing, and the state store's responses are
// answers a client asks again for.

// sessionsBucket is the bbolt bucket of the sessions file: mochi's default.
const sessionsBucket = "mochi"

// maxQueuedWrites bounds the writes waiting for the committer; a publisher that finds the
// queue full waits (its read loop, or its Publish call).
const maxQueuedWrites = 4096

// boltDB returns the database a started bolt hook holds (an unexported field in mochi
// v2.7.9; TestGroupCommitLayout checks it).
func boltDB(h *bolt.Hook) (*bbolt.DB, error) {
	f := reflect.ValueOf(h).Elem().FieldByName("db")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*bbolt.DB]() {
		return nil, errors.New("broker: mochi's bolt hook is not laid out as v2.7.9's (Hook.db)")
	}
	db := *(**bbolt.DB)(unsafe.Pointer(f.UnsafeAddr()))
	if db == nil {
		return nil, errors.New("broker: the sessions database is not open")
	}
	return db, nil
}

// write is one queued change of an in-flight record; value nil deletes it.
type write struct {
	key   string
	value []byte
}

// committer writes queued in-flight records in group commits.
type committer struct {
	db  *bbolt.DB
	log *slog.Logger

	mu        sync.Mutex
	cond      *sync.Cond // queue grew, a commit finished, or closing
	queue     []write
	queued    uint64              // writes ever queued
	committed uint64              // writes ever committed (or failed)
	onDisk    map[string]struct{} // in-flight keys in the database
	err       error               // the last failed commit's error, until a commit succeeds
	closed    bool
	done      chan struct{}

	commits uint64 // transactions made (tests, benchmarks)
}

func newCommitter(db *bbolt.DB, onDisk map[string]struct{}, log *slog.Logger) *committer {
	c := &committer{db: db, log: log, onDisk: onDisk, done: make(chan struct{})}
	if c.onDisk == nil {
		c.onDisk = make(map[string]struct{})
	}
	c.cond = sync.NewCond(&c.mu)
	go c.run()
	return c
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

// wait returns once the write numbered seq is committed, with the error of the commit
// that failed last, if it did.
func (c *committer) wait(seq uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.committed < seq {
		c.cond.Wait()
	}
	return c.err
}

// sync waits for everything queued so far.
func (c *committer) sync() error {
	c.mu.Lock()
	seq := c.queued
	c.mu.Unlock()
	return c.wait(seq)
}

// close commits what is queued and stops the committer.
func (c *committer) close() {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	<-c.done
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
		c.committed = upTo
		c.err = err
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// commit writes the last change of each key in batch in one transaction; nothing at all
// when every change deletes a record that was never written.
func (c *committer) commit(batch []write) error {
	last := make(map[string]int, len(batch))
	for i, w := range batch {
		last[w.key] = i
	}
	c.mu.Lock()
	effective := batch[:0:0]
	for i, w := range batch {
		if last[w.key] != i {
			continue
		}
		if _, ok := c.onDisk[w.key]; w.value == nil && !ok {
			continue
		}
		effective = append(effective, w)
	}
	c.mu.Unlock()
	if len(effective) == 0 {
		return nil
	}
	err := c.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte(sessionsBucket))
		if b == nil {
			return bolt.ErrBucketNotFound
		}
		for _, w := range effective {
			var err error
			if w.value == nil {
				err = b.Delete([]byte(w.key))
			} else {
				err = b.Put([]byte(w.key), w.value)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	c.mu.Lock()
	c.commits++
	if err == nil {
		for _, w := range effective {
			if w.value == nil {
				delete(c.onDisk, w.key)
			} else {
				c.onDisk[w.key] = struct{}{}
			}
		}
	}
	c.mu.Unlock()
	if err != nil {
		c.log.Error("broker: writing in-flight messages to the sessions file failed", "records", len(effective), "error", err)
	}
	return err
}

// onDiskHas reports whether key is in the database as far as the committer knows (tests).
func (c *committer) onDiskHas(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.onDisk[key]
	return ok
}
