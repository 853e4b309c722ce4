package devstate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// Setter is what the writer needs of the state store: one write with an expiry. A
// refusal (the store answered with an error) must be a *store.ServerError, as both
// agent/kv adapters report it; any other error counts as the store being away.
type Setter interface {
	Set(ctx context.Context, key string, value []byte, expiry time.Duration) error
}

// SetterFunc is a func as a Setter.
type SetterFunc func(ctx context.Context, key string, value []byte, expiry time.Duration) error

// Set implements Setter.
func (f SetterFunc) Set(ctx context.Context, key string, value []byte, expiry time.Duration) error {
	return f(ctx, key, value, expiry)
}

// StatusSource gives a device's queue and link state (the outbox).
type StatusSource interface {
	DeviceStatus(deviceID string) (outbox.DeviceStatus, bool)
}

// DesiredSource gives a terminal's desired whitelist: its length and its digest
// (agent/whitelist's store).
type DesiredSource interface {
	Count(deviceID string) int
	Digest(deviceID string) face.Digest
}

// SyncUnmanaged is a device state's syncStatus for a terminal whose desired whitelist the
// agent never knew (no task named it): it is not reconciled, whatever it holds.
const SyncUnmanaged = "unmanaged"

// knownSource is what a DesiredSource may also tell (agent/whitelist's store does):
// whether the terminal has a desired list at all.
type knownSource interface {
	Known(deviceID string) (known, whole bool)
}

// Options configure a Writer.
type Options struct {
	// Devices are the ids whose state is kept; each is written once at start.
	Devices []string
	// Store takes the writes.
	Store Setter
	// Status gives each device's counts and link state.
	Status StatusSource
	// Desired, when set, gives each device's desired whitelist: the state then says how
	// many persons it should hold and whether it is in sync.
	Desired DesiredSource
	// Prefix is the key prefix: a device's state is written to Prefix+id
	// (faceagent/{gw}/devices/).
	Prefix string
	// WriteInterval is the least time between two writes of one device ([store]
	// write_interval); a failed write is retried after it.
	WriteInterval time.Duration
	// HeartbeatTimeout is how often an unchanged state is written again; the key's
	// expiry is three times it ([dispatch] heartbeat_timeout).
	HeartbeatTimeout time.Duration
	// Timeout bounds one write ([store] request_timeout).
	Timeout time.Duration
	// Log receives refusal warnings and failed writes (debug). Default: discard.
	Log *slog.Logger
	// Metrics, when not nil, counts the writes.
	Metrics *Metrics
	// Changed, when set, is called on every change a device's state sees (Touch,
	// Heartbeat, Result, Synced), on the caller's goroutine, after the change is recorded:
	// a watcher (the operator's page) reads States then. It must not block.
	Changed func()
}

// refusalWarnEvery bounds the warnings of refused state writes: one a minute, with the
// count since the last one.
const refusalWarnEvery = time.Minute

// Writer keeps Prefix+id current for each device; see the package doc.
type Writer struct {
	store    Setter
	status   StatusSource
	desired  DesiredSource
	prefix   string
	interval time.Duration
	refresh  time.Duration
	px       time.Duration
	timeout  time.Duration
	log      *slog.Logger
	m        *Metrics
	changed  func()

	mu      sync.Mutex
	devs    map[string]*devState
	wake    chan struct{}
	wg      sync.WaitGroup
	written uint64 // writes done (tests, benchmarks)
	failed  uint64
	scans   uint64 // writeDue rounds: wake-ups of the writer (tests, benchmarks)
	// refused counts writes the store refused (an -ERR answer, not a lost link);
	// refusedWarned is refused at the last warning, logged at warnedAt.
	refused, refusedWarned uint64
	warnedAt               time.Time
}

type devState struct {
	dirty     bool
	lastWrite time.Time
	last      []byte // what was last written
	hb        face.Heartbeat
	hbAt      time.Time
	lastErr   string
	// inSync is what the device's last state said; syncAt and syncStatus are the last
	// reconciliation's (Synced).
	inSync bool
	// syncNow: a heartbeat with the desired digest came while the last state said not in
	// sync; the state is written without waiting for WriteInterval.
	syncNow    bool
	syncAt     time.Time
	syncStatus string
	// refusal is the store's answer to the device's last write when it refused it ("" once a
	// write succeeds), refusedSince when that started.
	refusal      string
	refusedSince time.Time
}

