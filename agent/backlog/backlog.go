package backlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/publish"
)

// SegmentSize is the journal segment size a backlog's journal should use: backlogs hold
// little and compact often. It is also the floor of the dead-bytes compaction rule.
const SegmentSize = 4 << 20

// Errors of Add.
var (
	// ErrFull: the bound is reached and no droppable entry is left (DropOldest).
	ErrFull = errors.New("backlog: full")
	// ErrBadKey: the key cannot be a topic level (KeyOK), so replay could not read it.
	ErrBadKey = errors.New("backlog: the key cannot be a topic level")
	// ErrClosed: Close began.
	ErrClosed = errors.New("backlog: closed")
)

// Kind is one kind of entry a backlog holds.
type Kind struct {
	// Code is the kind's byte in records: anything but 'R' and 'S' (the backlog's marks).
	Code byte
	// Name labels the kind in Metrics.PublishedByKind.
	Name string
	// Coalesce: a new entry replaces the live entry of the same kind and key not yet sent.
	Coalesce bool
	// Droppable: the DropOldest policy may drop it, oldest first, to make room.
	Droppable bool
}

// Policy is what Add does when the backlog is full.
type Policy int

const (
	// Refuse: the caller asks Room before it commits to adding (a task message is not
	// acknowledged when its deadletters do not fit); Add itself admits what it is given.
	Refuse Policy = iota
	// DropOldest: Add drops the oldest droppable entries until the new one fits, and
	// refuses it (ErrFull) only when none is left.
	DropOldest
)

// Durability is when an entry's record reaches the journal.
type Durability struct{ delay time.Duration }

// Durable: Add appends the records at once and returns once the journal has them (per its
// sync policy).
func Durable() Durability { return Durability{delay: -1} }

// WriteBehind: Add returns at once; an entry's record is appended only once it has waited
// delay without being accepted upstream (0: at once, still without waiting for it).
func WriteBehind(delay time.Duration) Durability { return Durability{delay: max(0, delay)} }

// Event is what an Options.Observe hook is told.
type Event int

const (
	// Reported: entries were accepted upstream and left the backlog.
	Reported Event = iota
	// Written: write-behind appended records of entries that waited their delay.
	Written
	// Compacted: a snapshot replaced the journal (or failed to).
	Compacted
)

// Metrics are a backlog's series; each may be nil.
type Metrics struct {
	Live            *metrics.Gauge      // entries not yet accepted upstream
	Bytes           *metrics.Gauge      // their keys' and payloads' bytes
	Published       *metrics.Counter    // entries accepted upstream
	PublishedByKind *metrics.CounterVec // the same by Kind.Name
	Dropped         *metrics.CounterVec // entries not admitted or dropped, by reason: bound, refused, journal
	Coalesced       *metrics.Counter    // entries a newer one of the same kind and key replaced
	Refused         *metrics.Counter    // Room's refusals
}

// Options configure a backlog. Kinds and Topic are required.
type Options struct {
	// Journal configures the journal in the backlog's directory (SegmentSize: see
	// SegmentSize). Its LazyDelay is set to the write-behind delay when there is one.
	Journal journal.Options
	Kinds   []Kind
	// Keyed: entries carry a key (in their records: uvarint length, key).
	Keyed      bool
	Durability Durability
	// MaxCount and MaxBytes bound the live entries and their key and payload bytes;
	// Policy says what happens at the bound.
	MaxCount, MaxBytes int
	Policy             Policy
	// CompactAfter is how many dead records the journal tolerates before a snapshot
	// (default 1024); a snapshot is also due when its files hold more dead bytes than both
	// SegmentSize and the live entries.
	CompactAfter int
	// Topic is an entry's upstream topic; called on the publishing goroutine only.
	Topic func(kind byte, key string) string
	// Batch is how many entries one round publishes, at least (default 64; a larger
	// publisher window is used whole).
	Batch int
	// Gather is how long the publisher lets entries gather after the first (0: none).
	Gather time.Duration
	// OnFailed is told of a failed round and when it is retried (default: a warning).
	OnFailed func(err error, retryIn time.Duration)
	// Observe, if set, is told of Reported, Written and Compacted, after the fact and
	// without a lock held; it must not block. It is for instrumentation and tests.
	Observe func(Event)
	Metrics Metrics
	Logger  *slog.Logger
}

