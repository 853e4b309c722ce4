package journal

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// SyncPolicy says when the journal fsyncs.
type SyncPolicy int

const (
	// SyncAlways fsyncs every batch: Append returns once its record is on stable storage.
	// Appends that arrive while an fsync runs share the next one (group commit).
	SyncAlways SyncPolicy = iota
	// SyncBatch is SyncAlways with a pause of Options.BatchWindow between batches: a batch
	// starts at least BatchWindow after the previous one's fsync ended, so what arrives
	// meanwhile gathers into it. A record that finds the writer idle for BatchWindow or
	// longer is written and fsynced at once, not held for company. Append still returns
	// only when durable; under a stream of appends the pause trades latency for fewer
	// fsyncs on slow flash (at most one per BatchWindow plus the fsync's own time).
	SyncBatch
	// SyncNone writes to the OS but never fsyncs: records survive a process crash, not a
	// power cut. For tests and benchmarks.
	SyncNone
)

func (p SyncPolicy) String() string {
	switch p {
	case SyncAlways:
		return "always"
	case SyncBatch:
		return "batch"
	case SyncNone:
		return "none"
	}
	return fmt.Sprintf("SyncPolicy(%d)", int(p))
}

// Options configure a Journal. The zero value (and nil) means the defaults.
type Options struct {
	Sync SyncPolicy
	// BatchWindow is SyncBatch's least pause between the end of one batch's fsync and the
	// start of the next batch: records gather during it. A record arriving after a longer
	// quiet spell does not wait. Default 2ms.
	BatchWindow time.Duration
	// SegmentSize is the size past which the journal starts a new segment. Default 64 MiB.
	SegmentSize int64
	// LazyDelay is the longest an AppendLazy record waits for company. Default 50ms.
	LazyDelay time.Duration
	// LazyBytes of queued lazy records make the writer go at once. Default 256 KiB.
	LazyBytes int
	// MaxRecordSize bounds one record (and what recovery believes a length field). Default 16 MiB.
	MaxRecordSize int
	// SkipCorrupt makes Open and Replay skip damaged records that are not at the tail
	// instead of failing; what was skipped is listed in Recovery().Lost.
	SkipCorrupt bool
	// FS is the file layer. Default OSFS.
	FS FS
	// Logger receives recovery and failure reports. Default: discard.
	Logger *slog.Logger
	// OnFailure, when set, is called once (from the journal's writer goroutine, with no lock
	// held) when the journal starts refusing appends, with the error it will return. Waiting
	// for a record accepted before the failure returns only after OnFailure ran (an append
	// refused meanwhile may return first). OnFailure must not Wait itself: the writer is
	// busy running it.
	OnFailure func(error)

	// noPreallocate turns segment preallocation off, for tests and the benchmark that
	// compares both in one run.
	noPreallocate bool
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.BatchWindow <= 0 {
		r.BatchWindow = 2 * time.Millisecond
	}
	if r.LazyDelay <= 0 {
		r.LazyDelay = 50 * time.Millisecond
	}
	if r.LazyBytes <= 0 {
		r.LazyBytes = 256 << 10
	}
	if r.SegmentSize <= 0 {
		r.SegmentSize = 64 << 20
	}
	if r.MaxRecordSize <= 0 {
		r.MaxRecordSize = 16 << 20
	}
	if r.FS == nil {
		r.FS = OSFS{}
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return r
}

// Seq numbers the records appended since Open, from 1.
type Seq uint64

// Stats are counters since Open.
type Stats struct {
	Records   uint64 // records appended
	Bytes     uint64 // bytes written, frames and headers
	Batches   uint64 // write+fsync rounds (Records/Batches is the group-commit factor)
	WriteOuts uint64 // writes made by WriteOut (no fsync)
	Segments  int    // live segment files
	Snapshots uint64 // snapshots written
	// FileBytes is the size of the journal's files now: its snapshot and segments, as
	// written (blocks preallocated past the open segment's end not counted; see the package
	// doc, "Segment preallocation").
	FileBytes int64
	// Resets counts the Resets that replaced the journal's content.
	Resets uint64
}

// Journal is an append-only, checksummed, group-committed log in one directory. It is safe
// for concurrent use.
type Journal struct {
	dir  string
	opts Options
	fs   FS
	log  *slog.Logger
	lock *os.File

	// wmu orders writes to the open segment: the writer goroutine's batches, WriteOut, and
	// rotation. It guards seg, segSize and syncedSize once Open returns (segNum changes
	// under mu too), and is taken before mu, never while holding it.
	wmu        sync.Mutex
	seg        File
	segNum     uint64
	segSize    int64 // where the next write goes: the end of everything written
	syncedSize int64 // the end of what the last fsync of seg covered
	// segReserved says that seg may hold blocks reserved beyond its end (preallocated), to
	// be released when it is sealed or closed.
	segReserved bool
	// openBytes mirrors segSize for Stats, which does not take wmu.
	openBytes atomic.Int64

	// For WriteOut's lock-free check: the last sequence number issued, and the last one
	// written to the file (every record up to it is there, fsynced or not).
	issued  atomic.Uint64
	written atomic.Uint64
	failed  atomic.Pointer[error] // j.err, readable without mu

	mu       sync.Mutex
	open     *batch // records queued since the last hand-off to the writer
	flushing *batch // records the writer is writing now
	buf      []byte // frames not yet handed to the writer
	spare    []byte
	next     Seq // sequence number of the next record
	durable  Seq // every record with seq <= durable is written (and synced, per policy)
	err      error
	// unreported says that err still has to be logged and handed to OnFailure, which the
	// writer goroutine does before it wakes any waiter of the failed records.
	unreported bool
	closed     bool
	appended   bool
	stats      Stats
	firstSeg   uint64 // oldest live segment
	snapNum    uint64 // newest snapshot (0: none)
	recovery   Recovery
	// The sizes of the snapshot and of the sealed segments (by number), for Stats.FileBytes.
	snapBytes   int64
	sealedBytes map[uint64]int64
	// lost lists the records a Reset dropped (appended, never durable), oldest first: Wait
	// answers them with the error they failed with.
	lost []lostRecords

	kick chan struct{}
	lazy chan struct{}
	ckpt chan chan checkpointResult
	rset chan resetRequest
	quit chan struct{}
	done chan struct{}

	snapMu sync.Mutex // one snapshot at a time
}

// Open opens (creating if needed) the journal in dir, takes its lock, and recovers: it
// validates every record, truncates a torn tail, and positions appends after the last valid
// record. It does not deliver records; call Replay for that, before the first append.
func Open(dir string, opts *Options) (*Journal, error) {
	o := opts.withDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	lock, err := lockDir(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, err
	}
	j := &Journal{
		dir: dir, opts: o, fs: o.FS, log: o.Logger, lock: lock,
		next:        1,
		sealedBytes: make(map[uint64]int64),
		kick:        make(chan struct{}, 1),
		lazy:        make(chan struct{}, 1),
		ckpt:        make(chan chan checkpointResult),
		rset:        make(chan resetRequest),
		quit:        make(chan struct{}),
		done:        make(chan struct{}),
	}
	if err := j.recover(); err != nil {
		if j.seg != nil {
			j.seg.Close()
		}
		unlockDir(lock)
		return nil, err
	}
	j.syncedSize = j.segSize
	j.openBytes.Store(j.segSize)
	go j.run()
	return j, nil
}

// Dir returns the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// Append writes p as one record and returns once it is durable (per the sync policy).
// p may be reused when Append returns.
func (j *Journal) Append(p []byte) error {
	seq, err := j.AppendAsync(p)
	if err != nil {
		return err
	}
	return j.Wait(seq)
}

// AppendAsync queues p as one record and returns its sequence number without waiting; Wait
// tells when it is durable. Records become durable in the order AppendAsync was called. p is
// copied and may be reused at once. AppendAsync never blocks on I/O.
func (j *Journal) AppendAsync(p []byte) (Seq, error) {
	return j.append(p, false)
}

// AppendLazy queues p like AppendAsync but does not hurry: the record is written with the
// next batch somebody waits for, or Options.LazyDelay after it was queued, or once
// Options.LazyBytes are queued, whichever comes first. Wait(seq) hurries it; WriteOut puts
// it into the file without fsync (safe from a kill of the process, not from a power cut).
// For records whose loss in a crash is harmless (the outbox's sends and acks): under a
// stream of them the journal fsyncs a few times a second instead of once per record.
func (j *Journal) AppendLazy(p []byte) (Seq, error) {
	return j.append(p, true)
}

func (j *Journal) append(p []byte, lazy bool) (Seq, error) {
	if len(p) == 0 {
		return 0, ErrEmptyRecord
	}
	if len(p) > j.opts.MaxRecordSize {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(p), j.opts.MaxRecordSize)
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return 0, ErrClosed
	}
	if j.err != nil {
		err := j.err
		j.mu.Unlock()
		return 0, err
	}
	j.buf = appendFrame(j.buf, p)
	seq := j.next
	j.next++
	j.issued.Store(uint64(seq))
	if j.open == nil {
		j.open = &batch{done: make(chan struct{})}
	}
	j.open.last = seq
	j.appended = true
	hurry := !lazy || len(j.buf) >= j.opts.LazyBytes
	j.mu.Unlock()
	if hurry {
		j.wake(j.kick)
	} else {
		j.wake(j.lazy)
	}
	return seq, nil
}

