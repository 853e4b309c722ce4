package whitelist

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// One reconciliation: started, then ListPersons page by page (v2) or the desired list
// from the store (v1), each page's corrective commands through the terminal's one-at-a-time
// queue, up to Window of them queued at once, then done or failed.

// recon is a reconciliation under way.
type recon struct {
	reasons reasons
	reason  wire.SyncReason
	v1      bool
	// setWork: a protocol 1 terminal's reconciliation for a SetWhitelist: it is sent what
	// the pending task removed (DeletePerson) and set (AddPerson), and the task succeeds
	// when it ends done; setID is that task's message id.
	setWork bool
	setID   string
	start   time.Time
	limit   int

	diff     *Diff // v2
	after    string
	listDone bool     // the last page was compared (v2) or read (v1)
	todo     []Change // the current page's changes, sent from pos on
	pos      int
	entries  []Entry // a page's entries, reused
	desired  []Entry // v1: desired entries read, reused

	// out: the commands awaiting their reply, in the order queued: one ListPersons, or up
	// to Window corrections.
	out []sentCmd
	// timer: StepTimeout, armed while commands await their reply; progress: when the last
	// reply came (or the wait began, or the terminal's tasks ended).
	timer    Timer
	progress time.Time
	stepGen  uint64

	v1Missing int // v1: the persons the terminal lacked by its count
	refusals  int
}

// sentCmd is a command of the reconciliation awaiting its reply.
type sentCmd struct {
	id      string
	listing bool   // a ListPersons
	change  Change // a correction: its kind, id and the rev it carries
}

// listing reports whether a ListPersons awaits its page.
func (rec *recon) listing() bool { return len(rec.out) > 0 && rec.out[0].listing }

func (rec *recon) counts() (missing, extra, changed int) {
	if rec.v1 {
		return rec.v1Missing, 0, 0
	}
	return rec.diff.Missing, rec.diff.Extra, rec.diff.Changed
}

// begin starts a reconciliation of t (which holds a place) and reports it started.
func (r *Reconciler) begin(t *term) {
	now := r.opt.Clock.Now()
	v1 := t.protocol < 2
	rec := &recon{reasons: t.pending, reason: t.pending.first(v1), v1: v1, start: now}
	t.pending = 0
	t.match, t.verify = false, false
	t.setRuns++
	if v1 {
		rec.v1Missing = max(0, r.opt.Store.Count(t.dev)-t.persons)
		if p, ok := r.opt.Store.PendingSet(t.dev); ok && rec.reasons&bySetWhitelist != 0 {
			rec.setWork, rec.setID = true, p.MessageID
			gone, touched := r.opt.Store.SetWork(t.dev)
			for _, id := range gone {
				rec.todo = append(rec.todo, Change{Kind: Extra, ID: id})
			}
			for _, id := range touched {
				rec.todo = append(rec.todo, Change{Kind: Missing, ID: id})
			}
			rec.v1Missing = len(touched)
			rec.listDone = true
		}
	} else {
		rec.diff = r.opt.Store.Diff(t.dev)
		rec.limit = face.DefaultListLimit
		if r.opt.ListLimit != nil {
			if n := r.opt.ListLimit(t.dev); n >= 1 && n <= face.MaxListLimit {
				rec.limit = n
			}
		}
	}
	t.rec = rec
	r.log.Info("whitelist reconciliation started", "device", t.dev, "reason", rec.reason, "protocol", t.protocol)
	r.report(t.dev, rec, wire.SyncStarted, "")
}

// step queues t's next commands, or ends the reconciliation when none is left and every
// reply came. Called with a place held and no tasks pending. Corrections are queued up to
// Window awaiting their replies, topped up once no more than half of them are left, so the
// queue always holds the next one when an ack comes (it sends it straight from the ack)
// and the journal takes them several at a time; the next page is asked for once the
// page's corrections were all answered.
func (r *Reconciler) step(t *term) {
	rec := t.rec
	if rec.listing() || len(rec.out) > r.opt.Window/2 {
		return
	}
	for len(rec.out) < r.opt.Window {
		if rec.pos < len(rec.todo) {
			c := rec.todo[rec.pos]
			rec.pos++
			if cmd, rev, ok := r.correction(t, c); ok {
				r.send(t, cmd, rev)
			}
			continue
		}
		clear(rec.todo) // do not pin the page's ids
		rec.todo, rec.pos = rec.todo[:0], 0
		if rec.listDone {
			if len(rec.out) == 0 {
				r.finish(t, wire.SyncDone, "")
			}
			return
		}
		if rec.v1 {
			// A v1 terminal lists nothing: it is sent every desired person again.
			rec.desired = r.opt.Store.Page(t.dev, rec.after, v1Page, rec.desired[:0])
			for _, e := range rec.desired {
				rec.todo = append(rec.todo, Change{Kind: Missing, ID: e.ID, Rev: e.Rev})
			}
			if len(rec.desired) < v1Page {
				rec.listDone = true
			} else {
				rec.after = rec.desired[len(rec.desired)-1].ID
			}
			continue
		}
		if len(rec.out) > 0 {
			return // the next page once this one's corrections are answered
		}
		r.send(t, face.Command{Op: face.ListPersons, After: rec.after, Limit: rec.limit}, face.Rev{})
		return
	}
}