// Entry is one entry of the backlog.
type Entry struct {
	ID      uint64
	Kind    byte
	Key     string
	Payload []byte
}

// entry is Entry in memory: dead once payload is nil (superseded or dropped).
type entry struct {
	id      uint64
	kind    byte
	key     string
	payload []byte
	added   time.Duration // since Backlog.epoch (0: replayed)
}

func (e *entry) size() int { return len(e.key) + len(e.payload) }

// kind flags
const (
	flagKnown = 1 << iota
	flagCoalesce
	flagDroppable
)

type coalesceKey struct {
	kind byte
	key  string
}

// dropLogEvery spaces the log lines about entries dropped by the bound.
const dropLogEvery = 10 * time.Second

const (
	defaultCompactAfter = 1024
	defaultBatch        = 64
)

// Backlog is a journalled, ordered, bounded queue of messages for upstream; see the
// package documentation.
type Backlog struct {
	j          *journal.Journal
	opt        Options
	log        *slog.Logger
	m          Metrics
	flags      [256]uint8
	durable    bool
	writeDelay time.Duration

	mu       sync.Mutex
	maxCount int
	maxBytes int
	pending  []entry // in id order; dead entries (payload nil) until trimmed
	spare    []entry // a small backing array for pending, used again (resetPending)
	live     int     // entries in pending still to send
	dead     int     // entries in pending superseded or dropped
	bytes    int     // key and payload bytes of the live entries
	nextID   uint64
	records  int                    // records in the journal since the last snapshot (or Open)
	coalesce map[coalesceKey]uint64 // kind and key → the live coalescing entry's id
	dropScan int                    // pending[:dropScan] holds no live droppable entry
	// Every entry with an id above writtenThrough that is still live has no record yet;
	// lastWritten is the id of the last add record appended, reportedThrough that of the
	// last reported record (after replay: all of them as written).
	writtenThrough  uint64
	lastWritten     uint64
	reportedThrough uint64
	epoch           time.Time   // entry.added counts from here
	writeTimer      *time.Timer // runs writeDue; armed while unwritten live entries wait
	writeArmed      bool
	closing         bool      // Close began: adds are refused, writeDue does nothing
	journalErr      error     // the journal refused an append: adds are refused from then on
	droppedLog      uint64    // drops not yet logged
	lastLog         time.Time // last drop log line
	failedLog       bool      // the journal's refusal was logged
	scratch         []byte    // record encoding, under mu

	ready     chan struct{} // capacity 1: poked when the backlog grows
	compactC  chan struct{} // capacity 1: poked when a snapshot is due
	compactMu sync.Mutex    // one compaction at a time
	wg        sync.WaitGroup

	topics map[coalesceKey]string // the upstream topic per kind and key (Take's)
}

// Open opens (or creates) the backlog's journal in dir and rebuilds the backlog from it:
// the same admission rules (coalescing, the bound's drops) in the same order as when the
// entries were added.
func Open(dir string, opt Options) (*Backlog, error) {
	if len(opt.Kinds) == 0 || opt.Topic == nil {
		return nil, errors.New("backlog: Options.Kinds and Options.Topic are required")
	}
	b := &Backlog{opt: opt, log: opt.Logger, m: opt.Metrics, nextID: 1, maxCount: opt.MaxCount, maxBytes: opt.MaxBytes,
		coalesce: map[coalesceKey]uint64{}, epoch: time.Now(), ready: make(chan struct{}, 1),
		compactC: make(chan struct{}, 1), topics: map[coalesceKey]string{}}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	for _, k := range opt.Kinds {
		if k.Code == kindReported || k.Code == kindSeen {
			return nil, fmt.Errorf("backlog: kind %q is the backlog's own", k.Code)
		}
		f := uint8(flagKnown)
		if k.Coalesce {
			f |= flagCoalesce
		}
		if k.Droppable {
			f |= flagDroppable
		}
		b.flags[k.Code] = f
	}
	if b.opt.CompactAfter <= 0 {
		b.opt.CompactAfter = defaultCompactAfter
	}
	if b.opt.Batch <= 0 {
		b.opt.Batch = defaultBatch
	}
	b.durable = opt.Durability.delay < 0
	b.writeDelay = max(0, opt.Durability.delay)
	jo := opt.Journal
	jo.Logger = b.log
	if !b.durable && b.writeDelay > 0 {
		jo.LazyDelay = b.writeDelay
	}
	j, err := journal.Open(dir, &jo)
	if err != nil {
		return nil, err
	}
	b.j = j
	err = j.Replay(func(rec []byte) error {
		kind, id, key, payload, err := parseRecord(rec, opt.Keyed, b.isKind)
		if err != nil {
			return err
		}
		b.records++
		switch kind {
		case kindReported:
			b.removeReported(id)
			b.nextID = max(b.nextID, id+1)
		case kindSeen:
			b.nextID = max(b.nextID, id)
		default:
			if id < b.nextID {
				return nil // in the snapshot already: appended between its checkpoint and its capture
			}
			b.nextID = id + 1
			b.admit(entry{id: id, kind: kind, key: string(key), payload: append([]byte(nil), payload...)}, true)
		}
		return nil
	})
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("replaying %s: %w", dir, err)
	}
	b.pending = slices.Clip(b.pending)
	b.writtenThrough, b.lastWritten = b.nextID-1, b.nextID-1 // all of it is in the journal
	if b.live > 0 {
		b.log.Info("entries not yet accepted upstream", "count", b.live)
		b.ready <- struct{}{}
	}
	b.gauge()
	return b, nil
}

