package whitelist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// SetWhitelist tasks. The store keeps each SetWhitelist task it took (ReplaceTask) with
// the list change it made, in the same journal record, until its result was reported:
// after a crash, either the update and its task are both replayed or neither is (the
// task message was not acknowledged and comes again, to be applied once). A terminal has
// at most one task pending; a later one supersedes it. The result (FinishSet) is
// journalled and offered (SetResults) once durable, and leaves the store once reported
// (MarkSetReported).

// SetStatus is where a SetWhitelist task is in its life. Numbers are written to the
// journal: never renumber.
type SetStatus uint8

const (
	SetPending    SetStatus = 0 // the terminal does not hold the list yet
	SetSucceeded  SetStatus = 1 // it does
	SetFailed     SetStatus = 2 // reconciliations kept failing (Err says why)
	SetSuperseded SetStatus = 3 // a later SetWhitelist for the terminal replaced it while pending
)

func (s SetStatus) String() string {
	switch s {
	case SetPending:
		return "pending"
	case SetSucceeded:
		return "succeeded"
	case SetFailed:
		return "failed"
	case SetSuperseded:
		return "superseded"
	}
	return fmt.Sprintf("SetStatus(%d)", uint8(s))
}

// SetTask is a SetWhitelist task the store took, and its result once it has one.
type SetTask struct {
	MessageID string // the task's message id: the dedupe key
	TaskID    string
	DeviceID  string
	Counts    Counts // against the desired list it replaced
	Added     time.Time
	// The result.
	Status   SetStatus
	Tries    int // reconciliations it took
	Err      string
	Finished time.Time

	seq journal.Seq // the record that finished it (0: replayed, durable)
}

// Bounds and errors of the SetWhitelist tasks.
const (
	// DefaultMaxSetTasks bounds the SetWhitelist tasks kept (pending, or finished and not
	// yet reported) unless Options.MaxSetTasks says otherwise.
	DefaultMaxSetTasks = 1024
	// recentSets is how many reported tasks' message ids are remembered for dedupe.
	recentSets = 1024
	maxSetText = 1024 // bytes of a result's error kept
)

var (
	// ErrDuplicateTask: the store took a SetWhitelist task with this message id already
	// (a redelivery); the Counts returned are those it took it with, while it keeps them.
	ErrDuplicateTask = errors.New("whitelist: SetWhitelist task taken already")
	// ErrTooManySetTasks: Options.MaxSetTasks tasks are pending or wait to be reported.
	ErrTooManySetTasks = errors.New("whitelist: too many SetWhitelist tasks pending or unreported")
)

// devSets is one terminal's SetWhitelist state.
type devSets struct {
	pending *SetTask
	// gone and touched (sorted ids) are what the pending task's replacements removed from
	// and set on the desired list: a protocol 1 terminal cannot list what it holds, so it
	// is sent a DeletePerson for each gone id and an AddPerson for each touched one.
	gone, touched []string
}

// sets is the store's SetWhitelist state, part of state: changed only by applying
// records, live and in replay alike.
type sets struct {
	devs   map[string]*devSets
	done   []*SetTask // finished, unreported, in finish order
	recent []string   // message ids of reported tasks, oldest first (at most recentSets)
	recIdx map[string]struct{}
}

func newSets() sets { return sets{devs: map[string]*devSets{}, recIdx: map[string]struct{}{}} }

func (ss *sets) dev(id string) *devSets {
	d := ss.devs[id]
	if d == nil {
		d = &devSets{}
		ss.devs[id] = d
	}
	return d
}

// kept is how many tasks are pending or unreported.
func (ss *sets) kept() int {
	n := len(ss.done)
	for _, d := range ss.devs {
		if d.pending != nil {
			n++
		}
	}
	return n
}

// find returns the task with messageID among the pending and unreported ones.
func (ss *sets) find(dev, messageID string) *SetTask {
	if d := ss.devs[dev]; d != nil && d.pending != nil && d.pending.MessageID == messageID {
		return d.pending
	}
	for _, t := range ss.done {
		if t.MessageID == messageID {
			return t
		}
	}
	return nil
}

