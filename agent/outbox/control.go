package outbox

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// ResultsReady is signalled (capacity 1, never closed) when results may be waiting. The
// agent's reporter waits on it, then calls Results.
func (o *Outbox) ResultsReady() <-chan struct{} { return o.resultsC }

// Results returns up to n results not yet marked reported, oldest first, once their
// records are durable. The agent publishes them upstream and, when the broker accepted
// them (PUBACK), calls MarkReported. Results that were never marked are returned again,
// in the same order, after a restart.
func (o *Outbox) Results(n int) ([]Result, error) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil, ErrClosed
	}
	var out []Result
	if c := min(n, len(o.t.results)); c > 0 {
		out = make([]Result, 0, c) // at most that many: one allocation, not a doubling
	}
	var last journal.Seq
	for _, r := range o.t.results {
		if len(out) >= n {
			break
		}
		it := r.it
		if it.reported || !it.status.Terminal() {
			continue
		}
		// Err is a copy: callers keep it (the agent's state writer, per device), and the
		// table's is in a chunk of ids (blobs.go) that it would keep whole.
		out = append(out, Result{
			MessageID: it.id(), TaskID: it.task(), DeviceID: it.dev.id, Status: it.status,
			Tries: int(it.tries), Err: strings.Clone(o.t.lastErr(it)),
			AddedAt: time.Unix(0, it.added), FinishedAt: time.Unix(0, it.next),
		})
		last = max(last, r.seq)
	}
	o.mu.Unlock()
	if last > 0 {
		if err := o.j.Wait(last); err != nil {
			return nil, o.journalErr(err)
		}
	}
	return out, nil
}

// MarkReported records that the upstream broker accepted these results. Succeeded,
// superseded and expired commands leave the table; failed ones are kept for
// FailedRetention (RetryFailed can bring them back). Unknown ids are ignored. The record is
// not waited for: after a crash a result may be reported twice, never lost.
func (o *Outbox) MarkReported(ids ...string) error {
	o.mu.Lock()
	defer o.unlock() // messages leave: a rewrite of the payload file may leave a file to close
	if err := o.usable(); err != nil {
		return err
	}
	take := o.takeIDs[:0] // encoded and applied before this returns: reused
	var failed []*item
	for _, id := range ids {
		if it := o.t.items.get(id); it != nil && it.status.Terminal() && !it.reported {
			take = append(take, id)
			if it.status == Failed {
				failed = append(failed, it)
			}
		}
	}
	if len(take) == 0 {
		return nil
	}
	_, err := o.appendApply(&record{Kind: kindReported, IDs: take}, true)
	clear(take) // the caller's strings
	o.takeIDs = take[:0]
	if err != nil {
		return err
	}
	for _, it := range failed {
		o.retain(it)
	}
	o.rearm()
	return nil
}

// retain files a reported failure in o.retained, which stays ordered by finish time: the
// retention purge and nextWake stop at the first entry not yet due, so one out of order
// would hold back every older one behind it. Reports come in finish order, so this is
// nearly always an append.
func (o *Outbox) retain(it *item) {
	i := sort.Search(len(o.retained), func(i int) bool { return o.retained[i].next > it.next })
	o.retained = slices.Insert(o.retained, i, it)
}

func (o *Outbox) appendApply(r *record, lazy bool) (journal.Seq, error) {
	seq, err := o.append(r, lazy)
	if err != nil {
		return 0, o.journalErr(err)
	}
	return seq, o.t.apply(r)
}

// purgeRetained drops the reported failures whose retention is over and returns their
// devices, for didChange once o.mu is released.
func (o *Outbox) purgeRetained(now int64) []string {
	var ids []string
	for len(o.retained) > 0 {
		it := o.retained[0]
		if o.t.items.get(it.id()) == it && it.status == Failed {
			if it.next+int64(o.settings.FailedRetention) > now {
				break
			}
			ids = append(ids, it.id())
		}
		o.retained[0] = nil
		o.retained = o.retained[1:]
	}
	if len(ids) == 0 {
		return nil
	}
	devs := o.devicesOf(ids)
	o.emit(&record{Kind: kindPurge, IDs: ids})
	return devs
}