func (b *Backlog) isKind(k byte) bool { return b.flags[k]&flagKnown != 0 }

// Room reports whether n more entries of size bytes (keys and payloads) fit in the
// bound, and counts a refusal (Metrics.Refused) when they do not.
func (b *Backlog) Room(n, size int) bool {
	b.mu.Lock()
	ok := b.live+n <= b.maxCount && b.bytes+size <= b.maxBytes
	b.mu.Unlock()
	if !ok && b.m.Refused != nil {
		b.m.Refused.Inc()
	}
	return ok
}

// SetBounds changes the bounds; entries already in the backlog stay.
func (b *Backlog) SetBounds(maxCount, maxBytes int) {
	b.mu.Lock()
	b.maxCount, b.maxBytes = maxCount, maxBytes
	b.mu.Unlock()
}

// Add admits one entry. Durable: it returns once its record is in the journal (per the
// journal's sync policy). WriteBehind: it returns at once, never waiting for the disk or
// the publisher. The backlog keeps payload: the caller must not change it.
func (b *Backlog) Add(kind byte, key string, payload []byte) error {
	return b.add(kind, key, [][]byte{payload})
}

// AddAll admits several entries of one kind and key, in order; Durable: it returns once
// all their records are in the journal (one wait for all of them).
func (b *Backlog) AddAll(kind byte, key string, payloads [][]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	return b.add(kind, key, payloads)
}

func (b *Backlog) add(kind byte, key string, payloads [][]byte) error {
	if !b.isKind(kind) {
		return fmt.Errorf("backlog: kind %q is not one of the backlog's", kind)
	}
	if b.opt.Keyed && !KeyOK(key) || !b.opt.Keyed && key != "" {
		return ErrBadKey
	}
	for _, p := range payloads {
		if len(p) == 0 {
			return errors.New("backlog: empty payload")
		}
	}
	b.mu.Lock()
	if b.closing || b.journalErr != nil {
		err := b.journalErr
		if b.closing {
			err = ErrClosed
		}
		b.mu.Unlock()
		// Not admitted: the backlog in memory stays what the journal can say.
		b.countDropped("journal", len(payloads))
		return err
	}
	var last journal.Seq
	var dropped, refused int
	var err error
	for _, p := range payloads {
		id := b.nextID
		e := entry{id: id, kind: kind, key: key, payload: p, added: time.Since(b.epoch)}
		if b.durable {
			b.scratch = appendRecord(b.scratch[:0], b.opt.Keyed, kind, id, key, p)
			seq, aerr := b.j.AppendAsync(b.scratch)
			if aerr != nil {
				err = aerr
				break
			}
			last = seq
			b.records++
			b.writtenThrough, b.lastWritten = id, id
		}
		b.nextID++
		d, r := b.admit(e, false)
		dropped += d
		if r {
			refused++
		}
	}
	if !b.durable && refused < len(payloads) {
		if b.writeDelay == 0 {
			b.writeDueLocked()
		} else if !b.writeArmed {
			b.armWriteLocked(b.writeDelay)
		}
	}
	var logDrops uint64
	if dropped > 0 || refused > 0 {
		b.droppedLog += uint64(dropped + refused)
		if now := time.Now(); now.Sub(b.lastLog) >= dropLogEvery {
			logDrops, b.droppedLog, b.lastLog = b.droppedLog, 0, now
		}
	}
	compact := b.records-b.live >= b.opt.CompactAfter
	b.gaugeLocked()
	b.mu.Unlock()
	b.countDropped("bound", dropped)
	b.countDropped("refused", refused)
	if logDrops > 0 {
		b.log.Warn("backlog full (the upstream broker is not taking its messages); dropped the oldest droppable entries",
			"dropped", logDrops, "bound", b.maxCount, "bound_bytes", b.maxBytes)
	}
	poke(b.ready)
	if compact {
		poke(b.compactC)
	}
	if err != nil {
		return err
	}
	if b.durable && last != 0 {
		if err := b.j.Wait(last); err != nil {
			return err
		}
	}
	if refused > 0 {
		return ErrFull
	}
	return nil
}

