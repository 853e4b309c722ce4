package broker

import (
	"sync"
	"time"
)

// A sessions journal that failed (a full disk, a failed fsync) refuses appends for good
// (package journal). The committer gets it going again by itself, without a restart:
//
//   - The failed batch and every write queued while the journal is down fail at once, with
//     the journal's error, for whoever waits for them (a publisher is not acknowledged and
//     is disconnected; a SUBSCRIBE gets 0x80, a CONNECT 0x88; Server().Publish and
//     SyncSessions return it), and nothing of them is counted as on disk: the live records
//     stay what was committed.
//   - With a backoff (retryFirst, doubling up to retryMax) it writes the live records anew
//     (journal.Reset: a new snapshot, then a new segment; the old files go). Reset reads
//     none of the old files, so records whose fsync failed are gone for good whatever the
//     kernel kept of them. The deletions that failed (acknowledged messages, unsubscribed
//     filters, sessions that ended) are left out of that snapshot: mochi has forgotten
//     those records already, and leaving them out only makes the disk agree. The puts
//     that failed are not written: each one's waiter was told, and the state it would have
//     stored was refused (a subscription or a session) or is sent again by its publisher.
//   - Once Reset succeeded the journal takes writes again; the backoff starts over after
//     the next commit that succeeds.
//   - Health: Broker.SessionsErr returns the error while the journal refuses writes (the
//     agent's /healthz and faceagent_up), Broker.SessionsStats counts failures, recoveries
//     and refused writes. The failure is logged once as an error, then at most once a
//     minute while it lasts, and its end once.

const (
	retryFirst      = 100 * time.Millisecond
	retryMax        = 5 * time.Second
	brokenLogEvery  = time.Minute
	refusedLogEvery = 10 * time.Second
)

// health is the committer's failure state, under its mu.
type health struct {
	broken   error     // the journal's error while it refuses appends; nil while it takes them
	since    time.Time // when the failure began
	retryAt  time.Time // the next Reset
	backoff  time.Duration
	timer    *time.Timer // wakes the committer at retryAt
	lastLog  time.Time
	refused  uint64              // writes failed since the failure began
	deletes  map[string]struct{} // committed records that failed writes deleted
	failures uint64              // failures begun
	resets   uint64              // failures ended by a Reset
	refusals uint64              // writes failed, in all
}

func (h *health) init() {
	h.backoff = retryFirst
	h.deletes = make(map[string]struct{})
}

// retryDueLocked reports whether the journal is down and a Reset is due. Called with mu held.
func (h *health) retryDueLocked() bool {
	return h.broken != nil && !time.Now().Before(h.retryAt)
}

// stop stops the retry timer (Close).
func (h *health) stop() {
	if h.timer != nil {
		h.timer.Stop()
	}
}

// brokenErr returns the error with which the journal refuses appends, or nil.
func (c *committer) brokenErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.health.broken
}

// fail records that the journal refuses appends with err, and schedules a Reset.
func (c *committer) fail(err error) {
	now := time.Now()
	c.mu.Lock()
	first := c.health.broken == nil
	if first {
		c.health.broken, c.health.since, c.health.lastLog, c.health.refused = err, now, now, 0
		c.health.failures++
	}
	c.health.retryAt = now.Add(c.health.backoff)
	c.armRetryLocked()
	c.mu.Unlock()
	if first {
		c.signal.changed()
		c.log.Error("broker: the sessions journal refuses writes; what needs them is refused until it takes them again (retrying)",
			"dir", c.j.Dir(), "error", err)
	}
}

// armRetryLocked sets the timer that wakes the committer for the next Reset. Called with mu
// held.
func (c *committer) armRetryLocked() {
	d := time.Until(c.health.retryAt)
	if c.health.timer == nil {
		c.health.timer = time.AfterFunc(d, func() {
			c.mu.Lock()
			c.cond.Broadcast()
			c.mu.Unlock()
		})
		return
	}
	c.health.timer.Reset(d)
}

// refuse notes the writes of batch, which failed: the deletions of committed records
// among them are left out when the journal is written anew.
func (c *committer) refuse(batch []write) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range batch {
		switch {
		case w.dropClient != "":
			for k := range c.byClient[w.dropClient] {
				c.health.deletes[k] = struct{}{}
			}
		case w.value == nil:
			if _, ok := c.live[w.key]; ok {
				c.health.deletes[w.key] = struct{}{}
			}
		}
	}
	c.health.refused += uint64(len(batch))
	c.health.refusals += uint64(len(batch))
}

// recover writes the live records (less the failed deletions) as the journal's whole
// content, which makes it take appends again; on failure it schedules the next try.
func (c *committer) recover() {
	c.waitCompaction() // its snapshot would race the new files' numbers
	err := c.j.Reset(func(emit func([]byte) error) error {
		// On the journal's writer goroutine while the committer waits for Reset: the only
		// goroutine that changes these maps is blocked.
		var rec []byte
		for k, v := range c.live {
			if _, gone := c.health.deletes[k]; gone {
				continue
			}
			rec = appendSessionOps(rec[:0], []sessionOp{{key: k, value: v}})
			if err := emit(rec); err != nil {
				return err
			}
		}
		return nil
	})
	now := time.Now()
	c.mu.Lock()
	if err != nil {
		c.health.backoff = min(2*c.health.backoff, retryMax)
		c.health.retryAt = now.Add(c.health.backoff)
		c.armRetryLocked()
		logNow := now.Sub(c.health.lastLog) >= brokenLogEvery
		if logNow {
			c.health.lastLog = now
		}
		since, refused := c.health.since, c.health.refused
		c.mu.Unlock()
		if logNow {
			c.log.Warn("broker: the sessions journal still refuses writes; retrying",
				"since", since.Format(time.RFC3339), "refused", refused, "error", err)
		}
		return
	}
	for k := range c.health.deletes {
		c.apply(sessionOp{key: k})
	}
	clear(c.health.deletes)
	since, refused := c.health.since, c.health.refused
	c.health.broken = nil
	c.health.resets++
	c.compaction.retryAt = 0
	c.mu.Unlock()
	c.signal.changed()
	c.log.Warn("broker: the sessions journal takes writes again",
		"after", now.Sub(since).Round(time.Millisecond), "refused", refused)
}

// rateLimit lets an event through at most once every refusedLogEvery and counts the ones it
// held back meanwhile.
type rateLimit struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether the event at now goes through, and how many were held back since
// the last one that did.
func (r *rateLimit) allow(now time.Time) (suppressed int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && now.Sub(r.last) < refusedLogEvery {
		r.suppressed++
		return 0, false
	}
	suppressed, r.suppressed, r.last = r.suppressed, 0, now
	return suppressed, true
}