// start applies a task taken with the update ops (already applied to the list): it
// supersedes dev's pending task and records what the update removed and set.
func (ss *sets) start(task *SetTask, ops []op) {
	d := ss.dev(task.DeviceID)
	if old := d.pending; old != nil {
		old.Status, old.Finished = SetSuperseded, task.Added
		old.Err = truncateText("superseded by task "+task.TaskID, maxSetText)
		ss.done = append(ss.done, old)
	}
	d.pending = task
	var gone, touched []string
	for _, o := range ops {
		switch o.kind {
		case opDelete:
			gone = append(gone, o.id)
		case opSet:
			touched = append(touched, o.id)
		}
	}
	d.gone = mergeIDs(d.gone, gone)
	d.touched = mergeIDs(d.touched, touched)
}

// mergeIDs returns the sorted union of a and b (b sorted).
func mergeIDs(a, b []string) []string {
	if len(a) == 0 {
		return slices.Clip(b)
	}
	a = append(a, b...)
	slices.Sort(a)
	return slices.Clip(slices.Compact(a))
}

// finish ends dev's pending task messageID; false if it is not the pending one.
func (ss *sets) finish(dev, messageID string, st SetStatus, tries int, errText string, at time.Time, seq journal.Seq) bool {
	d := ss.devs[dev]
	if d == nil || d.pending == nil || d.pending.MessageID != messageID {
		return false
	}
	t := d.pending
	t.Status, t.Tries, t.Err, t.Finished, t.seq = st, tries, errText, at, seq
	ss.done = append(ss.done, t)
	d.pending, d.gone, d.touched = nil, nil, nil
	delete(ss.devs, dev)
	return true
}

// reported drops the finished tasks ids, remembering their ids for dedupe.
func (ss *sets) reported(ids []string) {
	drop := make(map[string]bool, len(ids))
	for _, id := range ids {
		drop[id] = true
	}
	ss.done = slices.DeleteFunc(ss.done, func(t *SetTask) bool {
		if drop[t.MessageID] {
			ss.remember(t.MessageID)
			return true
		}
		return false
	})
}

func (ss *sets) remember(id string) {
	if _, ok := ss.recIdx[id]; ok {
		return
	}
	if len(ss.recent) >= recentSets {
		delete(ss.recIdx, ss.recent[0])
		ss.recent = slices.Delete(ss.recent, 0, 1)
	}
	ss.recent = append(ss.recent, id)
	ss.recIdx[id] = struct{}{}
}

// ReplaceTask is Replace for a SetWhitelist task: the update and the task (its counts,
// against the list replaced) are one journal record. A task already taken (task.MessageID
// pending, unreported, or among the last reported) changes nothing: it returns
// ErrDuplicateTask and, while the store keeps the task, the counts it was taken with.
// task.DeviceID is dev; Added is set if zero.
func (s *Store) ReplaceTask(dev string, list []Record, task SetTask) (Counts, error) {
	if err := checkID("message id", task.MessageID); err != nil {
		return Counts{}, err
	}
	if len(task.TaskID) > MaxIDLen {
		return Counts{}, fmt.Errorf("%w: task id longer than %d bytes", ErrInvalid, MaxIDLen)
	}
	task.DeviceID, task.Status, task.Tries, task.Err, task.Finished = dev, SetPending, 0, "", time.Time{}
	if task.Added.IsZero() {
		task.Added = time.Now()
	}
	return s.replace(dev, list, &task)
}

// checkTask is ReplaceTask's check under the lock, before anything is written.
func (s *Store) checkTask(dev string, task *SetTask) (Counts, error) {
	ss := &s.st.sets
	if t := ss.find(dev, task.MessageID); t != nil {
		return t.Counts, ErrDuplicateTask
	}
	if _, ok := ss.recIdx[task.MessageID]; ok {
		return Counts{}, ErrDuplicateTask
	}
	// A task that supersedes a pending one needs room too: the one it supersedes waits for
	// its result to be reported.
	if ss.kept() >= s.opt.MaxSetTasks {
		return Counts{}, ErrTooManySetTasks
	}
	return Counts{}, nil
}

