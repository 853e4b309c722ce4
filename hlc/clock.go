package hlc

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
)

// DefaultMaxDrift is how far ahead of the local physical clock a remote timestamp may be before
// Update refuses it. The state store and the three SDKs use one minute
// (protocol: "Clock skew … more than a minute ahead").
const DefaultMaxDrift = time.Minute

// MaxCounter is the largest counter a Clock issues. When the next counter would exceed it the
// clock moves its wall clock on by one millisecond and restarts the counter at 0, so that the
// issued values stay increasing instead of wrapping.
//
// The bound is the .NET SDK's: it parses the counter as an int32 and treats int32's maximum as
// overflow, so a Clock never hands it a counter it cannot read. The Go and Rust SDKs hold a
// uint64. Parse still accepts any uint32 counter from peers.
const MaxCounter = math.MaxInt32 - 1

// MaxWall is the largest physical clock reading a Clock uses (the largest 15-digit millisecond
// count, the year 33658); larger readings and negative ones are clamped into [0, MaxWall]. It
// keeps the arithmetic far from int64 overflow whatever an injected wall clock returns: an
// accepted remote wall is at most MaxWall + max drift, and the one-millisecond steps taken on
// counter overflow need 2³¹ timestamps each.
const MaxWall = 999_999_999_999_999

// Clock is a hybrid logical clock (Kulkarni, Demirbas et al., "Logical Physical Clocks", 2014)
// issuing Timestamps for one node. It is safe for concurrent use; the zero Clock is not usable,
// create one with NewClock.
//
// Invariants, for a Clock c with max drift D (property-tested with a physical clock that jumps
// backwards and forwards and many goroutines; see clock_property_test.go):
//
//   - Monotonic: every Timestamp issued by Now or Update is greater (Compare) than every
//     Timestamp issued before it, by any goroutine, and than every remote timestamp passed
//     to an Update or Observe that accepted it, or to Restore.
//   - Update's result is greater than its remote argument.
//   - Physical lower bound: an issued Wall is >= the physical reading taken for that call.
//   - Bounded drift: an issued Wall is <= max(largest physical reading so far, largest
//     accepted remote Wall), and therefore never more than D ahead of the largest physical
//     reading so far, because a remote more than D ahead of the reading is refused
//     (ErrTooFarAhead) and leaves the clock unchanged. The one exception is counter
//     overflow (see MaxCounter): each 2³¹ timestamps issued within one millisecond move the
//     wall one millisecond further. Restore is exempt too: it is the caller's word that the
//     timestamp was valid when it was issued.
//   - Node: every issued Timestamp carries the clock's node id.
//
// Physical time going backwards never makes the clock go backwards: while it is behind, the
// clock keeps its wall and counts up; the counter restarts at 0 as soon as physical time passes
// every wall the clock has seen.
type Clock struct {
	node       string
	now        func() int64 // physical clock, milliseconds since the epoch
	maxDriftMs int64
	maxCounter uint64 // MaxCounter; smaller in tests to exercise overflow

	// A mutex and not a CAS loop on packed state: the state is 96 bits (wall and counter), so
	// a lock-free version needs either a narrower wall and counter (44 + 20 bits in
	// BenchmarkClockSync's casClock: walls until 2577, counters to 1M) or a heap-allocated
	// state per update. What CAS would save per timestamp, with or without contention, is
	// less than the system clock read every Now and Update makes anyway (BenchmarkClockSync,
	// BenchmarkSystemMillis; docs/benchmarks.md, "hlc").
	mu      sync.Mutex
	wall    int64  // largest wall issued or observed
	counter uint32 // its counter
}

// Option configures NewClock.
type Option func(*Clock)

// WithWallClock makes the clock read physical time from now (milliseconds since the Unix
// epoch) instead of time.Now. Tests inject a fake; now must be safe for concurrent use.
func WithWallClock(now func() int64) Option {
	return func(c *Clock) {
		if now != nil {
			c.now = now
		}
	}
}

// WithMaxDrift sets how far ahead of the physical clock a remote timestamp may be (rounded down
// to milliseconds). d <= 0 means DefaultMaxDrift.
func WithMaxDrift(d time.Duration) Option {
	return func(c *Clock) {
		if d > 0 {
			c.maxDriftMs = d.Milliseconds()
		}
	}
}

// NewClock returns a clock issuing timestamps for node. A node id must not be empty or contain
// ':' (every timestamp would be unparseable); rather than fail at start-up over an id that only
// breaks ties, NewClock replaces each ':' with '_' and an empty id with a random one
// ("hlc-" and 16 hex digits, as the SDKs default to a random UUID). Node returns the id in use;
// check a configured id with ValidNode to refuse it instead.
func NewClock(node string, opts ...Option) *Clock {
	c := &Clock{
		node:       usableNode(node),
		now:        systemMillis,
		maxDriftMs: DefaultMaxDrift.Milliseconds(),
		maxCounter: MaxCounter,
	}
	for _, o := range opts {
		o(c)
	}
	// Timestamps of our own node come back (a GET returns the version the store issued);
	// seeding the intern table makes parsing them allocation-free from the start.
	internNode([]byte(c.node))
	return c
}

func usableNode(node string) string {
	if node == "" {
		var b [8]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
		return "hlc-" + hex.EncodeToString(b[:])
	}
	return strings.ReplaceAll(node, ":", "_")
}

// ValidNode reports whether node can be a node id: not empty and without ':'.
func ValidNode(node string) error {
	if node == "" {
		return ErrEmptyNode
	}
	if strings.IndexByte(node, ':') >= 0 {
		return fmt.Errorf("%w: %q", ErrNodeColon, node)
	}
	return nil
}

