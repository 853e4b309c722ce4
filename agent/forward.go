package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/publish"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// ForwardDir is the directory of the forwarded acks' and heartbeats' log inside
// agent.data_dir.
const ForwardDir = "forward"

// Bounds and timings of the forward log.
const (
	// maxForwarded and maxForwardedBytes bound the backlog (acks and heartbeats journalled
	// and not yet accepted upstream; bytes are payload plus device id). About 1.5 MiB of
	// memory when full: it stays inside the gateway's budget during a long outage.
	maxForwarded      = 8192
	maxForwardedBytes = 1 << 20
	// forwardLazyDelay is how long a message may wait before its add record goes to the
	// journal (written, and fsynced per journal.sync, at once then): one the upstream
	// broker accepted sooner is never written (write-behind, see forwarder). It is also
	// the journal's LazyDelay, for the reported records.
	forwardLazyDelay = 50 * time.Millisecond
	// forwardBatch is how many messages the publisher takes from the backlog per round.
	forwardBatch = 64
	// forwardGather is how long the publisher lets acks and heartbeats gather after the
	// first one before it publishes them: they are information for the back office, not
	// part of any task's delivery, and a burst of acks (terminals answering together) then
	// costs one publishing round, one sync and one reported record instead of one each.
	// Measured at 64 terminals acking after 20 ms: 1.4 acks a round without it.
	forwardGather = 5 * time.Millisecond
	// compactForwarded is how many dead records the log tolerates before a snapshot.
	compactForwarded = 8192
	// maxForwardDeviceID bounds a device id in a record (config ids are far shorter).
	maxForwardDeviceID = 256
)

// forwarder copies terminals' acks and heartbeats to faceagent/{gw}/devices/{id}/ack and
// …/heartbeat (docs/design.md "Reports": QoS 1, kept in the journal until the upstream broker
// accepted them, sent in order on reconnect). It is a journal of its own in
// data_dir/forward, built like the deadletter log, with these differences:
//
//   - ack and heartbeat are called on the device event path (the pumps, mqttlink's
//     delivery goroutines, concurrently): they encode, admit the message to the backlog
//     and return. They never wait for the upstream broker or the disk.
//   - Write-behind: a message's add record is appended only once it has waited
//     forwardLazyDelay without being accepted upstream (writeDue, on a timer that runs
//     only while such messages wait; Close appends the rest). What the broker took
//     sooner — every ack while the upstream keeps up, 5 ms after it came — costs the
//     log nothing: no record, no reported record, no write, no fsync, no compaction.
//     A crash loses the same as with a lazy append at once (what came in the last
//     forwardLazyDelay and is not yet accepted), and fewer duplicates.
//   - Heartbeats coalesce: a device's new heartbeat replaces its older one not yet sent,
//     so after an outage each device's latest heartbeat goes up, not hours of stale ones.
//     Acks never coalesce.
//   - The backlog is bounded (count and bytes). When full, the oldest acks not yet sent
//     are dropped to make room (counted, logged at most every forwardDropLogEvery): the
//     results, from the outbox's journal, carry every task's outcome; a forwarded ack is
//     the terminal's word for it. A message is refused only when no ack is left to drop.
//
// Replay applies the same rules in the same order (records are appended under mu, in id
// order, which is the order the backlog changed), so it rebuilds the backlog the live
// process had, less the messages accepted before they were written: coalesced and dropped
// messages need no records of their own. (A message killed before its record was due is
// never written; one it killed that was written comes back only if the killer's record
// is lost in a crash too, as with appending at once.) One goroutine publishes the backlog
// in id order with QoS 1 and appends a reported record (lazily) once the broker took
// them, when the journal holds any of them; another writes a snapshot when most of the
// log is dead.
type forwarder struct {
	j      *journal.Journal
	pub    publisher
	prefix string // faceagent/{gw}/devices/
	log    *slog.Logger
	m      *agentMetrics

	maxCount, maxBytes int // backlog bounds; defaults maxForwarded, maxForwardedBytes
	compactAfter       int // dead records before a snapshot; default compactForwarded

	mu         sync.Mutex
	pending    []fwdEntry        // in id order; dead entries (payload nil) until trimmed
	spare      []fwdEntry        // a small backing array for pending, used again (resetPending)
	live       int               // entries in pending still to send
	dead       int               // entries in pending superseded or dropped
	bytes      int               // device and payload bytes of the live entries
	heartbeats map[string]uint64 // device → id of its live heartbeat in pending
	dropScan   int               // no live ack in pending before this index
	nextID     uint64
	records    int // records in the journal since the last snapshot (or Open)
	scratch    []byte
	// Write-behind: every entry with an id above writtenThrough that is still in pending
	// and live has no record yet; lastWritten is the id of the last add record appended,
	// reportedThrough the id of the last reported record (replay: both as written).
	writeDelay      time.Duration // forwardLazyDelay; 0 (tests): each add is written at once
	writtenThrough  uint64
	lastWritten     uint64
	reportedThrough uint64
	epoch           time.Time   // fwdEntry.added counts from here
	writeTimer      *time.Timer // runs writeDue; armed while unwritten live entries wait
	writeArmed      bool
	closing         bool      // close began: adds are refused, writeDue does nothing
	journalErr      error     // the journal refused an append: adds are refused from then on
	droppedLog      uint64    // drops not yet logged
	lastLog         time.Time // last drop log line
	failedLog       bool      // the journal's refusal was logged

	ready     chan struct{} // capacity 1: poked when the backlog grows
	reported  chan struct{} // capacity 1: poked after messages were marked reported (tests)
	written   chan struct{} // capacity 1: poked after writeDue appended records (tests)
	compactC  chan struct{} // capacity 1: poked when a snapshot is due
	compacted chan struct{} // capacity 1: poked after a snapshot (tests)
	wg        sync.WaitGroup

	// The publisher goroutine's own.
	batch  []fwdEntry
	skip   []bool                // per batch entry: found dead, not sent
	topics map[string]*[2]string // device → its ack and heartbeat topics
}