// New returns a Writer; Start runs it.
func New(o Options) *Writer {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Writer{
		store: o.Store, status: o.Status, desired: o.Desired, prefix: o.Prefix, interval: o.WriteInterval,
		refresh: o.HeartbeatTimeout, px: 3 * o.HeartbeatTimeout, timeout: o.Timeout, log: log, m: o.Metrics, changed: o.Changed,
		devs: map[string]*devState{}, wake: make(chan struct{}, 1),
	}
	for _, id := range o.Devices {
		w.devs[id] = &devState{dirty: true} // write every device once at start
	}
	return w
}

// Touch marks a device's state as changed. It never blocks; a nil Writer ignores it.
//
// Only a device turning dirty wakes the writer: one already dirty is in the writer's
// next wake-up (its write_interval timer, or a write in progress that re-marked it). At
// thousands of acks a second, waking for each only to find every device inside its
// write_interval was a scan of all devices per ack on two shared cores.
func (w *Writer) Touch(id string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	wake := markDirty(w.devs[id])
	w.mu.Unlock()
	w.didChange(wake)
}

// markDirty marks d dirty and reports whether it was clean (the writer must be woken).
// Called with mu held.
func markDirty(d *devState) bool {
	if d == nil || d.dirty {
		return false
	}
	d.dirty = true
	return true
}

// Heartbeat records a device's heartbeat (firmware, persons) and marks it changed.
func (w *Writer) Heartbeat(id string, hb face.Heartbeat) {
	if w == nil {
		return
	}
	idle := false
	if w.desired != nil && hb.Version() >= 2 {
		s, ok := w.status.DeviceStatus(id) // the outbox's lock is never taken inside mu
		idle = !ok || (s.Queued == 0 && s.InFlight == "")
	}
	w.mu.Lock()
	d := w.devs[id]
	wake := markDirty(d)
	if d != nil {
		d.hb, d.hbAt = hb, time.Now()
		if idle && !d.inSync && inSync(&hb, w.desired.Digest(id), 0, "") {
			// Coming in sync is what operators and the back office wait for: written at
			// once, which costs at most one write per heartbeat.
			d.syncNow, wake = true, true
		}
	}
	w.mu.Unlock()
	w.didChange(wake)
}

// Result records a finished command (the error of a failed or expired one is the
// device's last error) and marks its device changed.
func (w *Writer) Result(r outbox.Result) {
	if w == nil {
		return
	}
	w.mu.Lock()
	d := w.devs[r.DeviceID]
	if d != nil && r.Err != "" && (r.Status == outbox.Failed || r.Status == outbox.Expired) {
		d.lastErr = r.Err
	}
	wake := markDirty(d)
	w.mu.Unlock()
	w.didChange(wake)
}

// Synced records a reconciliation of the device starting or ending (status: one of
// wire's SyncStatus values, at: when) and marks the device changed.
func (w *Writer) Synced(id string, status wire.SyncStatus, at time.Time) {
	if w == nil {
		return
	}
	w.mu.Lock()
	d := w.devs[id]
	if d != nil {
		d.syncAt, d.syncStatus = at, string(status)
	}
	wake := markDirty(d)
	w.mu.Unlock()
	w.didChange(wake)
}

// inSync reports whether a terminal holds its desired list: its last heartbeat is protocol
// 2 or later with the desired digest, and nothing is queued or in flight for it (what
// is, changes the list the terminal will hold).
func inSync(hb *face.Heartbeat, desired face.Digest, queued int, inFlight string) bool {
	if hb.Version() < 2 || queued > 0 || inFlight != "" {
		return false
	}
	d, err := face.ParseDigest(hb.Digest)
	return err == nil && d == desired
}

// didChange tells Options.Changed of a change, and wakes the writer when the device
// turned dirty (wake).
func (w *Writer) didChange(wake bool) {
	if w.changed != nil {
		w.changed()
	}
	if wake {
		w.poke()
	}
}

