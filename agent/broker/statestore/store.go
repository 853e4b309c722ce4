package statestore

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
)

// DefaultNode is the HLC node id of versions issued by a store whose
// Options.Node is empty; it is the node id the protocol document's examples
// show.
const DefaultNode = "StateStore"

// Options configure a Store. The zero value (or nil) is a usable in-memory
// store without quotas.
type Options struct {
	// Node is the HLC node id written into every version the store issues.
	// It must not contain ':' (wire fact 7; New refuses it). Default
	// DefaultNode.
	Node string
	// Clock issues versions. Default hlc.NewClock(Node). Tests inject one with
	// a fake wall clock.
	Clock *hlc.Clock
	// Now returns the wall clock in Unix milliseconds; it drives PX expiry.
	// Default time.Now().UnixMilli.
	Now func() int64

	// MaxKeys bounds the number of stored keys; 0 means no bound.
	MaxKeys int
	// MaxBytes bounds the memory the store holds: for every key its key and
	// value bytes plus KeyOverhead (and FenceOverhead with the token's node id
	// when it is fenced), and for every KEYNOTIFY registration its key bytes
	// plus RegistrationOverhead, whether or not the key exists. 0 means no
	// bound.
	MaxBytes int64
	// MaxKeySize bounds one key, in every command (a longer key can never be
	// stored, so GET, DEL and KEYNOTIFY of one are refused as SET is); 0
	// means no bound.
	MaxKeySize int
	// MaxValueSize bounds one value; 0 means no bound.
	MaxValueSize int
	// MaxNotify bounds the KEYNOTIFY registrations of one Watcher (one
	// connection); 0 means no bound.
	MaxNotify int
	// ReservedPrefixes are key prefixes only requests with Request.Owner set
	// may write (SET, DEL, VDEL); every client may read and watch them. Others
	// are answered "not authorized". Owner writes there are not refused by
	// MaxKeys or MaxBytes (they still count): the owner's keys are bounded by
	// its own configuration, and other clients filling the store must not
	// stop them. A fencing token that a snapshot holds on such a key is
	// dropped at load (only the owner writes there, and it fences nothing).
	ReservedPrefixes []string

	// SnapshotPath, when not empty, is the file that keeps the keys written
	// with Request.Persist across a restart (see doc.go, "Persistence").
	SnapshotPath string

	// Logger receives persistence failures. Default: discard.
	Logger *slog.Logger
}

// Store is the state store engine: keys, versions, fencing tokens, expiry,
// KEYNOTIFY registrations and quotas, with no MQTT in it. It is safe for
// concurrent use; all operations are serialised by one mutex, which makes
// every operation linearizable (the protocol asks for per-key order only).
type Store struct {
	node             string
	clock            *hlc.Clock
	now              func() int64
	maxKeys          int
	maxBytes         int64
	maxKeySize       int
	maxValue         int
	maxNotify        int
	reservedPrefixes [][]byte
	log              *slog.Logger

	mu            sync.Mutex
	keys          map[string]*entry
	bytes         int64                // what counts against maxBytes (see Options.MaxBytes)
	refused       [numBounds]uint64    // requests each bound refused
	refusedLogged [numBounds]uint64    // refused[b] at the last warning
	refusalLogged [numBounds]time.Time // when that warning was logged
	expiry        expiryHeap           // entries with a PX deadline
	watchers      watchRegistry        // KEYNOTIFY registrations
	persisted     map[*entry]struct{}  // entries with persist set
	dirty         bool                 // persistent set changed since the last snapshot
	dirtySeq      uint64               // counts changes of the persistent set
	durableSeq    uint64               // dirtySeq of the last snapshot on disk
	waiters       []durableWaiter      // DoDurable callers waiting for a snapshot
	deferred      []deferredNote       // notifications waiting for their snapshot, in order
	deferredBy    map[string]int       // how many of deferred are for each key
	// While snapshot writes fail: since when, and when that was last logged.
	snapshotFailedSince, snapshotFailLogged time.Time

	wakeSweeper chan struct{} // cap 1: the earliest deadline changed
	wakePersist chan struct{} // cap 1: the persistent set changed
	done        chan struct{}
	wg          sync.WaitGroup
	closeOnce   sync.Once

	snapshot *snapshotFile // nil without SnapshotPath

	testHookWrite func() // tests only: called before each snapshot write
}

// entry is one stored key. value is never modified after it is stored (a SET
// stores a new slice), so snapshots may share it without copying.
type entry struct {
	key       string
	value     []byte
	version   hlc.Timestamp
	fence     *hlc.Timestamp // nil: the key is not fenced
	expireAt  int64          // Unix ms; 0: never
	heapIndex int32          // position in Store.expiry; -1 when absent
	persist   bool
}