type fwdEntry struct {
	id      uint64
	kind    byte // fwdRecordAck or fwdRecordHeartbeat
	device  string
	payload []byte        // nil once superseded (a newer heartbeat) or dropped by the bound
	added   time.Duration // since forwarder.epoch (0: replayed)
}

func (e *fwdEntry) size() int { return len(e.device) + len(e.payload) }

// forwardDropLogEvery spaces the log lines about acks dropped by the bound.
const forwardDropLogEvery = 10 * time.Second

// openForwarder opens (or creates) the log in dir and rebuilds the backlog from it. pub
// may be set later, before start.
func openForwarder(dir string, jo journal.Options, pub publisher, prefix string, m *agentMetrics, log *slog.Logger) (*forwarder, error) {
	return openForwarderBounded(dir, jo, pub, prefix, m, log, maxForwarded, maxForwardedBytes)
}

func openForwarderBounded(dir string, jo journal.Options, pub publisher, prefix string, m *agentMetrics, log *slog.Logger, maxCount, maxBytes int) (*forwarder, error) {
	jo.Logger = log
	jo.LazyDelay = forwardLazyDelay
	j, err := journal.Open(dir, &jo)
	if err != nil {
		return nil, err
	}
	f := &forwarder{j: j, pub: pub, prefix: prefix, log: log, m: m, nextID: 1, maxCount: maxCount, maxBytes: maxBytes,
		heartbeats: map[string]uint64{}, ready: make(chan struct{}, 1), reported: make(chan struct{}, 1),
		written: make(chan struct{}, 1), writeDelay: forwardLazyDelay, epoch: time.Now(),
		compactAfter: compactForwarded, compactC: make(chan struct{}, 1), compacted: make(chan struct{}, 1),
		topics: map[string]*[2]string{}}
	err = j.Replay(func(rec []byte) error {
		kind, id, device, payload, err := parseForwardRecord(rec)
		if err != nil {
			return err
		}
		f.records++
		switch kind {
		case fwdRecordReported:
			f.removeReported(id)
			f.nextID = max(f.nextID, id+1)
		case fwdRecordSeen:
			f.nextID = max(f.nextID, id)
		default:
			if id < f.nextID {
				return nil // in the snapshot already: appended between its checkpoint and its capture
			}
			f.nextID = id + 1
			f.admit(fwdEntry{id: id, kind: kind, device: string(device), payload: append([]byte(nil), payload...)})
		}
		return nil
	})
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("replaying %s: %w", dir, err)
	}
	f.pending = slices.Clip(f.pending)
	f.writtenThrough, f.lastWritten = f.nextID-1, f.nextID-1 // all of it is in the journal
	if f.live > 0 {
		log.Info("forwarded acks and heartbeats not yet accepted upstream", "count", f.live)
		f.ready <- struct{}{}
	}
	f.gauge()
	return f, nil
}

