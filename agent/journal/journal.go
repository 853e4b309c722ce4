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
	// SyncBatch waits Options.BatchWindow after the first pending record to gather more,
	// then writes and fsyncs them together. Append still returns only when durable; the
	// window trades latency for fewer fsyncs on slow flash.
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
	// BatchWindow is how long SyncBatch gathers records before an fsync. Default 2ms.
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
	// OnOpen, when set, is called once by a successful Open with the journal, before Open
	// returns it. It lets whoever configures a journal that another component opens reach
	// it: the agent sets it in the outbox's options to WriteOut the outbox's journal before
	// each command it sends.
	OnOpen func(*Journal)
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

	kick chan struct{}
	lazy chan struct{}
	ckpt chan chan checkpointResult
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
		next: 1,
		kick: make(chan struct{}, 1),
		lazy: make(chan struct{}, 1),
		ckpt: make(chan chan checkpointResult),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	if err := j.recover(); err != nil {
		if j.seg != nil {
			j.seg.Close()
		}
		unlockDir(lock)
		return nil, err
	}
	j.syncedSize = j.segSize
	go j.run()
	if o.OnOpen != nil {
		o.OnOpen(j)
	}
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

// Durable returns the highest sequence number known durable.
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

// run is the writer goroutine: it owns the open segment. Every append kicks it; it takes
// everything queued, writes it with one write and one fsync, and wakes the waiters. Appends
// that arrive during the fsync form the next batch: that is the group commit.
func (j *Journal) run() {
	defer func() {
		j.mu.Lock()
		if b := j.open; b != nil { // cannot happen: Close flushes; never strand a waiter
			j.open = nil
			b.err = ErrClosed
			close(b.done)
		}
		j.mu.Unlock()
		close(j.done)
	}()
	for {
		var reply chan checkpointResult
		quitting := false
		select {
		case <-j.kick:
		case reply = <-j.ckpt:
		case <-j.quit:
			quitting = true
		case <-j.lazy:
			// Only lazy records are queued: give them company for up to LazyDelay. This
			// timer is armed only while such records wait; an idle journal has none.
			t := time.NewTimer(j.opts.LazyDelay)
			select {
			case <-t.C:
			case <-j.kick:
			case reply = <-j.ckpt:
			case <-j.quit:
				quitting = true
			}
			t.Stop()
		}
		if reply == nil && !quitting && j.opts.Sync == SyncBatch {
			t := time.NewTimer(j.opts.BatchWindow)
			select {
			case <-t.C:
			case <-j.quit:
				quitting = true
			}
			t.Stop()
		}
		j.flush()
		if reply != nil {
			reply <- j.checkpoint()
		}
		if quitting {
			return
		}
	}
}

func (j *Journal) flush() {
	j.wmu.Lock()
	j.mu.Lock()
	bt := j.open
	if j.err != nil {
		// Queued before the journal failed: they fail with it. A failure that WriteOut
		// found is reported here, before the waiters of its records wake.
		err, report := j.err, j.takeUnreportedLocked()
		j.open, j.flushing = nil, bt
		j.buf = j.buf[:0]
		j.mu.Unlock()
		j.wmu.Unlock()
		if report {
			j.reportFailure(err)
		}
		if bt != nil {
			bt.err = err
			close(bt.done)
		}
		j.mu.Lock()
		j.flushing = nil
		j.mu.Unlock()
		return
	}
	if bt == nil {
		j.mu.Unlock()
		j.wmu.Unlock()
		return
	}
	j.open, j.flushing = nil, bt
	b, n := j.buf, bt.last-j.durable
	j.buf, j.spare = j.spare[:0], nil
	j.mu.Unlock()

	// What WriteOut wrote of this batch is in the file already; b holds the rest. The
	// fsync runs without wmu, so a WriteOut meanwhile costs the sender one write, not an
	// fsync; it is covered by this fsync or the next.
	err := j.writeLocked(b, bt.last, false)
	end := j.segSize
	j.wmu.Unlock()
	if err == nil {
		err = j.syncTo(end)
	}
	wrote := err == nil
	if wrote {
		err = j.rotateIfFull()
	}

	j.mu.Lock()
	if wrote {
		j.durable = bt.last
		j.stats.Records += uint64(n)
		j.stats.Batches++
	} else {
		bt.err = err
	}
	if err != nil {
		j.failLocked(err)
	}
	if !j.takeUnreportedLocked() {
		j.flushing = nil
		j.mu.Unlock()
		close(bt.done)
		return
	}
	ferr := j.err
	j.mu.Unlock()
	// Appends are refused from here on; the waiters wake after OnFailure ran, so whoever
	// sees the error also sees the owner's reaction to it. That includes a Wait that starts
	// now: j.flushing stays set until then, and Wait looks at it before at j.err.
	j.reportFailure(ferr)
	close(bt.done)
	j.mu.Lock()
	j.flushing = nil
	j.mu.Unlock()
}

// failLocked makes err the error with which the journal refuses appends, unless it has one
// already; the writer goroutine reports it (takeUnreportedLocked). Called with mu held.
func (j *Journal) failLocked(err error) {
	if j.err != nil {
		return
	}
	j.err = err
	j.failed.Store(&err)
	j.unreported = true
}