// FinishSet gives dev's pending SetWhitelist task messageID its result and returns once
// that is durable; false (and no error) if messageID is not dev's pending task (a later
// one superseded it, or it finished already).
func (s *Store) FinishSet(dev, messageID string, st SetStatus, tries int, errText string) (bool, error) {
	if st == SetPending {
		return false, errors.New("whitelist: FinishSet needs a final status")
	}
	errText = truncateText(errText, maxSetText)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, ErrClosed
	}
	if d := s.st.sets.devs[dev]; d == nil || d.pending == nil || d.pending.MessageID != messageID {
		s.mu.Unlock()
		return false, nil
	}
	at := time.Now()
	b := appendString([]byte{recordVersion, kindSetEnd}, dev)
	b = appendString(b, messageID)
	b = append(b, byte(st))
	b = binary.AppendUvarint(b, uint64(max(tries, 0)))
	b = binary.AppendUvarint(b, uint64(at.UnixNano()))
	b = appendString(b, errText)
	seq, err := s.j.AppendAsync(b)
	if err != nil {
		s.mu.Unlock()
		return false, err
	}
	s.last = seq
	s.logBytes += int64(len(b) + journal.FrameOverhead)
	s.st.sets.finish(dev, messageID, st, tries, errText, at, seq)
	s.mu.Unlock()
	if err := s.j.Wait(seq); err != nil {
		return true, err
	}
	s.signalSets()
	return true, nil
}

// SetResults returns up to n finished SetWhitelist tasks not yet reported, oldest first;
// only those whose result is durable.
func (s *Store) SetResults(n int) []SetTask {
	durable := s.j.Durable()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SetTask
	for _, t := range s.st.sets.done {
		if len(out) >= n || t.seq > durable {
			break
		}
		out = append(out, *t)
	}
	return out
}

// MarkSetReported drops the finished tasks messageIDs: their results were reported. The
// mark is not waited for: after a crash a result may be offered again.
func (s *Store) MarkSetReported(messageIDs ...string) error {
	if len(messageIDs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	b := []byte{recordVersion, kindSetReported}
	for _, id := range messageIDs {
		if len(id) > 0 && len(id) <= MaxIDLen {
			b = appendString(b, id)
		}
	}
	seq, err := s.j.AppendAsync(b)
	if err != nil {
		return err
	}
	s.last = seq
	s.logBytes += int64(len(b) + journal.FrameOverhead)
	s.st.sets.reported(messageIDs)
	return nil
}

// SetResultsReady is poked when SetWhitelist results may be waiting.
func (s *Store) SetResultsReady() <-chan struct{} { return s.setReady }

func (s *Store) signalSets() {
	select {
	case s.setReady <- struct{}{}:
	default:
	}
}

// PendingSet returns dev's pending SetWhitelist task, if any.
func (s *Store) PendingSet(dev string) (SetTask, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.st.sets.devs[dev]; d != nil && d.pending != nil {
		return *d.pending, true
	}
	return SetTask{}, false
}

// PendingSets returns the terminals with a SetWhitelist task pending, sorted.
func (s *Store) PendingSets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var devs []string
	for dev, d := range s.st.sets.devs {
		if d.pending != nil {
			devs = append(devs, dev)
		}
	}
	slices.Sort(devs)
	return devs
}

// SetsUnfinished is how many SetWhitelist tasks are pending.
func (s *Store) SetsUnfinished() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.st.sets.devs {
		if d.pending != nil {
			n++
		}
	}
	return n
}

// SetWork returns what dev's pending SetWhitelist tasks removed from (gone) and set on
// (touched) its desired list, sorted: the work a protocol 1 terminal is given.
func (s *Store) SetWork(dev string) (gone, touched []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.st.sets.devs[dev]; d != nil && d.pending != nil {
		return slices.Clone(d.gone), slices.Clone(d.touched)
	}
	return nil, nil
}

// The journal's SetWhitelist records (see the package documentation, "Record format").