// ack forwards a terminal's ack: journalled (lazily) and queued for the publisher.
func (f *forwarder) ack(deviceID string, a face.Ack) {
	if f == nil {
		return
	}
	payload, err := a.AppendJSON(make([]byte, 0, 48+len(a.MessageID)+len(a.Message)))
	if err != nil {
		f.log.Debug("forwarding an ack", "device", deviceID, "err", err)
		return
	}
	f.add(fwdRecordAck, deviceID, payload)
}

// heartbeat forwards a terminal's heartbeat; it replaces the device's heartbeat not yet
// sent, if any.
func (f *forwarder) heartbeat(deviceID string, h face.Heartbeat) {
	if f == nil {
		return
	}
	payload, err := h.AppendJSON(nil)
	if err != nil {
		f.log.Debug("forwarding a heartbeat", "device", deviceID, "err", err)
		return
	}
	f.add(fwdRecordHeartbeat, deviceID, payload)
}

// add admits one message to the backlog; its record is written by writeDue if it is
// still waiting forwardLazyDelay from now. It returns at once.
func (f *forwarder) add(kind byte, deviceID string, payload []byte) {
	if !forwardDeviceOK(deviceID) {
		f.log.Warn("not forwarding: the device id cannot be a topic level", "device", deviceID)
		return
	}
	f.mu.Lock()
	if f.closing || f.journalErr != nil {
		f.mu.Unlock()
		// Not admitted: the backlog in memory stays what the journal can say.
		f.m.forwardDropped.With("journal").Inc()
		return
	}
	id := f.nextID
	f.nextID++
	dropped, refused := f.admit(fwdEntry{id: id, kind: kind, device: deviceID, payload: payload, added: time.Since(f.epoch)})
	if !refused {
		if f.writeDelay == 0 {
			f.writeDueLocked()
		} else if !f.writeArmed {
			f.armWriteLocked(f.writeDelay)
		}
	}
	var logDrops uint64
	if dropped > 0 || refused {
		f.droppedLog += uint64(dropped) + b2u(refused)
		if now := time.Now(); now.Sub(f.lastLog) >= forwardDropLogEvery {
			logDrops, f.droppedLog, f.lastLog = f.droppedLog, 0, now
		}
	}
	compact := f.records-f.live >= f.compactAfter
	f.gaugeLocked()
	f.mu.Unlock()
	if dropped > 0 {
		f.m.forwardDropped.With("bound").Add(uint64(dropped))
	}
	if refused {
		f.m.forwardDropped.With("refused").Inc()
	}
	if logDrops > 0 {
		f.log.Warn("forward backlog full (the upstream broker is not taking acks); dropped the oldest acks",
			"dropped", logDrops, "bound", f.maxCount, "bound_bytes", f.maxBytes)
	}
	poke(f.ready)
	if compact {
		poke(f.compactC)
	}
}

// admit puts e into the backlog under the rules replay repeats: a heartbeat replaces its
// device's live one; while the backlog would be over a bound, the oldest live ack is
// dropped; when no ack is left to drop, e is refused. Called with mu held (or in replay).
func (f *forwarder) admit(e fwdEntry) (dropped int, refused bool) {
	size := e.size()
	oldAt := -1
	if e.kind == fwdRecordHeartbeat {
		if old, ok := f.heartbeats[e.device]; ok {
			oldAt = f.indexOf(old)
		}
	}
	freeCount, freeBytes := 0, 0
	if oldAt >= 0 {
		freeCount, freeBytes = 1, f.pending[oldAt].size()
	}
	for f.live-freeCount+1 > f.maxCount || f.bytes-freeBytes+size > f.maxBytes {
		if !f.dropOldestAck() {
			refused = true
			break
		}
		dropped++
	}
	if refused {
		return dropped, true
	}
	if oldAt >= 0 {
		f.kill(oldAt)
		f.m.forwardCoalesced.Inc()
	}
	f.pending = append(f.pending, e)
	f.live++
	f.bytes += size
	if e.kind == fwdRecordHeartbeat {
		f.heartbeats[e.device] = e.id
	}
	if f.dead > 256 && f.dead > len(f.pending)/2 {
		f.trimDead()
	}
	return dropped, false
}

