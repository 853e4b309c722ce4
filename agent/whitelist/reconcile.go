package whitelist

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// The reconciler: per terminal, a state machine fed by events (heartbeats, the terminal's
// queue holding tasks or not, replies to its own commands, requests, desired changes) that
// notices drift and repairs it. It owns no goroutine: events arrive on the callers'
// goroutines and on the Clock's timers; what it decides (commands, reports) is queued under
// its lock and carried out after the lock is released, in the order decided, so that an
// implementation of Lister or Corrector may call an event method back before returning.

// Lister sends a ListPersons to a terminal through its one-at-a-time queue.
type Lister interface {
	// List queues cmd, a ListPersons for dev, behind what dev's queue holds. Its ack, or
	// the reason none came (out of tries, dropped), must be passed to
	// Reconciler.ListReply with cmd.MessageID, from any goroutine, possibly before List
	// returns. An error means cmd was not queued and no reply will come.
	List(dev string, cmd face.Command) error
}

// Corrector queues a reconciliation's corrective commands (AddPerson, DeletePerson).
type Corrector interface {
	// Correct queues cmd for dev behind what dev's queue holds, but so that the tasks dev's
	// queue takes in before cmd is sent go first, and a later task for the same person
	// supersedes it while unsent (then its outcome is a success: the task carries the
	// person's latest record). Its ack, or the reason none came, must be passed to
	// Reconciler.CorrectionDone with cmd.MessageID. An error means cmd was not queued.
	Correct(dev string, cmd face.Command) error
}

// Reporter publishes sync reports. SyncReport is called outside the reconciler's lock, in
// the order the reports were made; it must not wait for the upstream broker.
type Reporter interface {
	SyncReport(r wire.SyncReport)
}