// wake signals the writer without blocking; a pending signal is as good as a new one.
func (j *Journal) wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Wait blocks until the record seq is durable, or returns the error that prevented it.
// Each batch has its own channel, so a finished fsync wakes only the appends it covered.
func (j *Journal) Wait(seq Seq) error {
	j.mu.Lock()
	if err := j.lostLocked(seq); err != nil {
		j.mu.Unlock()
		return err
	}
	if j.durable >= seq {
		j.mu.Unlock()
		return nil
	}
	var b *batch
	hurry := false
	switch {
	// The batches are checked before j.err: a record accepted before the journal failed is
	// answered by its batch, whose waiters wake only after OnFailure ran (see flush).
	case j.flushing != nil && seq <= j.flushing.last:
		b = j.flushing
	case j.open != nil && seq <= j.open.last:
		b, hurry = j.open, true // it may hold only lazy records: somebody waits now
	case j.err != nil:
		err := j.err
		j.mu.Unlock()
		return err
	}
	j.mu.Unlock()
	if hurry {
		j.wake(j.kick)
	}
	if b == nil {
		return ErrClosed // seq was never issued, or the writer is gone
	}
	<-b.done
	return b.err
}

// batch is a group of records written with one write and one fsync.
type batch struct {
	last Seq
	done chan struct{} // closed when the batch is durable or failed
	err  error         // set before done is closed
}