// indexOf finds the entry with id in pending (-1: not there).
func (f *forwarder) indexOf(id uint64) int {
	i, ok := slices.BinarySearchFunc(f.pending, id, func(e fwdEntry, id uint64) int { return cmpID(e.id, id) })
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

// dropOldestAck drops the oldest live ack; false when there is none.
func (f *forwarder) dropOldestAck() bool {
	for i := f.dropScan; i < len(f.pending); i++ {
		if e := &f.pending[i]; e.kind == fwdRecordAck && e.payload != nil {
			f.kill(i)
			f.dropScan = i + 1
			return true
		}
	}
	f.dropScan = len(f.pending)
	return false
}

// kill marks pending[i] dead: superseded or dropped, it is not sent.
func (f *forwarder) kill(i int) {
	e := &f.pending[i]
	f.live--
	f.bytes -= e.size()
	f.dead++
	if e.kind == fwdRecordHeartbeat && f.heartbeats[e.device] == e.id {
		delete(f.heartbeats, e.device)
	}
	e.payload = nil
}

// trimDead removes the dead entries from pending (they have no other trace in memory).
func (f *forwarder) trimDead() {
	live := make([]fwdEntry, 0, f.live+f.live/4)
	for _, e := range f.pending {
		if e.payload != nil {
			live = append(live, e)
		}
	}
	f.pending, f.dead, f.dropScan = live, 0, 0
}

// removeReported drops every entry with an id <= id from the head of pending.
func (f *forwarder) removeReported(id uint64) {
	n := 0
	for n < len(f.pending) && f.pending[n].id <= id {
		e := &f.pending[n]
		if e.payload != nil {
			f.live--
			f.bytes -= e.size()
			if e.kind == fwdRecordHeartbeat && f.heartbeats[e.device] == e.id {
				delete(f.heartbeats, e.device)
			}
		} else {
			f.dead--
		}
		*e = fwdEntry{} // let the payload go
		n++
	}
	f.pending = f.pending[n:]
	f.dropScan = max(0, f.dropScan-n)
	if len(f.pending) == 0 {
		f.resetPending()
	}
}

// resetPending empties pending. A large backing array goes (an outage's backlog); the
// small spare one is used again, so a steady stream that the publisher keeps up with
// allocates no array per burst.
func (f *forwarder) resetPending() {
	if f.spare == nil {
		f.spare = make([]fwdEntry, forwardBatch)
	}
	clear(f.spare) // pending may have left it for a larger array: drop the stale payloads
	f.pending, f.dead, f.dropScan = f.spare[:0], 0, 0
}

func (f *forwarder) gauge() {
	f.mu.Lock()
	f.gaugeLocked()
	f.mu.Unlock()
}

func (f *forwarder) gaugeLocked() {
	f.m.forwardBacklog.Set(float64(f.live))
	f.m.forwardBacklogBytes.Set(float64(f.bytes))
}

// start runs the publisher and the compactor until ctx ends.
func (f *forwarder) start(ctx context.Context) {
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		publishBacklogGathered(ctx, f.ready, gathering{wait: forwardGather}, f.drain, func(err error, retryIn time.Duration) {
			f.log.Warn("forwarding to the upstream broker failed; will retry", "in", retryIn, "err", err)
		})
	}()
	go func() {
		defer f.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-f.compactC:
			}
			if err := f.compact(); err != nil && !errors.Is(err, journal.ErrClosed) {
				f.log.Error("compacting the forward log failed; it keeps growing until the next try", "err", err)
			}
			poke(f.compacted)
		}
	}()
}

// drain publishes up to one batch of live entries from the head of the backlog in order,
// then marks what the broker took as reported.
func (f *forwarder) drain(ctx context.Context) (more bool, sent int, err error) {
	f.mu.Lock()
	f.batch = f.batch[:0]
	limit := publish.BatchFor(f.pub, forwardBatch)
	for i := 0; i < len(f.pending) && len(f.batch) < limit; i++ {
		if f.pending[i].payload != nil {
			f.batch = append(f.batch, f.pending[i])
		}
	}
	if len(f.batch) == 0 && len(f.pending) > 0 {
		// Only dead entries. Replay would make them dead again only if it had their
		// killers' records, which write-behind may never have written: a reported record
		// covers them, if the journal holds one of them.
		_ = f.recordGoneLocked(f.pending[len(f.pending)-1].id)
		clear(f.pending)
		f.resetPending()
	}
	f.mu.Unlock()
	// In order, up to the publisher's window in flight; n is the prefix of the batch
	// accepted (or found dead). A publish may have waited long (for the connection): an
	// entry superseded or dropped meanwhile is not sent, so an outage ends with each
	// device's latest heartbeat only.
	f.skip = f.skip[:0]
	mark := publish.MarkOf(f.pub)
	n, err := publish.InOrder(ctx, f.pub, len(f.batch), func(i int) (string, []byte, bool) {
		e := f.batch[i]
		dead := !f.stillLive(e.id)
		f.skip = append(f.skip, dead)
		return f.topic(e), e.payload, dead
	})
	acks := 0
	var through uint64 // the last entry of the batch published or found dead
	for i, e := range f.batch[:n] {
		through = e.id
		if f.skip[i] {
			continue
		}
		sent++
		if e.kind == fwdRecordAck {
			acks++
		}
	}
	f.m.forwarded.With("ack").Add(uint64(acks))
	f.m.forwarded.With("heartbeat").Add(uint64(sent - acks))
	if through > 0 && sent > 0 {
		if serr := publish.SyncSince(f.pub, mark); serr != nil {
			through = 0 // not stored: sent again next round
			if err == nil {
				err = serr
			}
		}
	}
	if through > 0 {
		if merr := f.markReported(through); merr != nil && err == nil {
			err = merr
		}
	}
	clear(f.batch) // do not pin payloads until the next round
	f.mu.Lock()
	more = f.live > 0
	f.mu.Unlock()
	return more && err == nil, sent, err
}