// Clock is the reconciler's source of time and timers; tests inject a fake one.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f after d, on a goroutine of its choosing.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer made by a Clock.
type Timer interface {
	Stop() bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Defaults of ReconcileOptions.
const (
	DefaultMaxReconciling = 4
	DefaultBackoffBase    = 5 * time.Second
	DefaultBackoffMax     = 10 * time.Minute
	DefaultStepTimeout    = 15 * time.Minute
	DefaultMaxRefusals    = 8
	DefaultMaxSetFailures = 5
	DefaultWindow         = 8
)

// MessageIDPrefix begins every messageId the default NewMessageID makes. A task's
// messageId begins with its op (wire.Task.MessageID), so the acks of a reconciliation's
// own commands are told from those of tasks by it (OwnMessageID).
const MessageIDPrefix = "Sync-"

// OwnMessageID reports whether id is one the default NewMessageID made.
func OwnMessageID(id string) bool { return strings.HasPrefix(id, MessageIDPrefix) }

// v1Page is how many desired persons a protocol 1 reconciliation reads from the store at a
// time (it sends each again).
const v1Page = 256

// ReconcileOptions configure a Reconciler. Store, Lister, Corrector and Reporter are
// required; the zero value of the rest means the defaults.
type ReconcileOptions struct {
	Store     *Store
	Lister    Lister
	Corrector Corrector
	Reporter  Reporter
	// MaxReconciling bounds the terminals reconciling at once (default 4); the others wait
	// in the order their drift was noticed.
	MaxReconciling int
	// ListLimit returns the ListPersons limit for dev (its link's frame size decides:
	// face.ListLimitFor); nil or a result out of 1..face.MaxListLimit means
	// face.DefaultListLimit.
	ListLimit func(dev string) int
	// BackoffBase and BackoffMax bound the wait before a terminal's next reconciliation
	// after one failed or did not bring the terminal in step: BackoffBase doubled per
	// such reconciliation in a row, at most BackoffMax (defaults 5 s and 10 min).
	BackoffBase, BackoffMax time.Duration
	// StepTimeout bounds the wait for the next reply while the reconciliation's commands
	// await theirs (default 15 min, beyond the queue's own retries; the time the
	// terminal's tasks go first does not count): a reconciliation that got no reply in
	// time fails and the late replies are ignored.
	StepTimeout time.Duration
	// Window bounds the corrections of one reconciliation queued at once, awaiting their
	// replies (default 8; 1: one at a time). The queue sends the next straight from the
	// ack of the one before, so a repair goes at the terminal's pace, not at the pace of
	// deciding and journalling each correction after the ack before; they are topped up
	// once at most half are left. A correction is judged against the desired list when it
	// is queued: a task for its person supersedes it while unsent, and a SetWhitelist
	// starts a reconciliation that repairs what the window sent meanwhile.
	Window int
	// MaxRefusals bounds the refused AddPersons one reconciliation accepts (each excludes
	// the refused record from the desired list) before it fails (default 8): a terminal
	// refusing everything must not empty its desired list in one go.
	MaxRefusals int
	// MaxSetFailures is how many reconciliations in a row may fail (or end done without
	// the terminal coming in step) while a SetWhitelist task is pending before its result
	// is failed, with the last failure's reason (default 5; the agent passes [dispatch]
	// max_tries). Reconciliation goes on after that, with backoff, for reason digest
	// (count for a protocol 1 terminal).
	MaxSetFailures int
	// NewMessageID returns a messageId never used before with any terminal (default:
	// MessageIDPrefix, the clock's time at New in base 36, "-", a counter).
	NewMessageID func() string
	Clock        Clock
	Metrics      *Metrics
	Logger       *slog.Logger
}

// reasons is a set of pending reasons to reconcile, in the order a report names the first
// of them.
type reasons uint8

const (
	bySetWhitelist reasons = 1 << iota // a SetWhitelist replaced the desired list
	bySerial                           // the terminal was replaced
	byDigest                           // a v2 terminal's digest differs
	byCount                            // a v1 terminal holds fewer persons than desired
	byResync                           // a control command asked for it
	drifts         = bySerial | byDigest | byCount
)

// first is the reason a report names: setWhitelist, then serial, digest, count; a resync
// alone names what the protocol can check (digest, or count for v1).
func (rs reasons) first(v1 bool) wire.SyncReason {
	switch {
	case rs&bySetWhitelist != 0:
		return wire.SyncSetWhitelist
	case rs&bySerial != 0:
		return wire.SyncSerial
	case rs&byDigest != 0:
		return wire.SyncDigest
	case rs&byCount != 0 || v1:
		return wire.SyncCount
	}
	return wire.SyncDigest
}

// term is one terminal's state.
type term struct {
	dev string
	// From the last heartbeat.
	seen     bool
	protocol int
	serial   string
	digest   face.Digest
	persons  int

	tasks     bool // tasks queued or in flight
	idleBeats int  // heartbeats since the queue last held tasks or a reconciliation ended
	match     bool // the last judged heartbeat matched the desired list
	pending   reasons
	// verify: a reconciliation ended done and no heartbeat was judged since; if the next
	// one shows drift, the reconciliation did not take and counts as a failure.
	verify    bool
	failures  int       // reconciliations in a row that failed or did not take
	lastErr   string    // why the last of them failed
	setRuns   int       // reconciliations begun since the last SetWhitelist
	notBefore time.Time // no reconciliation before (backoff)
	retry     Timer
	retryGen  uint64

	slot   bool // holds one of MaxReconciling
	queued bool // waits for one
	rec    *recon
	// late: the commands of a reconciliation that ended (failed) still queued, awaiting
	// their outcome: the next one begins once they have it, so that at most Window of the
	// terminal's commands are queued at a time and a ListPersons never follows them; or at
	// lateUntil (StepTimeout after it ended), when they are presumed lost.
	late      []string
	lateUntil time.Time

	lastStatus wire.SyncStatus
	lastSync   time.Time
}

func (t *term) inSync() bool { return t.match && !t.tasks && t.rec == nil }

// Reconciler keeps the terminals' whitelists in step with the Store; see the package
// documentation, "Reconciliation".
type Reconciler struct {
	opt ReconcileOptions
	log *slog.Logger

	mu       sync.Mutex
	terms    map[string]*term
	waitq    []*term
	active   int
	closed   bool
	effects  []func()
	draining bool
	idSeq    uint64
	idBase   string
}

// ErrReconcileOptions is wrapped by NewReconciler's error for missing parts.
var ErrReconcileOptions = errors.New("whitelist: reconciler options")

// NewReconciler returns a reconciler over opt.Store. It sends nothing until events arrive.
func NewReconciler(opt ReconcileOptions) (*Reconciler, error) {
	if opt.Store == nil || opt.Lister == nil || opt.Corrector == nil || opt.Reporter == nil {
		return nil, errors.Join(ErrReconcileOptions, errors.New("Store, Lister, Corrector and Reporter are required"))
	}
	if opt.MaxReconciling <= 0 {
		opt.MaxReconciling = DefaultMaxReconciling
	}
	if opt.BackoffBase <= 0 {
		opt.BackoffBase = DefaultBackoffBase
	}
	if opt.BackoffMax <= 0 {
		opt.BackoffMax = DefaultBackoffMax
	}
	opt.BackoffMax = max(opt.BackoffMax, opt.BackoffBase)
	if opt.StepTimeout <= 0 {
		opt.StepTimeout = DefaultStepTimeout
	}
	if opt.MaxRefusals <= 0 {
		opt.MaxRefusals = DefaultMaxRefusals
	}
	if opt.MaxSetFailures <= 0 {
		opt.MaxSetFailures = DefaultMaxSetFailures
	}
	if opt.Window <= 0 {
		opt.Window = DefaultWindow
	}
	if opt.Clock == nil {
		opt.Clock = realClock{}
	}
	r := &Reconciler{opt: opt, log: opt.Logger, terms: map[string]*term{}}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.idBase = MessageIDPrefix + strconv.FormatInt(opt.Clock.Now().UnixNano(), 36) + "-"
	return r, nil
}

// Heartbeat is a terminal's heartbeat (protocol 1 or 2). A changed serial is drift at
// once; the digest (v2) or the person count (v1) is judged only while the terminal's queue
// holds no tasks and no reconciliation is under way, and a difference is drift only from
// the second heartbeat after that queue became empty (the first may predate its last
// command).
func (r *Reconciler) Heartbeat(dev string, h face.Heartbeat) {
	r.mu.Lock()
	defer r.unlock()
	if r.closed {
		return
	}
	t := r.term(dev)
	v := h.Version()
	var d face.Digest
	if v >= 2 {
		var err error
		if d, err = face.ParseDigest(h.Digest); err != nil {
			r.log.Warn("heartbeat with a bad digest ignored", "device", dev, "err", err)
			return
		}
		if h.Serial != "" && h.Serial != t.serial {
			if t.serial != "" {
				// A new terminal: what was learnt of the old one does not hold.
				t.failures, t.notBefore, t.verify, t.match = 0, time.Time{}, false, false
				r.drifted(t, bySerial)
			}
			t.serial = strings.Clone(h.Serial) // not the heartbeat message's memory
			serial := t.serial
			r.effects = append(r.effects, func() { r.keepSerial(dev, serial) })
		}
	}
	t.seen, t.protocol, t.digest, t.persons = true, v, d, h.Persons
	if t.rec == nil && !t.tasks && r.lateWait(t) == 0 {
		t.idleBeats++
		r.judge(t)
	}
	r.advance(t)
}

// TasksPending says whether dev's queue holds tasks (queued or in flight), not counting
// the commands this reconciler sent. A reconciliation runs only while it holds none: it
// queues nothing more once tasks arrive (the queue sends them before its corrections not
// yet sent), gives up its place among MaxReconciling, and resumes where it was when the
// tasks are done.
func (r *Reconciler) TasksPending(dev string, pending bool) {
	r.mu.Lock()
	defer r.unlock()
	if r.closed {
		return
	}
	t := r.term(dev)
	if t.tasks == pending {
		return
	}
	t.tasks = pending
	t.idleBeats = 0
	if pending {
		t.match = false // the tasks change the terminal: a heartbeat confirms it again
	} else if t.rec != nil {
		t.rec.progress = r.opt.Clock.Now() // its commands waited behind the tasks
	}
	r.advance(t)
}

// DesiredChanged says dev's desired list changed (a task's Set or Delete, a refusal's
// Exclude): the terminal is in sync again only once a heartbeat says so, and drift is
// judged only on heartbeats after the change. A reconciliation
// under way reads the desired list as it is when it compares each page and sends each
// command.
func (r *Reconciler) DesiredChanged(dev string) {
	r.mu.Lock()
	defer r.unlock()
	if r.closed {
		return
	}
	// A heartbeat from before the change says nothing of the new list, nor does one that
	// arrives before the task's command is queued (the intake changes the list first):
	// drift needs two idle heartbeats after the change.
	t := r.term(dev)
	t.match, t.idleBeats = false, 0
}

// SetWhitelist starts a reconciliation of dev with reason setWhitelist (a SetWhitelist
// task replaced its desired list) as soon as its queue holds no tasks, without backoff.
func (r *Reconciler) SetWhitelist(dev string) { r.request(dev, bySetWhitelist, wire.SyncSetWhitelist) }

// Resync starts a reconciliation of dev (a control command) as soon as its queue holds no
// tasks, without backoff. Its reports name reason digest (count for a v1 terminal) unless
// drift of another reason is pending.
func (r *Reconciler) Resync(dev string) { r.request(dev, byResync, "resync") }

func (r *Reconciler) request(dev string, why reasons, label wire.SyncReason) {
	r.mu.Lock()
	defer r.unlock()
	if r.closed {
		return
	}
	t := r.term(dev)
	t.pending |= why
	t.failures, t.notBefore, t.verify = 0, time.Time{}, false
	if why == bySetWhitelist {
		t.setRuns = 0
	}
	r.opt.Metrics.drift(label)
	r.advance(t)
}

// Forget drops dev's state (the terminal is gone). A reconciliation under way reports
// failed; replies to its commands are ignored.
func (r *Reconciler) Forget(dev string) {
	r.mu.Lock()
	defer r.unlock()
	t := r.terms[dev]
	if t == nil {
		return
	}
	if t.rec != nil {
		r.finish(t, wire.SyncFailed, "the terminal was removed")
	}
	r.stopRetry(t)
	if t.slot {
		t.slot = false
		r.active--
	}
	r.waitq = slices.DeleteFunc(r.waitq, func(q *term) bool { return q == t })
	delete(r.terms, dev)
	r.fill()
}

// Close stops the timers; events after Close are ignored. Reconciliations under way end
// without a report.
func (r *Reconciler) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, t := range r.terms {
		r.stopRetry(t)
		if t.rec != nil && t.rec.timer != nil {
			t.rec.timer.Stop()
		}
	}
	r.effects = nil
}

