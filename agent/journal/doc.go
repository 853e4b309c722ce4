// Package journal is the agent's durable log: an append-only, segmented, checksummed,
// group-committed write-ahead log in one directory. The outbox keeps its message table in
// it, and anything else that must survive a crash can too.
//
// # Tutorial
//
//	j, err := journal.Open("/var/lib/faceagent/outbox", nil) // locks the directory, recovers
//	if err != nil { ... }
//	defer j.Close()
//	// Rebuild your state, oldest record first (before the first append).
//	err = j.Replay(func(rec []byte) error { return state.apply(rec) })
//	// Append returns once the record is on stable storage.
//	err = j.Append(encoded)
//	// Or order records under your own lock and wait for durability outside it:
//	seq, err := j.AppendAsync(encoded) // cheap, never blocks on I/O
//	...unlock...
//	err = j.Wait(seq)
//	// Records whose loss in a crash is harmless need not force an fsync of their own:
//	seq, err = j.AppendLazy(encoded)   // written with the next batch, or within LazyDelay
//	// Before an action a lazy record describes becomes visible outside the process
//	// (a command goes out on the wire), put what is queued into the file, without fsync:
//	err = j.WriteOut()                 // survives a kill of the process, not a power cut
//	// Compaction: when most records are dead, replace the log by the live state.
//	cp, err := j.Checkpoint()            // under your lock: no append may race with it
//	live := state.copy()                 // still under your lock
//	err = j.WriteSnapshot(cp, func(emit func([]byte) error) error { ...emit each live record... })
//	// While running, find old records again (reads every file; damage skipped and listed):
//	losses, err := j.ReadRecords(func(rec []byte) error { ... })
//	// After a full disk (ErrNoSpace) an owner that holds its whole state can go on without
//	// Close and Open: once space is free, replace the log by that state.
//	err = j.Reset(func(emit func([]byte) error) error { ...emit each live record... })
//
// Records are opaque bytes to the journal; the outbox encodes its records with msgp and
// versions them itself.
//
// # Group commit
//
// One writer goroutine owns the open segment's fsyncs and rotation (its writes it shares
// with WriteOut, under a mutex). Appends frame their record into a shared buffer and kick
// it; it takes the whole buffer, writes it with one write and one fsync
// (Options.Sync: SyncAlways; SyncBatch the same, but a batch starts no sooner than
// Options.BatchWindow after the previous fsync ended; SyncNone never fsyncs), then wakes
// every waiter of the batch. Appends arriving during an fsync form the next batch, so N
// concurrent producers share about one fsync per round. The first append after a quiet
// spell is not delayed: its write and fsync start at once, under either policy; SyncBatch's
// window only spaces out the batches of a stream of appends. Each batch has its own done
// channel, so an fsync wakes only the appends it covered. AppendLazy records do not kick
// the writer: they ride with the next batch, or go after Options.LazyDelay (50 ms). An
// idle journal has no timer armed: the writer sleeps on a channel, and the lazy timer (or
// SyncBatch's pause) exists only while records wait.
//
// # Process death and power loss
//
// The two are different failures, and the journal treats them differently. What a process
// has handed to the kernel with write(2) survives the process's death (SIGKILL, a panic,
// the OOM killer) whether or not it was fsynced; only a power cut or a kernel crash loses
// what was not fsynced. So:
//
//   - A record Wait returned nil for survives both.
//   - A record WriteOut returned nil after (lazy or not) survives the death of the process
//     at once, and a power cut once the writer has fsynced it: with the next batch
//     somebody waits for, or within LazyDelay.
//   - A lazy record nobody wrote out is lost in either if the failure comes within
//     LazyDelay of its append.
//
// WriteOut is one write(2) of everything queued, on the caller's goroutine, ordered with
// the writer goroutine's batches by a mutex that covers writes, not fsyncs: the file always
// holds a prefix of the appends, in order. The writer's fsync then covers what WriteOut
// wrote; it writes only what is left. Concurrent WriteOuts coalesce: whoever gets the
// mutex writes everything queued, and the others find their records written. With nothing
// queued WriteOut is two atomic loads. The outbox's owner (agent/dispatch.go) calls it
// before every command it sends, so that a kill repeats only the command in flight.
//
// # Segment preallocation
//
// On Linux the journal reserves a segment's blocks when it creates one (at Open, rotation
// and Checkpoint) and when Open reopens the newest segment to append to it:
// fallocate(FALLOC_FL_KEEP_SIZE) over its first SegmentSize bytes. Appends then write into
// blocks the filesystem allocated already. Without it every append that grows the file
// makes ext4 allocate blocks and update the inode's size and extents in its journal, and
// a WriteOut's write(2) that meets the writer's fsync of the same file can wait for that
// journal commit (milliseconds, tens under load): the sender waits with it. KEEP_SIZE
// leaves the file's size at what was written, so the format, recovery, the torn-tail rule
// and ReadRecords see exactly the bytes they saw before; a reserved block past the end
// reads as nothing, and one a power cut left inside the size (an unwritten extent) reads
// as zeros, which recovery already treats as a torn tail.
//
// The reserved blocks past a segment's end are released when it is sealed (rotation,
// Checkpoint) and at Close: ftruncate to its own size, which on ext4 frees blocks that
// fallocate reserved past the end, done before the sealing fsync so that the release is
// durable with it. A filesystem without fallocate (EOPNOTSUPP, ENOSYS: some network and
// FUSE filesystems) is left alone without a log line, and so is tmpfs, where a reservation
// would be memory and there is no block allocation to save; another failure (ENOSPC) is
// logged as a warning and the journal goes on without the reservation.
//
// # On-disk format (version 1)
//
// The directory holds LOCK (an flock is held on it while open), segments named
// %020d.wal, and at most one snapshot %020d.snap (plus a %020d.snap.tmp while one is
// being written). Every file starts with a 16-byte header:
//
//	kind    [6]byte  "FAJRNL" (segment) or "FASNAP" (snapshot)
//	version uint16   little endian, 1
//	number  uint64   little endian: the segment number; for a snapshot, the first segment
//	                 it does NOT cover
//
// followed by frames:
//
//	length     uint32  little endian, 1..MaxRecordSize
//	payloadCRC uint32  CRC-32C (Castagnoli) of the payload
//	headerCRC  uint32  CRC-32C of the 8 bytes before it
//	payload    [length]byte
//
// Segment numbers are contiguous. Replay reads the snapshot (if any), then every segment
// numbered >= the snapshot's number, in order. Stats.FileBytes is the size of these files
// (the open segment's preallocated blocks not counted): what an owner that compacts by
// bytes compares with its live state.
//
// # Invariants
//
//   - Append (or Wait) returns nil only when the record is written and, unless SyncNone,
//     fsynced. A record that was acknowledged is replayed after any crash.
//   - Records replay in the order AppendAsync was called. While the process runs, the
//     segment files hold a prefix of the appends: a record reaches the file only after
//     every record appended before it.
//   - After WriteOut returned nil, every record appended before the call is in the file,
//     unless a later fsync fails: the journal then cuts the file back to what the last
//     good fsync covered (the kernel's view of the rest is unknown), records WriteOut wrote
//     included, so after Close and Open they are lost as in a power cut.
//   - The log only ever loses a torn tail: damage at the end of the newest segment with no
//     valid frame after it (the last batch of a crash, whose appends never returned).
//     Damage anywhere else is a *CorruptError naming the file and offset; Options.SkipCorrupt
//     skips such ranges and lists them in Recovery().Lost.
//   - Compaction never leaves a state where neither the old segments nor the complete
//     snapshot exist: temp file, fsync, rename, fsync directory, only then delete.
//   - After a failed write or fsync (the writer's or WriteOut's) the journal refuses appends
//     and WriteOut (ErrNoSpace, ErrFailed), and reports the failure once through OnFailure
//     from the writer goroutine, before any waiter of a lost record wakes:
//     a partial write is cut back, so what was durable stays readable; Close and Open again,
//     or Reset. A record that failed stays failed: after Reset, Wait for it still returns
//     its error, and it is in no file the journal reads again.
//   - Reset writes the new state to a snapshot numbered after every segment there is, and
//     only once that is durable creates the next segment and deletes the older files: a
//     crash leaves the old files or the new snapshot. It never reads the old files, whose
//     tail a failed fsync left unknown.
//
// # Caveats
//
//   - Durability is the filesystem's: fsync on a device that lies about flushes (some SD
//     cards) is not durable. Use a filesystem with ordered data (ext4 data=ordered).
//   - A disk-full journal does not resume by itself; its owner reopens it once space is free,
//     or, if it holds its whole state in memory, calls Reset with it (the broker's sessions
//     journal does, retrying with a backoff). This is deliberate: after a failed write the
//     owner's in-memory state may be ahead of the disk, and only the owner knows which state
//     the disk must agree with: replay (reopen) or its own (Reset). Reset needs free space
//     for that state while the old files still exist.
//   - WriteOut runs write(2) on the caller's goroutine. It never waits for an fsync of its
//     own, but a write can wait for the filesystem (ext4's journal commit that a running
//     fsync started, a busy disk): usually microseconds, its worst case milliseconds
//     (docs/benchmarks.md, "Write-out before send"); preallocation makes that rarer, not
//     impossible ("Journal segment preallocation" there). It also waits for a segment rotation
//     in progress, which holds the write mutex through its fsyncs (the sealed segment, the
//     new one, the directory): once per SegmentSize written and once per Checkpoint.
//   - An open journal occupies SegmentSize of disk for its open segment from the start
//     (du counts it, ls does not: the size is what was written). After a kill the
//     reservation stays until the next Open takes the segment up again; a sealing
//     release that a power cut undid stays with its segment until compaction deletes it.
//     On small flash, size SegmentSize with this in mind.
//   - Replay holds one whole file in memory at a time (SegmentSize, 64 MiB by default).
//   - A torn tail is recognised as damage at the end of the newest segment with no valid frame
//     after it. A filesystem that, after a power cut, kept a later page of the last write but
//     not an earlier one leaves valid frames after the damage: Open then reports a
//     *CorruptError rather than guess, and Options.SkipCorrupt recovers (ext4 data=ordered
//     keeps appends in order).
//   - Finding out whether damage is a torn tail scans the rest of the file byte by byte;
//     that only happens on damaged files.
//   - Locking uses flock(2): it protects against a second process on the same host, not
//     against a second host on a network filesystem.
package journal