// correction is the command that repairs c, judged against the desired list as it is now
// (a task may have changed it since the page was compared), and the rev of the record an
// AddPerson carries; false if none is needed.
func (r *Reconciler) correction(t *term, c Change) (face.Command, face.Rev, bool) {
	rec := t.rec
	want, desired := r.opt.Store.Get(t.dev, c.ID)
	if c.Kind == Extra && !desired {
		// The agent manages this terminal's list (a reconciliation runs only for a
		// terminal with a desired list): every person it does not want goes, whether the
		// agent sent it once or it was added at the terminal by hand.
		return face.Command{Op: face.DeletePerson, Person: face.Person{ID: c.ID}}, face.Rev{}, true
	}
	if !desired {
		return face.Command{}, face.Rev{}, false // deleted or excluded since: a task takes it off
	}
	rev := want.Rev()
	if c.Kind == Extra && rev == c.Rev {
		return face.Command{}, face.Rev{}, false // desired as held since the page was compared
	}
	// The person as the intake's AddPerson carries it: the record's rev and face. A v1
	// terminal knows neither.
	p := want.Person()
	if rec.v1 {
		p.Rev, p.Face = "", face.FaceRef{}
	}
	return face.Command{Op: face.AddPerson, Person: p}, rev, true
}

// send queues cmd under a new messageId as one of t's commands awaiting their reply; rev
// is the rev of the record an AddPerson carries (a refusal excludes that record).
func (r *Reconciler) send(t *term, cmd face.Command, rev face.Rev) {
	rec := t.rec
	cmd.MessageID = r.newMessageID()
	listing := cmd.Op == face.ListPersons
	sc := sentCmd{id: cmd.MessageID, listing: listing}
	switch cmd.Op {
	case face.AddPerson:
		sc.change = Change{Kind: Missing, ID: cmd.Person.ID, Rev: rev}
	case face.DeletePerson:
		sc.change = Change{Kind: Extra, ID: cmd.Person.ID}
	}
	if len(rec.out) == 0 {
		rec.progress = r.opt.Clock.Now()
	}
	rec.out = append(rec.out, sc)
	if rec.timer == nil {
		r.armStepTimeout(t, r.opt.StepTimeout)
	}
	id, dev := cmd.MessageID, t.dev
	if listing {
		r.effects = append(r.effects, func() {
			if err := r.opt.Lister.List(dev, cmd); err != nil {
				r.ListReply(dev, id, face.Ack{}, fmt.Errorf("not queued: %w", err))
			}
		})
		return
	}
	r.effects = append(r.effects, func() {
		if err := r.opt.Corrector.Correct(dev, cmd); err != nil {
			r.CorrectionDone(dev, id, face.Ack{}, fmt.Errorf("not queued: %w", err))
		}
	})
}

// armStepTimeout arms t's StepTimeout timer to fire after wait. When it fires with
// commands awaiting their reply and none came for StepTimeout (not counting a time the
// terminal's tasks went first: the commands wait behind them), the reconciliation fails.
// One timer serves the whole window: it is not re-armed for every reply.
func (r *Reconciler) armStepTimeout(t *term, wait time.Duration) {
	rec := t.rec
	rec.stepGen++
	gen := rec.stepGen
	rec.timer = r.opt.Clock.AfterFunc(wait, func() {
		r.mu.Lock()
		defer r.unlock()
		if r.closed || r.terms[t.dev] != t || t.rec != rec || rec.stepGen != gen {
			return
		}
		rec.timer = nil
		if len(rec.out) == 0 {
			return // armed again by the next command
		}
		now := r.opt.Clock.Now()
		if t.tasks {
			rec.progress = now
		}
		if left := rec.progress.Add(r.opt.StepTimeout).Sub(now); left > 0 {
			r.armStepTimeout(t, left)
			return
		}
		c := rec.out[0]
		op := face.ListPersons
		if !c.listing {
			op = c.change.op()
		}
		r.finish(t, wire.SyncFailed, fmt.Sprintf("no reply to %s %s within %s", op, c.id, r.opt.StepTimeout))
	})
}