// Status is what the reconciler knows of one terminal.
type Status struct {
	InSync      bool            // the last judged heartbeat matched; nothing queued, in flight or under way
	Reconciling bool            // a reconciliation started and did not end (it may be paused for tasks)
	LastStatus  wire.SyncStatus // of the last reconciliation that started or ended ("": none)
	LastSync    time.Time       // when it started or ended
	Failures    int             // reconciliations in a row that failed or did not take
	NotBefore   time.Time       // backoff: no reconciliation before
}

// Status returns dev's status.
func (r *Reconciler) Status(dev string) Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.terms[dev]
	if t == nil {
		return Status{}
	}
	return Status{InSync: t.inSync(), Reconciling: t.rec != nil, LastStatus: t.lastStatus, LastSync: t.lastSync,
		Failures: t.failures, NotBefore: t.notBefore}
}

func (r *Reconciler) term(dev string) *term {
	t := r.terms[dev]
	if t == nil {
		// A copy: dev may share the memory of a whole parsed message (agent/wire, device/face).
		dev = strings.Clone(dev)
		// The serial seen before a restart: a terminal replaced meanwhile is serial drift.
		t = &term{dev: dev, serial: r.opt.Store.Serial(dev)}
		r.terms[dev] = t
	}
	return t
}

// keepSerial records the serial dev reported in the store, for the next start.
func (r *Reconciler) keepSerial(dev, serial string) {
	if err := r.opt.Store.SetSerial(dev, serial); err != nil {
		r.log.Warn("the terminal's serial is not kept for the next start", "device", dev, "err", err)
	}
}