// Durable returns the highest sequence number known durable, or settled: the records a
// Reset dropped count as settled (Wait returns their error).
func (j *Journal) Durable() Seq {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.durable
}

// Err returns the error that makes the journal refuse appends, or nil.
func (j *Journal) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Stats returns counters since Open.
func (j *Journal) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.stats
	s.Segments = int(j.segNum - j.firstSeg + 1)
	s.FileBytes = j.snapBytes + j.openBytes.Load()
	for _, n := range j.sealedBytes {
		s.FileBytes += n
	}
	return s
}

// Recovery reports what Open found: records, a truncated tail, skipped damage.
func (j *Journal) Recovery() Recovery {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.recovery
}

// Close writes what is queued, fsyncs it, and releases the lock. It is idempotent.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	close(j.quit)
	<-j.done
	j.snapMu.Lock() // let a snapshot in progress finish before the lock is released
	defer j.snapMu.Unlock()
	j.wmu.Lock() // a WriteOut in progress finishes first; later ones see closed
	var err error
	if j.seg != nil {
		if j.Err() == nil {
			j.releaseReserved() // before the fsync, which makes the release durable too
		}
		if j.opts.Sync != SyncNone && j.Err() == nil {
			err = j.seg.Sync()
		}
		if cerr := j.seg.Close(); err == nil {
			err = cerr
		}
		j.seg = nil
	}
	j.wmu.Unlock()
	if uerr := unlockDir(j.lock); err == nil {
		err = uerr
	}
	return err
}

func (j *Journal) ioErr(what, path string, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: %s %s: %v", ErrNoSpace, what, path, err)
	}
	return fmt.Errorf("%w: %s %s: %v", ErrFailed, what, path, err)
}

func (j *Journal) segPath(num uint64) string {
	return filepath.Join(j.dir, fmt.Sprintf("%020d%s", num, segmentExt))
}

func (j *Journal) snapPath(num uint64) string {
	return filepath.Join(j.dir, fmt.Sprintf("%020d%s", num, snapshotExt))
}

const (
	segmentExt  = ".wal"
	snapshotExt = ".snap"
	tempExt     = ".tmp"
)
