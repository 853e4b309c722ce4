package broker

import (
	"errors"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// Compaction of the sessions journal.
//
// Every change is appended, so the journal's files hold the live records and the dead ones
// (replaced or deleted). The committer replaces them by a snapshot of the live records once
// the dead bytes exceed both minDead (the segment size) and the live bytes:
//
//	dead = Stats.FileBytes − liveBytes > max(minDead, liveBytes)
//
// In bytes, not records: a state store response that carries a value is as many bytes
// as hundreds of acknowledgements. And not as a ratio of records: "dead records > 4 × live
// records" never holds while the live records grow by a third of the writes or more, which
// is what a client that does not acknowledge makes (a session whose messages pile up to
// its in-flight maximum, or records a packet id clash left behind), and the journal then
// grows without a compaction until the live records stop growing. Nothing holds a
// compaction back but the dead bytes: no client, acknowledging or not, and no reader of
// the files; live records only raise the threshold with themselves, so the files stay
// within
//
//	liveBytes + max(minDead, liveBytes) + the group commit that crossed it,
//
// plus, while a compaction writes its snapshot, that snapshot (liveBytes), the preallocated
// blocks of the new open segment (up to the segment size) and what is committed meanwhile. Each compaction
// writes the live records once, after at least as many dead bytes: the journal writes each
// byte of session data at most about twice.
//
// The snapshot is written in the background: the committer takes the checkpoint (the
// journal starts a new segment) and a copy of the live map (its values are never changed,
// only replaced) between two commits, and goes on committing into the new segment while
// another goroutine writes the snapshot and deletes the older files. One compaction runs
// at a time; a failed one (a full disk) is tried again after minDead more bytes.

// compaction is the committer's compaction state, under its mu.
type compaction struct {
	running  bool
	done     chan struct{} // closed when the compaction last started ends (nil: none yet)
	retryAt  int64         // after a failure: the FileBytes to wait for before the next try
	count    uint64        // compactions written
	failures uint64        // compactions that failed
}

// maybeCompact starts a compaction when the dead bytes call for it. Called by the committer
// goroutine between commits.
func (c *committer) maybeCompact() {
	c.mu.Lock()
	busy := c.compaction.running || c.health.broken != nil
	retryAt := c.compaction.retryAt
	c.mu.Unlock()
	if busy {
		return
	}
	file := c.j.Stats().FileBytes
	if file < retryAt || file-c.liveBytes <= max(c.minDead, c.liveBytes) {
		return
	}
	if run := c.startCompaction(file); run != nil {
		go run()
	}
}

// compactNow replaces the journal's files by a snapshot of the live records and returns
// once it is written. For the owner before start: records the restore bounds left out
// (restorebounds.go) must not come back at the next start.
func (c *committer) compactNow() {
	if run := c.startCompaction(c.j.Stats().FileBytes); run != nil {
		run()
	}
}

// startCompaction takes the checkpoint and a copy of the live records and returns the
// writing of the snapshot (nil when the checkpoint failed). Called by the committer
// goroutine between commits, or before it starts.
func (c *committer) startCompaction(file int64) (run func()) {
	cp, err := c.j.Checkpoint()
	if err != nil {
		c.fail(err) // the new segment could not be started: the journal refuses appends
		return nil
	}
	snap := make([]sessionOp, 0, len(c.live))
	for k, v := range c.live {
		snap = append(snap, sessionOp{key: k, value: v})
	}
	done := make(chan struct{})
	c.mu.Lock()
	c.compaction.running, c.compaction.done = true, done
	c.mu.Unlock()
	return func() { c.writeSnapshot(cp, snap, file, done) }
}

// writeSnapshot is the background half of a compaction: the snapshot of snap (the live
// records at cp) replaces the journal's files before cp.
func (c *committer) writeSnapshot(cp journal.Checkpoint, snap []sessionOp, fileBytes int64, done chan struct{}) {
	defer close(done)
	var rec []byte
	err := c.j.WriteSnapshot(cp, func(emit func([]byte) error) error {
		for i := range snap {
			rec = appendSessionOps(rec[:0], snap[i:i+1])
			if err := emit(rec); err != nil {
				return err
			}
		}
		return nil
	})
	c.mu.Lock()
	c.compaction.running = false
	if err != nil {
		c.compaction.failures++
		c.compaction.retryAt = fileBytes + c.minDead
	} else {
		c.compaction.count++
		c.compaction.retryAt = 0
	}
	c.mu.Unlock()
	if err != nil && !errors.Is(err, journal.ErrClosed) {
		c.log.Warn("broker: compacting the sessions journal failed; trying again after more writes", "error", err)
	}
}

// waitCompaction returns once no compaction runs.
func (c *committer) waitCompaction() {
	c.mu.Lock()
	done := c.compaction.done
	c.mu.Unlock()
	if done != nil {
		<-done
	}
}

// SessionsStats describe the sessions journal (Broker.SessionsStats).
type SessionsStats struct {
	FileBytes   int64  // the journal's files as written (its open segment's reserved blocks not counted)
	LiveBytes   int64  // the live records as a snapshot holds them
	Records     int    // live records
	Compactions uint64 // snapshots that replaced the files
	// Failures counts the times the journal began refusing writes, Resets the times it was
	// made to take them again, RefusedWrites the writes that failed (their waiters were
	// told). Err is the failure while it lasts.
	Failures      uint64
	Resets        uint64
	RefusedWrites uint64
	Err           error
}

func (c *committer) stats() SessionsStats {
	file := c.j.Stats().FileBytes
	c.mu.Lock()
	defer c.mu.Unlock()
	return SessionsStats{
		FileBytes: file, LiveBytes: c.liveBytes, Records: len(c.live), Compactions: c.compaction.count,
		Failures: c.health.failures, Resets: c.health.resets, RefusedWrites: c.health.refusals,
		Err: c.health.broken,
	}
}