func (w *Writer) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Start runs the writer on its own goroutine until ctx ends; Wait waits for it.
func (w *Writer) Start(ctx context.Context) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		for {
			next := w.writeDue(ctx)
			timer.Reset(time.Until(next))
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			case <-timer.C:
			}
		}
	}()
}

// Wait returns once the goroutine Start began has ended.
func (w *Writer) Wait() { w.wg.Wait() }

// writeDue writes every device that is due and returns when the next one will be.
func (w *Writer) writeDue(ctx context.Context) time.Time {
	now := time.Now()
	next := now.Add(w.refresh)
	w.mu.Lock()
	w.scans++
	var due []string
	for id, d := range w.devs {
		refreshAt := d.lastWrite.Add(w.refresh)
		if !d.dirty && now.Before(refreshAt) {
			next = minTime(next, refreshAt)
			continue
		}
		if allowed := d.lastWrite.Add(w.interval); now.Before(allowed) && !d.syncNow {
			next = minTime(next, allowed)
			continue
		}
		due = append(due, id)
	}
	w.mu.Unlock()
	for _, id := range due {
		if ctx.Err() != nil {
			break
		}
		if w.writeOne(ctx, id, now) {
			// Failed: no touch wakes the writer for a device already dirty, so the retry
			// after write_interval is the writer's own.
			next = minTime(next, now.Add(w.interval))
		}
	}
	return next
}

// writeOne writes one device's state; it reports whether the write failed (the device is
// dirty again and due after write_interval).
func (w *Writer) writeOne(ctx context.Context, id string, now time.Time) (failed bool) {
	s, ok := w.status.DeviceStatus(id) // the outbox's lock is never taken inside mu
	w.mu.Lock()
	d := w.devs[id]
	st := w.stateLocked(id, d, s, ok, now)
	d.inSync = st.InSync
	d.syncNow = false
	// A protocol 1 terminal cannot be in sync, and an unmanaged one has no desired list to
	// be in sync with: neither has the series, so no alert fires for it.
	judged := d.hb.Version() >= 2 && st.SyncStatus != SyncUnmanaged
	prev := d.last
	d.dirty = false
	synced := 0
	for _, d := range w.devs {
		if d.inSync {
			synced++
		}
	}
	w.mu.Unlock()
	if w.m != nil && w.desired != nil {
		if w.m.DesiredPersons != nil {
			w.m.DesiredPersons.With(id).Set(float64(st.DesiredPersons))
		}
		if w.m.InSync != nil {
			w.m.InSync.Set(float64(synced))
		}
		if w.m.TerminalInSync != nil {
			if judged {
				w.m.TerminalInSync.With(id).Set(b2f(st.InSync))
			} else {
				w.m.TerminalInSync.Delete(id)
			}
		}
	}

	// Unchanged apart from the timestamp, and not yet due for a refresh: skip the write.
	cmp := st
	cmp.UpdatedAt = 0
	body, _ := cmp.MarshalMsg(nil)
	if bytes.Equal(body, prev) && now.Before(d.lastWrite.Add(w.refresh)) {
		return false
	}
	value, _ := st.MarshalMsg(nil)
	wctx, cancel := context.WithTimeout(ctx, w.timeout)
	start := time.Now()
	err := w.store.Set(wctx, w.prefix+id, value, w.px)
	cancel()
	if w.m != nil {
		w.m.WriteSeconds.Observe(time.Since(start).Seconds())

		if err != nil {
			w.m.WriteErrors.Inc()
		}
	}
	var serr *store.ServerError
	refused := errors.As(err, &serr)
	w.mu.Lock()
	warn, since := false, uint64(0)
	wasRefused := d.refusal != ""
	if err != nil {
		w.failed++
		d.dirty = true // try again after the interval
		d.lastWrite = now
		if refused {
			w.refused++
			if d.refusal == "" {
				d.refusedSince = now
			}
			d.refusal = serr.Text
			if now.Sub(w.warnedAt) >= refusalWarnEvery {
				warn, since = true, w.refused-w.refusedWarned
				w.warnedAt, w.refusedWarned = now, w.refused
			}
		}
	} else {
		w.written++
		d.last, d.lastWrite = body, now
		d.refusal = ""
	}
	warningsChanged := wasRefused != (d.refusal != "")
	w.mu.Unlock()
	if warningsChanged && w.changed != nil {
		w.changed() // RefusedWarnings names the device, or no longer does
	}
	switch {
	case refused:
		// Not the link: the store answered, and will answer the same until someone acts (a
		// fencing token on the key, a full store, a key rule). Warn, at most once a minute.
		if w.m != nil {
			w.m.WriteRefused.With(refusalReason(err)).Inc()
		}
		if warn {
			w.log.Warn("the state store refuses the device state", "device", id, "key", w.prefix+id,
				"answer", serr.Text, "refused_since_last_warning", since)
		}
	case err != nil:
		w.log.Debug("device state not written", "device", id, "err", err)
	}
	return err != nil
}