// New returns a running store. With Options.SnapshotPath set it loads the
// persisted keys first and fails with ErrCorruptSnapshot (wrapped) when the
// file is damaged. Close stops its goroutines.
func New(opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Node == "" {
		o.Node = DefaultNode
	}
	if err := hlc.ValidNode(o.Node); err != nil {
		return nil, fmt.Errorf("statestore: node id: %w", err)
	}
	if o.Clock == nil {
		o.Clock = hlc.NewClock(o.Node)
	}
	if o.Now == nil {
		o.Now = func() int64 { return time.Now().UnixMilli() }
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Store{
		node:        o.Node,
		clock:       o.Clock,
		now:         o.Now,
		maxKeys:     o.MaxKeys,
		maxBytes:    o.MaxBytes,
		maxKeySize:  o.MaxKeySize,
		maxValue:    o.MaxValueSize,
		maxNotify:   o.MaxNotify,
		log:         o.Logger,
		keys:        make(map[string]*entry),
		persisted:   make(map[*entry]struct{}),
		deferredBy:  make(map[string]int),
		watchers:    newWatchRegistry(),
		wakeSweeper: make(chan struct{}, 1),
		wakePersist: make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
	for _, p := range o.ReservedPrefixes {
		if p == "" {
			return nil, fmt.Errorf("statestore: an empty reserved prefix would reserve every key")
		}
		s.reservedPrefixes = append(s.reservedPrefixes, []byte(p))
	}
	if o.SnapshotPath != "" {
		s.snapshot = &snapshotFile{path: o.SnapshotPath}
		if err := s.load(); err != nil {
			return nil, fmt.Errorf("statestore: load %s: %w", o.SnapshotPath, err)
		}
		s.wg.Add(1)
		go s.persistLoop()
	}
	s.wg.Add(1)
	go s.sweepLoop()
	return s, nil
}

// Close stops the sweeper, writes a last snapshot when persistence is on, and
// waits for the store's goroutines. Requests after Close still work in memory
// but nothing more is persisted or expired by the sweeper. A second Close
// returns ErrClosed.
func (s *Store) Close() error {
	err := ErrClosed
	s.closeOnce.Do(func() {
		close(s.done)
		s.wg.Wait()
		err = nil
		if s.snapshot != nil {
			err = s.writeSnapshot()
			s.mu.Lock()
			left := s.takeWaiters(^uint64(0))
			s.mu.Unlock()
			for _, w := range left { // the last write failed
				w.done(w.reply, w.version, err)
			}
			s.mu.Lock()
			if n := len(s.deferred); n > 0 { // the last write failed too
				s.log.Error("statestore: notifications of changes not on disk dropped at close", "count", n)
				for _, d := range s.deferred {
					s.bytes -= d.cost
				}
				clear(s.deferred)
				s.deferred, s.deferredBy = nil, make(map[string]int)
			}
			s.mu.Unlock()
		}
	})
	return err
}

// Len returns the number of live keys (expired keys not yet swept included).
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// Bytes returns what counts against Options.MaxBytes now (see there).
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// lookup returns the live entry for key, removing it first (with its DELETE
// notification) when its PX deadline has passed: an expired key is invisible
// at once, whether or not the sweeper has run. Called with s.mu held.
func (s *Store) lookup(key []byte) *entry {
	e := s.keys[string(key)]
	if e == nil {
		return nil
	}
	if e.expireAt != 0 && e.expireAt <= s.now() {
		s.notifyDelete(e.key, s.remove(e))
		return nil
	}
	return e
}

// remove unlinks e from every index and returns the persistence sequence of
// the change (0 when e was not persistent). Called with s.mu held.
func (s *Store) remove(e *entry) (seq uint64) {
	delete(s.keys, e.key)
	s.bytes -= e.cost()
	if e.heapIndex >= 0 {
		s.expiry.remove(e)
	}
	if e.persist {
		delete(s.persisted, e)
		seq = s.markDirty()
	}
	return seq
}

// notifyDelete sends the DELETE notification for key with a fresh version,
// so that per key the notifications' versions increase. seq is the
// persistence sequence of the deletion (see notify). Called with s.mu held.
func (s *Store) notifyDelete(key string, seq uint64) {
	if s.watchers.has(key) || len(s.deferred) > 0 {
		s.notify(key, OpDelete, nil, s.clock.Now(), seq)
	}
}

// notify hands a change of key to its watchers once it is as durable as it
// will be: a change of the persistent set (seq > 0) waits until a snapshot
// holding it is on disk, so that no client acts on a change a crash would
// undo; a change of a key with notifications still waiting queues behind
// them, so that per key the order holds (even with no watcher now: one that
// registers before they go out must not get an older change last).
// Everything else goes out at once. Called with s.mu held.
func (s *Store) notify(key string, op Op, value []byte, version hlc.Timestamp, seq uint64) {
	if s.deferredBy[key] == 0 {
		if !s.watchers.has(key) {
			return
		}
		if seq == 0 || seq <= s.durableSeq {
			s.watchers.notify(key, op, value, version)
			return
		}
	}
	cost := deferredCost(len(key), len(value))
	s.bytes += cost
	s.deferred = append(s.deferred, deferredNote{key: key, op: op, value: value, version: version, seq: seq, cost: cost})
	s.deferredBy[key]++
}

// deferredNote is a notification waiting for snapshot seq (0: only for the
// notifications ahead of it).
type deferredNote struct {
	key     string
	op      Op
	value   []byte
	version hlc.Timestamp
	seq     uint64
	cost    int64 // counted in Store.bytes while it waits
}

// releaseDeferred sends the waiting notifications that snapshot durable
// covers, in order, up to the first one it does not. The watchers are the
// key's current ones: a connection gone meanwhile gets nothing. Called with
// s.mu held.
func (s *Store) releaseDeferred(durable uint64) {
	i := 0
	for ; i < len(s.deferred) && s.deferred[i].seq <= durable; i++ {
		d := &s.deferred[i]
		if s.deferredBy[d.key]--; s.deferredBy[d.key] == 0 {
			delete(s.deferredBy, d.key)
		}
		s.bytes -= d.cost
		s.watchers.notify(d.key, d.op, d.value, d.version)
	}
	rest := copy(s.deferred, s.deferred[i:])
	clear(s.deferred[rest:])
	s.deferred = s.deferred[:rest]
}

// markDirty wakes the persistence goroutine and returns the sequence number
// of this change (0 without persistence). Called with s.mu held.
func (s *Store) markDirty() uint64 {
	if s.snapshot == nil {
		return 0
	}
	s.dirty = true
	s.dirtySeq++
	select {
	case s.wakePersist <- struct{}{}:
	default:
	}
	return s.dirtySeq
}