func systemMillis() int64 { return time.Now().UnixMilli() }

// Node returns the clock's node id.
func (c *Clock) Node() string { return c.node }

// MaxDrift returns the max drift the clock enforces.
func (c *Clock) MaxDrift() time.Duration { return time.Duration(c.maxDriftMs) * time.Millisecond }

// Last returns the largest timestamp the clock has issued or observed, with the clock's node
// id, or the zero Timestamp if there is none. Every later Now is greater.
func (c *Clock) Last() Timestamp {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wall == 0 && c.counter == 0 {
		return Timestamp{}
	}
	return Timestamp{Wall: c.wall, Counter: c.counter, Node: c.node}
}

// physical reads the injected clock, clamped into [0, MaxWall].
func (c *Clock) physical() int64 {
	return min(max(c.now(), 0), MaxWall)
}

// Now issues a timestamp for a local or send event: greater than every timestamp issued or
// observed before, and at least the physical time. Now reads the physical clock once.
func (c *Clock) Now() Timestamp {
	pt := c.physical()
	c.mu.Lock()
	wall, counter := c.wall, uint64(c.counter)
	if pt > wall {
		wall, counter = pt, 0
	} else {
		counter++
	}
	wall, counter = c.carry(wall, counter)
	c.wall, c.counter = wall, uint32(counter)
	c.mu.Unlock()
	return Timestamp{Wall: wall, Counter: uint32(counter), Node: c.node}
}

// carry moves a counter beyond maxCounter into the wall clock: one millisecond on, counter 0.
// The result is still greater than what was being exceeded, since its wall is larger.
func (c *Clock) carry(wall int64, counter uint64) (int64, uint64) {
	if counter > c.maxCounter {
		return wall + 1, 0
	}
	return wall, counter
}

// Update issues a timestamp for a receive event carrying remote: greater than remote and than
// every timestamp issued or observed before. If remote.Wall is more than the max drift ahead of
// the physical clock, Update returns an error wrapping ErrTooFarAhead and leaves the clock
// unchanged. Remote timestamps behind the clock are accepted: the clock's own time wins
// (protocol: "The state store accepts a __ts that is behind the state store local clock").
// remote.Node plays no part. Update reads the physical clock once and does not allocate unless
// it fails.
func (c *Clock) Update(remote Timestamp) (Timestamp, error) {
	pt := c.physical()
	if err := c.checkDrift(remote, pt); err != nil {
		return Timestamp{}, err
	}
	rc := uint64(remote.Counter)
	c.mu.Lock()
	wall, counter := c.wall, uint64(c.counter)
	// Kulkarni et al., Fig. 6, "receive event of message m": l' = max(l, l.m, pt).
	switch next := max(wall, remote.Wall, pt); {
	case next == wall && next == remote.Wall:
		counter = max(counter, rc) + 1
	case next == wall:
		counter++
	case next == remote.Wall:
		wall, counter = next, rc+1
	default:
		wall, counter = next, 0
	}
	wall, counter = c.carry(wall, counter)
	c.wall, c.counter = wall, uint32(counter)
	c.mu.Unlock()
	return Timestamp{Wall: wall, Counter: uint32(counter), Node: c.node}, nil
}

// Observe merges remote into the clock without issuing a timestamp, so that every later Now or
// Update is greater than remote; a client calls it with the __ts of a response. A remote
// timestamp that Update would refuse (ErrTooFarAhead) is ignored: call CheckDrift first to
// learn about it.
func (c *Clock) Observe(remote Timestamp) {
	pt := c.physical()
	if c.checkDrift(remote, pt) != nil {
		return
	}
	c.mu.Lock()
	if remote.Wall > c.wall || (remote.Wall == c.wall && remote.Counter > c.counter) {
		c.wall, c.counter = remote.Wall, remote.Counter
	}
	c.mu.Unlock()
}

// Restore merges a timestamp read back from storage, typically the largest version persisted
// before a restart, so that every later Now or Update is greater than last. Unlike Observe it
// makes no drift check: after a restart the physical clock may have jumped back by more than the
// max drift, and issuing versions below ones already handed out would break the order clients
// rely on (fencing tokens). Only pass timestamps this node issued or accepted before. A wall
// beyond MaxWall plus a century can only be corrupt data and is clamped to that.
func (c *Clock) Restore(last Timestamp) {
	c.mu.Lock()
	if last.Wall > c.wall || (last.Wall == c.wall && last.Counter > c.counter) {
		c.wall, c.counter = min(last.Wall, restoreLimit), last.Counter
	}
	c.mu.Unlock()
}

// restoreLimit keeps a corrupt persisted wall (up to math.MaxInt64) from overflowing the wall
// on a later counter carry: a restored wall is clamped to MaxWall plus a century of drift.
const restoreLimit = MaxWall + 100*365*24*3600*1000

// CheckDrift returns an error wrapping ErrTooFarAhead if remote.Wall is more than the max drift
// ahead of the physical clock, the check Update makes. The state store uses it on timestamps it
// must vet but not merge, such as a fencing token (protocol: "rejects a __ts (and also a __ft)
// that is more than a minute ahead").
func (c *Clock) CheckDrift(remote Timestamp) error {
	return c.checkDrift(remote, c.physical())
}

func (c *Clock) checkDrift(remote Timestamp, pt int64) error {
	// pt >= 0, so remote.Wall-pt cannot overflow once remote.Wall > pt.
	if remote.Wall > pt && remote.Wall-pt > c.maxDriftMs {
		return fmt.Errorf("%w: %s is %d ms ahead of the local clock (max %d ms)",
			ErrTooFarAhead, remote, remote.Wall-pt, c.maxDriftMs)
	}
	return nil
}