// stateLocked builds device id's state as of now from its queue's status s (ok: known to
// the outbox). Called with mu held.
func (w *Writer) stateLocked(id string, d *devState, s outbox.DeviceStatus, ok bool, now time.Time) wire.DeviceState {
	st := wire.DeviceState{DeviceID: id, UpdatedAt: now.UnixMilli()}
	if ok {
		st.Online, st.Paused, st.QueueDepth, st.InFlight = s.Online, s.Paused, s.Queued, s.InFlight
		st.Sent, st.Succeeded, st.Failed, st.Retries = s.Sent, s.Succeeded, s.Failed, s.Retries
		st.LastAck = unixMilli(s.LastAck)
	}
	st.LastHeartbeat = unixMilli(d.hbAt)
	st.Firmware, st.Persons, st.LastError = d.hb.Firmware, d.hb.Persons, d.lastErr
	st.LastSync, st.SyncStatus = unixMilli(d.syncAt), d.syncStatus
	if w.desired != nil {
		st.DesiredPersons = w.desired.Count(id)
		st.InSync = inSync(&d.hb, w.desired.Digest(id), st.QueueDepth, st.InFlight)
		if k, ok := w.desired.(knownSource); ok {
			if known, _ := k.Known(id); !known {
				st.SyncStatus, st.InSync = SyncUnmanaged, false
			}
		}
	}
	return st
}

// States returns every device's state as of now, as it would be written, sorted by id: what
// the operator's page shows. It writes nothing.
func (w *Writer) States() []wire.DeviceState {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	ids := make([]string, 0, len(w.devs))
	for id := range w.devs {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	slices.Sort(ids)
	// The queues' status first, without mu: the outbox's lock is never taken inside it.
	status := make([]outbox.DeviceStatus, len(ids))
	known := make([]bool, len(ids))
	for i, id := range ids {
		status[i], known[i] = w.status.DeviceStatus(id)
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]wire.DeviceState, 0, len(ids))
	for i, id := range ids {
		out = append(out, w.stateLocked(id, w.devs[id], status[i], known[i], now))
	}
	return out
}

// RefusedWarnings describes the devices whose last state write the store refused, for
// /healthz, sorted. A nil Writer has none.
func (w *Writer) RefusedWarnings() []string {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for id, d := range w.devs {
		if d.refusal != "" {
			out = append(out, fmt.Sprintf("state store refuses the state of device %s (%s%s) since %s: %s",
				id, w.prefix, id, d.refusedSince.UTC().Format(time.RFC3339), d.refusal))
		}
	}
	slices.Sort(out)
	return out
}

// refusalReason is the label of faceagent_store_write_refused_total for a refusal:
// fencing, quota, not_authorized or other.
func refusalReason(err error) string {
	switch {
	case errors.Is(err, store.ErrFencingTokenRequired), errors.Is(err, store.ErrFencingTokenLowerVersion),
		errors.Is(err, store.ErrFencingTokenSkew):
		return "fencing"
	case errors.Is(err, store.ErrQuotaExceeded):
		return "quota"
	case errors.Is(err, store.ErrNotAuthorized):
		return "not_authorized"
	}
	return "other"
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