// op is the corrective command that repairs c.
func (c Change) op() face.Op {
	if c.Kind == Extra {
		return face.DeletePerson
	}
	return face.AddPerson
}

// replied returns t's reconciliation and the command if messageID is one of its commands
// awaiting their reply, of that kind, and takes it off the list. Replies usually come in
// the order the commands were queued, but not always (a task supersedes a queued
// correction; the queue refuses one).
func (r *Reconciler) replied(dev, messageID string, listing bool) (*term, *recon, sentCmd) {
	t := r.terms[dev]
	if r.closed || t == nil {
		return nil, nil, sentCmd{}
	}
	if i := slices.Index(t.late, messageID); i >= 0 {
		// Late: the reconciliation it belonged to ended. The next may begin once the
		// last of them is answered.
		t.late = slices.Delete(t.late, i, i+1)
		if len(t.late) == 0 {
			t.late = nil
			r.advance(t)
		}
		return nil, nil, sentCmd{}
	}
	rec := t.rec
	if rec == nil {
		return nil, nil, sentCmd{}
	}
	i := slices.IndexFunc(rec.out, func(c sentCmd) bool { return c.id == messageID })
	if i < 0 || rec.out[i].listing != listing {
		return nil, nil, sentCmd{} // not ours (the ids are unique)
	}
	c := rec.out[i]
	rec.out = slices.Delete(rec.out, i, i+1)
	rec.progress = r.opt.Clock.Now()
	return t, rec, c
}

// ListReply is the reply to a ListPersons the reconciler sent: ack, or err when none came
// (err's text goes into the failed report). A reply whose reconciliation ended is ignored.
func (r *Reconciler) ListReply(dev, messageID string, ack face.Ack, err error) {
	r.mu.Lock()
	defer r.unlock()
	t, rec, _ := r.replied(dev, messageID, true)
	if t == nil {
		return
	}
	switch {
	case err != nil:
		r.finish(t, wire.SyncFailed, "ListPersons: "+err.Error())
		return
	case ack.Code != 0:
		r.finish(t, wire.SyncFailed, fmt.Sprintf("the terminal refused ListPersons (code %d %.64q)", ack.Code, ack.Message))
		return
	}
	entries, err := pageEntries(ack, rec.limit, rec.entries[:0])
	rec.entries = entries
	if err == nil {
		err = rec.diff.Page(entries, ack.Next, func(c Change) { rec.todo = append(rec.todo, c) })
	}
	clear(rec.entries)
	if err != nil {
		r.finish(t, wire.SyncFailed, fmt.Sprintf("ListPersons page after %.64q: %v", rec.after, err))
		return
	}
	if ack.Next == "" {
		rec.listDone = true
	} else {
		rec.after = ack.Next
	}
	r.advance(t)
}

// pageEntries checks what Diff.Page does not (the page's size, its revs, and that a page
// with more to follow is not empty and ends at next: a page that does not advance would
// list forever) and returns the page as entries.
func pageEntries(ack face.Ack, limit int, dst []Entry) ([]Entry, error) {
	if len(ack.Persons) > limit {
		return dst, fmt.Errorf("%w: %d persons, the limit was %d", ErrBadPage, len(ack.Persons), limit)
	}
	if ack.Next != "" && (len(ack.Persons) == 0 || ack.Persons[len(ack.Persons)-1].ID != ack.Next) {
		return dst, fmt.Errorf("%w: next %.64q is not the page's last id", ErrBadPage, ack.Next)
	}
	for _, p := range ack.Persons {
		rev, err := face.ParseRev(p.Rev)
		if err != nil {
			return dst, fmt.Errorf("%w: person %.64q: %v", ErrBadPage, p.ID, err)
		}
		dst = append(dst, Entry{ID: p.ID, Rev: rev})
	}
	return dst, nil
}

// Codes of corrective AddPersons that fail the reconciliation instead of excluding the
// record: they say something about the terminal or a face, not that it refuses the record.
const (
	codeFaceMissing = 21
	codeFaceBad     = 22
	codeCapacity    = 23
)