// takeUnreportedLocked reports whether the journal's failure still has to be reported,
// and marks it reported: the caller calls reportFailure. Called with mu held.
func (j *Journal) takeUnreportedLocked() bool {
	r := j.unreported
	j.unreported = false
	return r
}

// reportFailure logs err, with which the journal now refuses appends, and hands it to
// OnFailure. Called once, on the writer goroutine, with no lock held.
func (j *Journal) reportFailure(err error) {
	j.log.Error("journal refuses appends", "dir", j.dir, "err", err)
	if j.opts.OnFailure != nil {
		j.opts.OnFailure(err)
	}
}

// writeLocked writes the frames b, the records up to upto, at the end of the open segment
// and recycles b. Called with wmu held, by the writer goroutine and by WriteOut (byWriteOut,
// for the stats). A failed write is cut off, so that the file ends at its last whole
// record, and makes the journal refuse appends before wmu is released: no later record may
// reach the file after a lost one.
func (j *Journal) writeLocked(b []byte, upto Seq, byWriteOut bool) error {
	var err error
	if len(b) > 0 {
		if _, werr := j.seg.WriteAt(b, j.segSize); werr != nil {
			path := j.segPath(j.segNum)
			terr := j.seg.Truncate(j.segSize)
			if errors.Is(werr, syscall.ENOSPC) && terr == nil {
				err = fmt.Errorf("%w: writing %s: %v", ErrNoSpace, path, werr)
			} else {
				err = fmt.Errorf("%w: writing %s: %v", ErrFailed, path, errors.Join(werr, terr))
			}
		} else {
			j.segSize += int64(len(b))
		}
	}
	j.mu.Lock()
	if cap(b) <= 4<<20 { // do not pin a huge buffer after a burst
		j.spare = b[:0]
	}
	if err != nil {
		j.failLocked(err)
		j.mu.Unlock()
		return err
	}
	j.stats.Bytes += uint64(len(b))
	if byWriteOut {
		j.stats.WriteOuts++
	}
	j.mu.Unlock()
	j.written.Store(uint64(upto))
	return nil
}

// syncTo fsyncs the open segment, which holds at least end bytes, unless SyncNone. After a
// failed fsync the kernel's view of the file is unknown: the journal refuses appends (before
// wmu is released, as after a failed write) and cuts the file back to what the previous
// fsync covered, best effort. Called by the writer goroutine without wmu.
func (j *Journal) syncTo(end int64) error {
	if j.opts.Sync == SyncNone {
		return nil
	}
	err := j.seg.Sync() // seg changes only on this goroutine
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if err == nil {
		j.syncedSize = max(j.syncedSize, end)
		return nil
	}
	path := j.segPath(j.segNum)
	if errors.Is(err, syscall.ENOSPC) {
		err = fmt.Errorf("%w: fsync %s: %v", ErrNoSpace, path, err)
	} else {
		err = fmt.Errorf("%w: fsync %s: %v", ErrFailed, path, err)
	}
	j.mu.Lock()
	j.failLocked(err)
	j.mu.Unlock()
	j.seg.Truncate(j.syncedSize) // best effort
	j.segSize = j.syncedSize
	return err
}

// rotateIfFull starts a new segment once the open one has reached SegmentSize. Called by
// the writer goroutine without wmu.
func (j *Journal) rotateIfFull() error {
	j.wmu.Lock()
	defer j.wmu.Unlock()
	if j.segSize < j.opts.SegmentSize {
		return nil
	}
	err := j.rotate()
	if err != nil {
		j.mu.Lock()
		j.failLocked(err) // before wmu is released: the segment may be closed
		j.mu.Unlock()
	}
	return err
}

// rotate seals the open segment and starts the next one. Called with wmu held.
func (j *Journal) rotate() error {
	if j.opts.Sync != SyncNone {
		if err := j.seg.Sync(); err != nil {
			return fmt.Errorf("%w: fsync %s: %v", ErrFailed, j.segPath(j.segNum), err)
		}
	}
	if err := j.seg.Close(); err != nil {
		return fmt.Errorf("%w: close %s: %v", ErrFailed, j.segPath(j.segNum), err)
	}
	j.seg = nil
	f, err := j.createSegment(j.segNum + 1)
	if err != nil {
		return err
	}
	j.seg, j.segSize, j.syncedSize = f, fileHeaderSize, fileHeaderSize
	j.mu.Lock()
	j.segNum++
	j.mu.Unlock()
	return nil
}

// createSegment creates segment num with its header, durably.
func (j *Journal) createSegment(num uint64) (File, error) {
	path := j.segPath(num)
	f, err := j.fs.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	if err != nil {
		return nil, j.ioErr("create", path, err)
	}
	if _, err := f.WriteAt(appendFileHeader(nil, segmentKind, num), 0); err != nil {
		f.Close()
		return nil, j.ioErr("write header of", path, err)
	}
	if j.opts.Sync != SyncNone {
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, j.ioErr("fsync", path, err)
		}
		if err := j.fs.SyncDir(j.dir); err != nil {
			f.Close()
			return nil, j.ioErr("fsync directory", j.dir, err)
		}
	}
	return f, nil
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