// Pause stops dispatch to a device (remote control). A command in flight finishes normally.
// The pause is journalled: it returns once the pause is on disk and survives a restart.
func (o *Outbox) Pause(deviceID string) error { return o.setPaused(deviceID, true) }

// Resume lifts Pause.
func (o *Outbox) Resume(deviceID string) error { return o.setPaused(deviceID, false) }

func (o *Outbox) setPaused(deviceID string, paused bool) error {
	o.mu.Lock()
	seq, err := o.setPausedLocked(deviceID, paused)
	o.unlock()
	if seq != 0 {
		o.didChange(deviceID)
	}
	return o.waitDurable(seq, err)
}

// OnChanged sets the function told of a device whose state a control call changed (nil:
// none): Pause and Resume that changed its pause, RetryFailed that scheduled its failed
// commands again, PurgeFailed that dropped them, and the purge of failures whose
// FailedRetention is over (on the outbox's timer goroutine). Enqueue, acks, heartbeats and link
// events are not told: their callers know of them (and tell the device state, as this
// does). It is called without the outbox's lock, once the change is in the table (before
// it is on disk), on the goroutine of the call; it must not block.
func (o *Outbox) OnChanged(fn func(deviceID string)) {
	if fn == nil {
		o.changed.Store(nil)
		return
	}
	o.changed.Store(&fn)
}

func (o *Outbox) didChange(deviceIDs ...string) {
	if fn := o.changed.Load(); fn != nil {
		for _, id := range deviceIDs {
			(*fn)(id)
		}
	}
}

// devicesOf lists the distinct devices of the commands ids, sorted. Called with o.mu held.
func (o *Outbox) devicesOf(ids []string) []string {
	var devs []string
	for _, id := range ids {
		if it := o.t.items.get(id); it != nil {
			devs = append(devs, it.dev.id)
		}
	}
	slices.Sort(devs)
	return slices.Compact(devs)
}

func (o *Outbox) setPausedLocked(deviceID string, paused bool) (journal.Seq, error) {
	if err := o.usable(); err != nil {
		return 0, err
	}
	d := o.dev(deviceID)
	if d.paused == paused {
		return 0, nil
	}
	kind := uint8(kindResume)
	if paused {
		kind = kindPause
	}
	seq, err := o.appendApply(&record{Kind: kind, Device: deviceID}, false)
	if err != nil {
		return 0, err
	}
	o.pump(d)
	o.rearm()
	o.startSendsLocked()
	return seq, nil
}

// waitDurable waits, without o.mu, for a control record to reach the disk: a control
// command is answered only once its effect survives a restart.
func (o *Outbox) waitDurable(seq journal.Seq, err error) error {
	if err != nil || seq == 0 {
		return err
	}
	if err := o.j.Wait(seq); err != nil {
		return o.journalErr(err)
	}
	return nil
}

// RetryFailed schedules the failed commands of a device ("" for every device) again with
// zero tries, and returns how many once that is on disk. Only a command that is still the
// latest intent for its person on its device is retried: one for which a later command for
// the same person on the same device was added — whatever became of it, queued, in flight,
// succeeded, failed, superseded or expired, reported and gone — is left failed (retrying an
// AddPerson after a later DeletePerson would undo the delete). It keeps its one result and
// is purged after FailedRetention like any failure; it is not reported again as Superseded,
// because a message id's reported outcome never changes. Commands without a PersonID are
// all retried.
func (o *Outbox) RetryFailed(deviceID string) (int, error) {
	o.mu.Lock()
	n, devs, seq, err := o.retryFailedLocked(deviceID)
	o.unlock()
	o.didChange(devs...)
	if err := o.waitDurable(seq, err); err != nil {
		return 0, err
	}
	return n, nil
}