// CorrectionDone is the outcome of a corrective command the reconciler sent: ack, or err
// when none came. A refused AddPerson excludes that record from the desired list (Exclude:
// a refusal never becomes a repair loop) and the reconciliation goes on, up to
// MaxRefusals; a refused DeletePerson, codes 21, 22 and 23, and err fail it.
func (r *Reconciler) CorrectionDone(dev, messageID string, ack face.Ack, err error) {
	r.mu.Lock()
	defer r.unlock()
	t, rec, sent := r.replied(dev, messageID, false)
	if t == nil {
		return
	}
	op := sent.change.op()
	what := fmt.Sprintf("%s %.64q", op, sent.change.ID)
	switch {
	case err != nil:
		r.finish(t, wire.SyncFailed, what+": "+err.Error())
		return
	case ack.Code == 0:
	case op == face.DeletePerson:
		r.finish(t, wire.SyncFailed, fmt.Sprintf("the terminal refused %s (code %d %.64q)", what, ack.Code, ack.Message))
		return
	case ack.Code == codeCapacity:
		r.finish(t, wire.SyncFailed, fmt.Sprintf("capacity: the terminal is full (%s, code %d)", what, ack.Code))
		return
	case ack.Code == codeFaceMissing || ack.Code == codeFaceBad:
		r.finish(t, wire.SyncFailed, fmt.Sprintf("the terminal lacks the face of %s (code %d)", what, ack.Code))
		return
	default:
		if _, xerr := r.opt.Store.Exclude(t.dev, sent.change.ID, sent.change.Rev); xerr != nil {
			r.log.Error("excluding a refused record failed", "device", t.dev, "person", sent.change.ID, "err", xerr)
		}
		if rec.refusals++; rec.refusals > r.opt.MaxRefusals {
			r.finish(t, wire.SyncFailed, fmt.Sprintf("the terminal refused %d corrective commands, the last %s (code %d %.64q)",
				rec.refusals, what, ack.Code, ack.Message))
			return
		}
		r.log.Warn("the terminal refused a corrective command; the record leaves its desired list",
			"device", t.dev, "person", sent.change.ID, "code", ack.Code)
	}
	r.advance(t)
}

// finish ends t's reconciliation, reports it, gives its place up and, if it failed, backs
// off before the next one (whose reasons stay pending). Its commands still queued (a
// failed one's: at most Window) are sent all the same, each a repair as judged when
// queued; their outcomes are ignored but awaited (term.late) before the next begins.
func (r *Reconciler) finish(t *term, status wire.SyncStatus, why string) {
	rec := t.rec
	t.rec = nil
	rec.stepGen++
	if rec.timer != nil {
		rec.timer.Stop()
		rec.timer = nil
	}
	for _, c := range rec.out {
		t.late = append(t.late, c.id)
	}
	if len(t.late) > 0 {
		t.lateUntil = r.opt.Clock.Now().Add(r.opt.StepTimeout)
	}
	clear(rec.out)
	if t.slot {
		t.slot = false
		r.active--
	}
	t.idleBeats = 0
	now := r.opt.Clock.Now()
	r.report(t.dev, rec, status, why)
	r.opt.Metrics.ended(status, now.Sub(rec.start).Seconds())
	m, x, c := rec.counts()
	if status == wire.SyncFailed {
		t.pending |= rec.reasons
		t.lastErr = why
		r.failed(t)
		r.log.Warn("whitelist reconciliation failed", "device", t.dev, "reason", rec.reason, "err", why,
			"missing", m, "extra", x, "changed", c, "retry_in", t.notBefore.Sub(now))
	} else {
		t.verify = true
		if rec.setWork {
			// A v1 terminal cannot show its list: every command acked is all there is.
			if p, ok := r.opt.Store.PendingSet(t.dev); ok && p.MessageID == rec.setID && t.pending&bySetWhitelist == 0 {
				r.finishSet(t, SetSucceeded, "")
			}
		}
		r.log.Info("whitelist reconciliation done", "device", t.dev, "reason", rec.reason,
			"missing", m, "extra", x, "changed", c, "refused", rec.refusals)
	}
	r.fill()
	r.advance(t)
}

// report queues a report of rec with status.
func (r *Reconciler) report(dev string, rec *recon, status wire.SyncStatus, why string) {
	m, x, c := rec.counts()
	rep := wire.SyncReport{DeviceID: dev, Reason: rec.reason, Status: status, Missing: m, Extra: x, Changed: c,
		At: wire.FormatSyncAt(r.opt.Clock.Now())}
	if status == wire.SyncFailed {
		if why == "" {
			why = "failed"
		}
		rep.Error = truncateText(why, wire.MaxSyncError)
	}
	if t := r.terms[dev]; t != nil {
		t.lastStatus, t.lastSync = status, r.opt.Clock.Now()
	}
	r.effects = append(r.effects, func() { r.opt.Reporter.SyncReport(rep) })
}

// truncateText cuts s to at most n bytes of valid UTF-8.
func truncateText(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut]
}