// appendTaskHeader appends a task's fields to an update's first record (flagTask).
func appendTaskHeader(b []byte, t *SetTask) []byte {
	b = appendString(b, t.MessageID)
	b = appendString(b, t.TaskID)
	b = binary.AppendUvarint(b, uint64(t.Added.UnixNano()))
	for _, n := range [...]int{t.Counts.Added, t.Counts.Deleted, t.Counts.Unchanged} {
		b = binary.AppendUvarint(b, uint64(n))
	}
	return b
}

// appendSetSnapshot appends a snapshot's record of task ('s').
func appendSetSnapshot(b []byte, t *SetTask) []byte {
	b = append(b, recordVersion, kindSetSnap)
	b = appendString(b, t.DeviceID)
	b = appendTaskHeader(b, t)
	b = append(b, byte(t.Status))
	b = binary.AppendUvarint(b, uint64(t.Tries))
	var fin uint64
	if !t.Finished.IsZero() {
		fin = uint64(t.Finished.UnixNano())
	}
	b = binary.AppendUvarint(b, fin)
	return appendString(b, t.Err)
}

// setReader decodes the fields of a SetWhitelist record.
type setReader struct {
	b   []byte
	off int
	err error
}

func (r *setReader) str(limit int, what string) string {
	if r.err != nil {
		return ""
	}
	v, ok := readString(r.b, &r.off, limit)
	if !ok {
		r.err = fmt.Errorf("bad %s", what)
	}
	return string(v)
}

func (r *setReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b[r.off:])
	if k <= 0 {
		r.err = fmt.Errorf("bad %s", what)
		return 0
	}
	r.off += k
	return v
}

func (r *setReader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.err = fmt.Errorf("%s missing", what)
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *setReader) count(what string) int {
	v := r.uvarint(what)
	if v > 1<<40 {
		r.err = fmt.Errorf("bad %s", what)
	}
	return int(v)
}

func (r *setReader) time(what string) time.Time {
	v := r.uvarint(what)
	if v == 0 || v > 1<<62 {
		return time.Time{}
	}
	return time.Unix(0, int64(v))
}

// task reads a task's header fields (appendTaskHeader).
func (r *setReader) task(dev string) *SetTask {
	t := &SetTask{DeviceID: dev}
	t.MessageID = r.str(MaxIDLen, "task message id")
	if r.err == nil && t.MessageID == "" {
		r.err = errors.New("task message id missing")
	}
	t.TaskID = r.str(MaxIDLen, "task id")
	t.Added = r.time("task time")
	t.Counts.Added = r.count("added count")
	t.Counts.Deleted = r.count("deleted count")
	t.Counts.Unchanged = r.count("unchanged count")
	return t
}

// applySetRecord replays a SetWhitelist record of kind 'E' or 'A' (outside updates).
func (st *state) applySetRecord(kind byte, b []byte) error {
	r := &setReader{b: b, off: 2}
	switch kind {
	case kindSetEnd:
		dev := r.str(MaxIDLen, "device id")
		id := r.str(MaxIDLen, "message id")
		status := SetStatus(r.byte("status"))
		tries := r.count("tries")
		at := r.time("finish time")
		errText := r.str(maxSetText, "error")
		if r.err == nil && (status == SetPending || status > SetSuperseded) {
			r.err = fmt.Errorf("status %d", status)
		}
		if r.err != nil || r.off != len(b) {
			return fmt.Errorf("SetWhitelist result: %v", errors.Join(r.err, trailing(r.off, len(b))))
		}
		st.sets.finish(dev, id, status, tries, errText, at, 0)
	case kindSetReported:
		var ids []string
		for r.off < len(b) && r.err == nil {
			ids = append(ids, r.str(MaxIDLen, "message id"))
		}
		if r.err != nil {
			return fmt.Errorf("SetWhitelist reported: %v", r.err)
		}
		st.sets.reported(ids)
	}
	return nil
}

func trailing(off, n int) error {
	if off != n {
		return errors.New("trailing bytes")
	}
	return nil
}