// judge compares an idle terminal's heartbeat with its desired list. A terminal without a
// desired list is not judged: nothing says what it should hold.
func (r *Reconciler) judge(t *term) {
	s := r.opt.Store
	if known, _ := s.Known(t.dev); !known {
		t.match = false
		return
	}
	var ok bool
	var why reasons
	if t.protocol >= 2 {
		ok, why = t.digest == s.Digest(t.dev), byDigest
	} else {
		ok, why = t.persons >= s.Count(t.dev), byCount
	}
	if ok {
		t.match, t.verify, t.failures, t.notBefore = true, false, 0, time.Time{}
		t.pending &^= drifts
		r.stopRetry(t)
		// A v2 terminal whose digest is the desired one holds the list: a SetWhitelist
		// pending for it succeeded, once its own reconciliation ran (a v1 terminal's count
		// proves nothing: its task succeeds when that reconciliation ends done).
		if t.protocol >= 2 && t.pending&bySetWhitelist == 0 {
			r.finishSet(t, SetSucceeded, "")
		}
		return
	}
	t.match = false
	if t.idleBeats >= 2 {
		r.drifted(t, why)
	}
}

// finishSet gives t's pending SetWhitelist task, if any, its result (after the lock is
// released: it waits for the disk).
func (r *Reconciler) finishSet(t *term, st SetStatus, why string) {
	p, ok := r.opt.Store.PendingSet(t.dev)
	if !ok {
		return
	}
	dev, tries, log := t.dev, max(t.setRuns, 1), r.log
	r.effects = append(r.effects, func() {
		done, err := r.opt.Store.FinishSet(dev, p.MessageID, st, tries, why)
		switch {
		case err != nil:
			log.Error("recording a SetWhitelist result failed; it is given again later", "device", dev, "task", p.TaskID, "err", err)
		case done:
			log.Info("SetWhitelist task finished", "device", dev, "task", p.TaskID, "status", st, "tries", tries, "err", why)
		}
	})
}