// retryFailedLocked returns how many commands it scheduled again and their devices.
func (o *Outbox) retryFailedLocked(deviceID string) (int, []string, journal.Seq, error) {
	if err := o.usable(); err != nil {
		return 0, nil, 0, err
	}
	ids := o.failedIDs(deviceID, true)
	if len(ids) == 0 {
		return 0, nil, 0, nil
	}
	devs := o.devicesOf(ids)
	seq, err := o.appendApply(&record{Kind: kindReset, IDs: ids}, false)
	if err != nil {
		return 0, nil, 0, err
	}
	// The reset items are Scheduled again, in place: drop their retention entries, or one
	// that fails again would be found by its old entry, in its old place, with its new
	// finish time, holding back the purge of every failure behind it (and be held twice).
	o.retained = slices.DeleteFunc(o.retained, func(it *item) bool {
		return it.status != Failed || o.t.items.get(it.id()) != it
	})
	for _, d := range o.t.devices {
		if deviceID == "" || d.id == deviceID {
			d.live.failures, d.live.trips, d.live.breakerUntil = 0, 0, 0
			o.pump(d)
		}
	}
	o.rearm()
	o.startSendsLocked()
	return len(ids), devs, seq, nil
}

// PurgeFailed drops the failed commands of a device ("" for every device), reported or not,
// and returns how many once that is on disk.
func (o *Outbox) PurgeFailed(deviceID string) (int, error) {
	o.mu.Lock()
	n, devs, seq, err := o.purgeFailedLocked(deviceID)
	o.unlock() // messages leave: a rewrite of the payload file may leave a file to close
	o.didChange(devs...)
	if err := o.waitDurable(seq, err); err != nil {
		return 0, err
	}
	return n, nil
}

// purgeFailedLocked returns how many commands it dropped and their devices.
func (o *Outbox) purgeFailedLocked(deviceID string) (int, []string, journal.Seq, error) {
	if err := o.usable(); err != nil {
		return 0, nil, 0, err
	}
	ids := o.failedIDs(deviceID, false)
	if len(ids) == 0 {
		return 0, nil, 0, nil
	}
	devs := o.devicesOf(ids)
	seq, err := o.appendApply(&record{Kind: kindPurge, IDs: ids}, false)
	if err != nil {
		return 0, nil, 0, err
	}
	o.rearm()
	return len(ids), devs, seq, nil
}