func (b *Backlog) countDropped(reason string, n int) {
	if n > 0 && b.m.Dropped != nil {
		b.m.Dropped.With(reason).Add(uint64(n))
	}
}

// admit puts e into the backlog under the rules replay repeats: an entry of a coalescing
// kind replaces the live one of its kind and key; with DropOldest, while the backlog
// would be over a bound, the oldest live droppable entry is dropped, and when none is
// left e is refused. With Refuse the bound is Room's: e is admitted. Called with mu held
// (or in replay).
func (b *Backlog) admit(e entry, replay bool) (dropped int, refused bool) {
	size := e.size()
	oldAt := -1
	coalescing := b.flags[e.kind]&flagCoalesce != 0
	if coalescing {
		if old, ok := b.coalesce[coalesceKey{e.kind, e.key}]; ok {
			oldAt = b.indexOf(old)
		}
	}
	if b.opt.Policy == DropOldest {
		freeCount, freeBytes := 0, 0
		if oldAt >= 0 {
			freeCount, freeBytes = 1, b.pending[oldAt].size()
		}
		for b.live-freeCount+1 > b.maxCount || b.bytes-freeBytes+size > b.maxBytes {
			if !b.dropOldest() {
				return dropped, true
			}
			dropped++
		}
	}
	if oldAt >= 0 {
		b.kill(oldAt)
		if b.m.Coalesced != nil && !replay {
			b.m.Coalesced.Inc()
		}
	}
	b.pending = append(b.pending, e)
	b.live++
	b.bytes += size
	if coalescing {
		b.coalesce[coalesceKey{e.kind, e.key}] = e.id
	}
	if b.dead > 256 && b.dead > len(b.pending)/2 {
		b.trimDead()
	}
	return dropped, false
}

// indexOf finds the entry with id in pending (-1: not there).
func (b *Backlog) indexOf(id uint64) int {
	i, ok := slices.BinarySearchFunc(b.pending, id, func(e entry, id uint64) int { return cmpID(e.id, id) })
	if !ok {
		return -1
	}
	return i
}