// setFailed fails t's pending SetWhitelist task once MaxSetFailures reconciliations in a
// row failed; reconciliation goes on for drift.
func (r *Reconciler) setFailed(t *term) {
	if t.failures < r.opt.MaxSetFailures {
		return
	}
	if _, ok := r.opt.Store.PendingSet(t.dev); !ok {
		return
	}
	r.finishSet(t, SetFailed, fmt.Sprintf("%d reconciliations in a row failed, the last: %s", t.failures, t.lastErr))
	if t.pending&bySetWhitelist != 0 {
		t.pending &^= bySetWhitelist
		if t.protocol >= 2 {
			t.pending |= byDigest
		} else {
			t.pending |= byCount
		}
	}
}

// drifted makes why pending. Drift right after a reconciliation that ended done means it
// did not take: it counts as a failure, so a terminal whose digest never matches is
// reconciled with backoff, not at every heartbeat.
func (r *Reconciler) drifted(t *term, why reasons) {
	if t.verify {
		t.verify = false
		t.lastErr = "the terminal's whitelist still differs after the reconciliation ended done"
		r.failed(t)
	}
	if t.pending&why == 0 {
		reason := why.first(t.protocol < 2)
		r.opt.Metrics.drift(reason)
		r.log.Info("whitelist drift", "device", t.dev, "reason", reason)
	}
	t.pending |= why
}

// failed counts a failure and sets the backoff before the next reconciliation.
func (r *Reconciler) failed(t *term) {
	t.failures++
	d := r.opt.BackoffBase
	for i := 1; i < t.failures && d < r.opt.BackoffMax; i++ {
		d *= 2
	}
	t.notBefore = r.opt.Clock.Now().Add(min(d, r.opt.BackoffMax))
	r.setFailed(t)
}