func (o *Outbox) failedIDs(deviceID string, retry bool) []string {
	var ids []string
	for id, it := range o.t.items.all() {
		if it.status != Failed || (deviceID != "" && it.dev.id != deviceID) {
			continue
		}
		if retry && o.t.isOutdated(it) {
			continue // a later command for the person was added: retrying would undo it
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// SetSettings changes the dispatch settings live (remote config). Zero fields take their
// defaults. Commands in flight keep the ack deadline they were sent with.
func (o *Outbox) SetSettings(s Settings) {
	o.mu.Lock()
	defer o.unlock()
	o.settings = s.withDefaults()
	for _, d := range o.t.devices {
		o.pump(d)
	}
	o.rearm()
	o.startSendsLocked()
}

// Settings returns the dispatch settings in force.
func (o *Outbox) Settings() Settings {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.settings
}

// SetDevice changes a device's configuration live. It replaces the whole DeviceConfig
// (zero overrides: Settings again). The new values apply from the next decision on: the
// heartbeat timeout at once (the device may go offline or online by it), max_tries when
// the current try ends, the retry interval from the next send and backoff. A command
// already in flight keeps the ack deadline it was sent with, as with SetSettings.
func (o *Outbox) SetDevice(deviceID string, cfg DeviceConfig) {
	o.mu.Lock()
	defer o.unlock()
	o.configs[deviceID] = cfg
	d := o.dev(deviceID)
	d.live.cfg = cfg
	o.pump(d)
	o.rearm()
	o.startSendsLocked()
}

// DeviceStatus returns one device's state; ok is false for a device never seen.
func (o *Outbox) DeviceStatus(deviceID string) (st DeviceStatus, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.t.devices[deviceID]
	if d == nil {
		return DeviceStatus{}, false
	}
	return o.status(d, o.now()), true
}

// Status returns every device's state, sorted by id.
func (o *Outbox) Status() []DeviceStatus {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	out := make([]DeviceStatus, 0, len(o.t.devices))
	for _, d := range o.t.devices {
		out = append(out, o.status(d, now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DeviceID < out[j].DeviceID }) // sort, not slices: see spill.go
	return out
}

func (o *Outbox) status(d *device, now int64) DeviceStatus {
	ts := func(ns int64) time.Time {
		if ns == 0 {
			return time.Time{}
		}
		return time.Unix(0, ns)
	}
	st := DeviceStatus{
		DeviceID: d.id, Online: o.online(d, now), Paused: d.paused, Queued: len(d.queue),
		LastAck: ts(d.live.lastAck), LastSeen: ts(d.live.lastSeen),
		Sent: d.live.c.sent, Succeeded: d.live.c.succeeded, Failed: d.live.c.failed,
		Superseded: d.live.c.superseded, Expired: d.live.c.expired, Retries: d.live.c.retries,
	}
	if d.live.breakerUntil > now {
		st.BreakerOpenUntil = ts(d.live.breakerUntil)
	}
	if st.Online && !d.live.cfg.NoHeartbeat {
		st.OnlineUntil = ts(d.live.lastSeen + int64(o.settingsFor(d).HeartbeatTimeout))
	}
	if it := d.inflight; it != nil {
		st.InFlight, st.InFlightTries, st.InFlightTasks = it.id(), int(it.tries), d.inflightTasks()
	}
	st.FailedHeld = d.failed
	for it := range o.t.silent { // few: the corrections under way
		if it.dev == d && !it.status.Terminal() {
			st.NoResult++
		}
	}
	st.Queries = len(d.live.queries)
	if d.live.query != nil {
		st.Queries++
	}
	return st
}

// Failures returns the failed commands held for RetryFailed (reported or not), the most
// recently failed first, at most n of them, and how many are held in all. It walks the
// commands that carry an error (failed, retried, superseded), not the whole table: for a
// watcher's page, not for a hot path.
func (o *Outbox) Failures(n int) (list []Result, held int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, d := range o.t.devices {
		held += d.failed
	}
	if held == 0 || n <= 0 {
		return nil, held
	}
	var failed []*item
	for it := range o.t.errs {
		if it.status == Failed {
			failed = append(failed, it)
		}
	}
	// Latest finish first; among equal times, the later added (the clock may be coarse).
	sort.Slice(failed, func(i, j int) bool {
		a, b := failed[i], failed[j]
		return a.next > b.next || (a.next == b.next && a.ord > b.ord)
	})
	for _, it := range failed[:min(n, len(failed))] {
		list = append(list, Result{MessageID: strings.Clone(it.id()), TaskID: strings.Clone(it.task()), DeviceID: it.dev.id,
			Status: it.status, Tries: int(it.tries), Err: strings.Clone(o.t.lastErr(it)),
			AddedAt: time.Unix(0, it.added), FinishedAt: time.Unix(0, it.next)})
	}
	return list, held
}

// Unfinished is how many commands are scheduled or in flight: Stats().Queued without the
// walk over devices and results that Stats makes, for callers that ask often.
func (o *Outbox) Unfinished() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.t.active
}

// Stats returns table-wide figures.
func (o *Outbox) Stats() Stats {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := Stats{Queued: o.t.active, Devices: len(o.t.devices)}
	for _, d := range o.t.devices {
		if d.inflight != nil {
			s.InFlight++
		}
		s.FailedHeld += d.failed
	}
	for _, r := range o.t.results {
		if !r.it.reported {
			s.Unreported++
		}
	}
	s.PayloadsOnHeap = len(o.t.heapPay)
	if sp := o.t.spill; sp != nil {
		s.PayloadFileBytes = sp.size + int64(len(sp.buf))
		s.PayloadWriteErrors, s.PayloadReadErrors = sp.writeErrors, sp.readErrors.Load()
	}
	s.PayloadRepairs, s.PayloadRepairFailures = o.repair.repaired, o.repair.failed
	return s
}

// JournalStats returns the journal's counters (records, fsyncs, segments, snapshots) for
// metrics.
func (o *Outbox) JournalStats() journal.Stats { return o.j.Stats() }

// Recovery reports what opening the journal found (a torn tail cut, damage skipped).
func (o *Outbox) Recovery() journal.Recovery { return o.j.Recovery() }

// Known reports whether a task with messageID is stored (in the table, among the recently
// finished, or being stored right now): EnqueueBatch would answer ErrDuplicate for it. A
// caller that keeps a second journal in step with the outbox (the intake's desired
// whitelists) asks before it applies a task there, so that a redelivered task is applied
// to neither twice.
func (o *Outbox) Known(messageID string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, pending := o.pending[messageID]
	return pending || o.t.seen(messageID)
}