// stillLive reports whether the entry id is still to be sent.
func (f *forwarder) stillLive(id uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.indexOf(id)
	return i >= 0 && f.pending[i].payload != nil
}

// topic is the upstream topic of e (cached per device; publisher goroutine only).
func (f *forwarder) topic(e fwdEntry) string {
	t := f.topics[e.device]
	if t == nil {
		t = &[2]string{f.prefix + e.device + "/ack", f.prefix + e.device + "/heartbeat"}
		f.topics[e.device] = t
	}
	if e.kind == fwdRecordAck {
		return t[0]
	}
	return t[1]
}

// markReported drops the entries up to id from the backlog and records that, if the
// journal holds any of them (recordGoneLocked).
func (f *forwarder) markReported(id uint64) error {
	f.mu.Lock()
	f.removeReported(id)
	err := f.recordGoneLocked(id)
	compact := f.records-f.live >= f.compactAfter || f.deadBytesDueLocked()
	f.gaugeLocked()
	f.mu.Unlock()
	poke(f.reported)
	if compact {
		poke(f.compactC)
	}
	return err
}

// deadBytesDueLocked reports whether the log's dead bytes call for a snapshot
// (deadBytesDue). Checked where records die (reported, written), not on the device event
// path. Called with mu held.
func (f *forwarder) deadBytesDueLocked() bool {
	return deadBytesDue(f.j, int64(f.bytes+f.live*recordOverhead), smallLogSegment)
}

// compact replaces the log by a snapshot of the backlog. The checkpoint is taken without
// holding mu, so the device event path never waits for the journal's flush: adds that
// land between the checkpoint and the capture are in the snapshot and again in the segment
// after it, and replay skips the second copy (the seen record closes the snapshot).
func (f *forwarder) compact() error {
	f.mu.Lock()
	before := f.records
	f.mu.Unlock()
	cp, err := f.j.Checkpoint()
	if err != nil {
		return err
	}
	f.mu.Lock()
	live := make([]fwdEntry, 0, f.live)
	for _, e := range f.pending {
		if e.payload != nil {
			live = append(live, e)
		}
	}
	next := f.nextID
	// The snapshot holds the live entries not yet written too: a reported record must
	// cover them from now on. (writeDue may still append them after the snapshot: replay
	// skips those, as it does adds that landed between the checkpoint and the capture.)
	f.lastWritten = max(f.lastWritten, next-1)
	// The snapshot, and what came after the checkpoint (counted high: some of those may
	// have landed before it, in the segments the snapshot replaces).
	f.records = len(live) + 1 + f.records - before
	again := f.records-f.live >= f.compactAfter
	f.mu.Unlock()
	if again { // a burst during the checkpoint: go again once this one is written
		defer poke(f.compactC)
	}
	var buf []byte
	return f.j.WriteSnapshot(cp, func(emit func([]byte) error) error {
		for _, e := range live {
			buf = appendForwardRecord(buf[:0], e.kind, e.id, e.device, e.payload)
			if err := emit(buf); err != nil {
				return err
			}
		}
		return emit(appendForwardRecord(buf[:0], fwdRecordSeen, next, "", nil))
	})
}

// close appends the records of the entries not yet written, then flushes and closes the
// log; the goroutines must have ended. Adds from then on are refused.
func (f *forwarder) close() error {
	f.mu.Lock()
	if !f.closing {
		f.closing = true
		if f.writeTimer != nil {
			f.writeTimer.Stop()
		}
		f.writeDueLocked()
	}
	f.mu.Unlock()
	return f.j.Close()
}

// poke signals c (capacity 1) without blocking.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