// advance moves t on: starts or resumes a reconciliation when one is wanted, the terminal
// is idle, its backoff passed and a place is free; queues its next commands (step).
func (r *Reconciler) advance(t *term) {
	if r.closed {
		return
	}
	rec := t.rec
	if rec == nil {
		if t.pending == 0 || !t.seen || t.tasks || t.slot || t.queued {
			return
		}
		if known, _ := r.opt.Store.Known(t.dev); !known {
			// No desired list, nothing to compare with: a terminal the agent does not
			// manage keeps what it holds, even on a Resync.
			t.pending = 0
			return
		}
		if wait := max(t.notBefore.Sub(r.opt.Clock.Now()), r.lateWait(t)); wait > 0 {
			r.armRetry(t, wait) // or the last late outcome, whichever comes first
			return
		}
		r.enqueue(t)
		return
	}
	if t.tasks {
		if t.slot { // paused: the place goes to a terminal that can use it
			t.slot = false
			r.active--
			r.fill()
		}
		return
	}
	if !t.slot {
		r.enqueue(t)
		return
	}
	r.step(t)
}

// lateWait is how long t's late commands are still awaited (0: none are), dropping them
// once presumed lost.
func (r *Reconciler) lateWait(t *term) time.Duration {
	if len(t.late) == 0 {
		return 0
	}
	wait := t.lateUntil.Sub(r.opt.Clock.Now())
	if wait <= 0 {
		r.log.Warn("no outcome for the commands of an ended reconciliation; the next one does not wait for them",
			"device", t.dev, "commands", len(t.late))
		clear(t.late)
		t.late = nil
		return 0
	}
	return wait
}

func (r *Reconciler) enqueue(t *term) {
	if !t.queued {
		t.queued = true
		r.waitq = append(r.waitq, t)
	}
	r.fill()
}

// fill gives free places to waiting terminals, first come first served; a terminal that
// got tasks meanwhile leaves the queue (it comes back when they are done).
func (r *Reconciler) fill() {
	for r.active < r.opt.MaxReconciling && len(r.waitq) > 0 {
		t := r.waitq[0]
		r.waitq = r.waitq[1:]
		t.queued = false
		if t.tasks || t.slot || r.terms[t.dev] != t || (t.rec == nil && (t.pending == 0 || len(t.late) > 0)) {
			continue
		}
		t.slot = true
		r.active++
		if t.rec == nil {
			r.begin(t)
		}
		r.step(t)
	}
	if len(r.waitq) == 0 {
		r.waitq = nil // do not pin a long-gone backing array
	}
}

func (r *Reconciler) armRetry(t *term, wait time.Duration) {
	r.stopRetry(t)
	t.retryGen++
	gen := t.retryGen
	t.retry = r.opt.Clock.AfterFunc(wait, func() {
		r.mu.Lock()
		defer r.unlock()
		if r.terms[t.dev] != t || t.retryGen != gen {
			return
		}
		t.retry = nil
		r.advance(t)
	})
}

func (r *Reconciler) stopRetry(t *term) {
	if t.retry != nil {
		t.retry.Stop()
		t.retry = nil
	}
	t.retryGen++
}

// unlock releases the lock and carries out what was decided under it, in order. One
// caller at a time drains; an event method called back from an effect queues its own
// effects for that caller, so effects never run under the lock nor out of order.
func (r *Reconciler) unlock() {
	if r.draining || len(r.effects) == 0 {
		r.mu.Unlock()
		return
	}
	r.draining = true
	for len(r.effects) > 0 {
		f := r.effects[0]
		r.effects[0] = nil
		r.effects = r.effects[1:]
		r.mu.Unlock()
		f()
		r.mu.Lock()
	}
	r.effects = nil
	r.draining = false
	r.mu.Unlock()
}

func (r *Reconciler) newMessageID() string {
	if r.opt.NewMessageID != nil {
		return r.opt.NewMessageID()
	}
	r.idSeq++
	return r.idBase + strconv.FormatUint(r.idSeq, 10)
}