// loadSetSnapshot replays a snapshot's SetWhitelist records ('s', 'g', 'k').
func (st *state) loadSetSnapshot(kind byte, b []byte) error {
	r := &setReader{b: b, off: 2}
	ss := &st.sets
	switch kind {
	case kindSetSnap:
		dev := r.str(MaxIDLen, "device id")
		t := r.task(dev)
		t.Status = SetStatus(r.byte("status"))
		t.Tries = r.count("tries")
		t.Finished = r.time("finish time")
		t.Err = r.str(maxSetText, "error")
		if r.err == nil && t.Status > SetSuperseded {
			r.err = fmt.Errorf("status %d", t.Status)
		}
		if r.err != nil || r.off != len(b) || dev == "" {
			return fmt.Errorf("snapshot SetWhitelist task: %v", errors.Join(r.err, trailing(r.off, len(b))))
		}
		if t.Status == SetPending {
			d := ss.dev(dev)
			if d.pending != nil {
				return fmt.Errorf("snapshot: terminal %q: two SetWhitelist tasks pending", dev)
			}
			d.pending = t
		} else {
			ss.done = append(ss.done, t)
		}
	case kindSetWork:
		dev := r.str(MaxIDLen, "device id")
		var lists [2][]string
		for i := range lists {
			n := r.count("id count")
			if r.err == nil && n > len(b) {
				r.err = errors.New("bad id count")
			}
			for range n {
				if r.err != nil {
					break
				}
				lists[i] = append(lists[i], r.str(MaxIDLen, "person id"))
			}
		}
		d := ss.devs[dev]
		if r.err == nil && (d == nil || d.pending == nil) {
			r.err = errors.New("no task pending")
		}
		if r.err != nil || r.off != len(b) {
			return fmt.Errorf("snapshot SetWhitelist work of %q: %v", dev, errors.Join(r.err, trailing(r.off, len(b))))
		}
		d.gone, d.touched = lists[0], lists[1]
	case kindSetRecent:
		for r.off < len(b) && r.err == nil {
			ss.remember(r.str(MaxIDLen, "message id"))
		}
		if r.err != nil {
			return fmt.Errorf("snapshot SetWhitelist ids: %v", r.err)
		}
	}
	return nil
}

// setSnapshot is the SetWhitelist state captured for a snapshot (under the store's lock).
type setSnapshot struct {
	tasks  []SetTask // pending ones first, then the unreported in finish order
	work   []devWork
	recent []string
}

type devWork struct {
	dev           string
	gone, touched []string
}

func (ss *sets) capture() setSnapshot {
	var c setSnapshot
	devs := make([]string, 0, len(ss.devs))
	for dev := range ss.devs {
		devs = append(devs, dev)
	}
	slices.Sort(devs)
	for _, dev := range devs {
		d := ss.devs[dev]
		if d.pending == nil {
			continue
		}
		c.tasks = append(c.tasks, *d.pending)
		c.work = append(c.work, devWork{dev, d.gone, d.touched}) // never modified in place
	}
	for _, t := range ss.done {
		c.tasks = append(c.tasks, *t)
	}
	c.recent = slices.Clone(ss.recent)
	return c
}

// emit writes c's records.
func (c *setSnapshot) emit(buf []byte, put func([]byte) error) ([]byte, error) {
	for i := range c.tasks {
		buf = appendSetSnapshot(buf[:0], &c.tasks[i])
		if err := put(buf); err != nil {
			return buf, err
		}
	}
	for _, w := range c.work {
		buf = appendString(append(buf[:0], recordVersion, kindSetWork), w.dev)
		for _, l := range [...][]string{w.gone, w.touched} {
			buf = binary.AppendUvarint(buf, uint64(len(l)))
			for _, id := range l {
				buf = appendString(buf, id)
			}
		}
		if err := put(buf); err != nil {
			return buf, err
		}
	}
	if len(c.recent) > 0 {
		buf = append(buf[:0], recordVersion, kindSetRecent)
		for _, id := range c.recent {
			buf = appendString(buf, id)
		}
		if err := put(buf); err != nil {
			return buf, err
		}
	}
	return buf, nil
}