func cmpID(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// dropOldest drops the oldest live droppable entry; false when there is none.
func (b *Backlog) dropOldest() bool {
	for i := b.dropScan; i < len(b.pending); i++ {
		if e := &b.pending[i]; b.flags[e.kind]&flagDroppable != 0 && e.payload != nil {
			b.kill(i)
			b.dropScan = i + 1
			return true
		}
	}
	b.dropScan = len(b.pending)
	return false
}

// kill marks pending[i] dead: superseded or dropped, it is not sent.
func (b *Backlog) kill(i int) {
	e := &b.pending[i]
	b.live--
	b.bytes -= e.size()
	b.dead++
	b.forgetCoalescing(e)
	e.payload = nil
}

func (b *Backlog) forgetCoalescing(e *entry) {
	if b.flags[e.kind]&flagCoalesce != 0 {
		k := coalesceKey{e.kind, e.key}
		if b.coalesce[k] == e.id {
			delete(b.coalesce, k)
		}
	}
}

// trimDead removes the dead entries from pending (they have no other trace in memory).
func (b *Backlog) trimDead() {
	live := make([]entry, 0, b.live+b.live/4)
	for _, e := range b.pending {
		if e.payload != nil {
			live = append(live, e)
		}
	}
	b.pending, b.dead, b.dropScan = live, 0, 0
}

// removeReported drops every entry with an id <= id from the head of pending.
func (b *Backlog) removeReported(id uint64) {
	n := 0
	for n < len(b.pending) && b.pending[n].id <= id {
		e := &b.pending[n]
		if e.payload != nil {
			b.live--
			b.bytes -= e.size()
			b.forgetCoalescing(e)
		} else {
			b.dead--
		}
		*e = entry{} // let the payload go
		n++
	}
	b.pending = b.pending[n:]
	b.dropScan = max(0, b.dropScan-n)
	if len(b.pending) == 0 {
		b.resetPending()
	}
}

// resetPending empties pending. A large backing array goes (an outage's backlog); the
// small spare one is used again, so a steady stream that the publisher keeps up with
// allocates no array per burst.
func (b *Backlog) resetPending() {
	if b.spare == nil {
		b.spare = make([]entry, b.opt.Batch)
	}
	clear(b.spare) // pending may have left it for a larger array: drop the stale payloads
	b.pending, b.dead, b.dropScan = b.spare[:0], 0, 0
}

func (b *Backlog) gauge() {
	b.mu.Lock()
	b.gaugeLocked()
	b.mu.Unlock()
}

func (b *Backlog) gaugeLocked() {
	if b.m.Live != nil {
		b.m.Live.Set(float64(b.live))
	}
	if b.m.Bytes != nil {
		b.m.Bytes.Set(float64(b.bytes))
	}
}

// Entries returns the live entries, oldest first (a copy; payloads shared).
func (b *Backlog) Entries() []Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Entry, 0, b.live)
	for _, e := range b.pending {
		if e.payload != nil {
			out = append(out, Entry{ID: e.id, Kind: e.kind, Key: e.key, Payload: e.payload})
		}
	}
	return out
}

// Stats describe a backlog.
type Stats struct {
	Live    int // entries not yet accepted upstream
	Bytes   int // their keys' and payloads' bytes
	Records int // records in the journal since its last snapshot (or Open)
	Journal journal.Stats
}

// Stats returns the backlog's counts and its journal's.
func (b *Backlog) Stats() Stats {
	b.mu.Lock()
	s := Stats{Live: b.live, Bytes: b.bytes, Records: b.records}
	b.mu.Unlock()
	s.Journal = b.j.Stats()
	return s
}

// Recovery is what the journal's Open found (journal.Recovery).
func (b *Backlog) Recovery() journal.Recovery { return b.j.Recovery() }

// Err is the journal's failure, if it refuses appends.
func (b *Backlog) Err() error { return b.j.Err() }

// Start runs the publisher (entries to pub, in order) and the compactor until ctx ends;
// Wait waits for them.
func (b *Backlog) Start(ctx context.Context, pub publish.Publisher) {
	failed := b.opt.OnFailed
	if failed == nil {
		failed = func(err error, retryIn time.Duration) {
			b.log.Warn("publishing the backlog failed; will retry", "in", retryIn, "err", err)
		}
	}
	d := &Drainer{Pub: pub, Source: b, Ready: b.ready, Batch: b.opt.Batch, Gather: Gathering{Wait: b.opt.Gather}, Failed: failed}
	b.wg.Add(2)
	go func() {
		defer b.wg.Done()
		d.Run(ctx)
	}()
	go func() {
		defer b.wg.Done()
		b.runCompactor(ctx)
	}()
}

// Wait returns once the goroutines Start began have ended (after ctx ended).
func (b *Backlog) Wait() { b.wg.Wait() }

// Close appends the records of the entries not yet written, then flushes and closes the
// journal; the goroutines must have ended. Adds from then on are refused.
func (b *Backlog) Close() error {
	b.mu.Lock()
	if !b.closing {
		b.closing = true
		if b.writeTimer != nil {
			b.writeTimer.Stop()
		}
		b.writeDueLocked()
	}
	b.mu.Unlock()
	return b.j.Close()
}

func (b *Backlog) observe(ev Event) {
	if b.opt.Observe != nil {
		b.opt.Observe(ev)
	}
}

// poke signals c (capacity 1) without blocking.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
