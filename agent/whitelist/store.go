package whitelist

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// SegmentSize is the journal segment size the store uses unless Options.Journal says
// otherwise: it is also what an open segment reserves on disk.
const SegmentSize = 4 << 20

// Defaults of Options.
const (
	DefaultMaxTerminals = 1024
	DefaultMaxPersons   = 100_000
	DefaultMaxRecords   = 200_000
	DefaultCompactBytes = 4 << 20
)

// partBytes bounds one journal record of an update; a larger update is written in parts,
// each durable before the next is queued, so that neither the store's encoding buffer
// nor the journal's queue holds a whole large update.
const partBytes = 256 << 10

// Errors of the updates.
var (
	ErrTooManyTerminals = errors.New("whitelist: the store holds Options.MaxTerminals terminals")
	ErrTooManyPersons   = errors.New("whitelist: the list would hold more than Options.MaxPersons persons")
	ErrTooManyRecords   = errors.New("whitelist: the store would hold more than Options.MaxRecords distinct records")
	ErrDuplicateID      = errors.New("whitelist: a person id appears twice in the list")
	ErrClosed           = errors.New("whitelist: closed")
)

// Options configure a Store. The zero value means the defaults.
type Options struct {
	// Journal configures the journal in the store's directory (SegmentSize default
	// SegmentSize; Sync as the tasks' journal: an update's Flush is as durable as a task).
	Journal journal.Options
	// MaxTerminals bounds the terminals with a desired list (default 1024).
	MaxTerminals int
	// MaxPersons bounds one terminal's list, persons a refusal excluded included (default
	// 100,000).
	MaxPersons int
	// MaxRecords bounds the distinct records across terminals (default 200,000): a record
	// several terminals share counts once.
	MaxRecords int
	// CompactBytes: a snapshot replaces the journal once the records written since the last
	// one exceed both CompactBytes and the last snapshot's size (default 4 MiB).
	CompactBytes int64
	// MaxSetTasks bounds the SetWhitelist tasks kept, pending or finished and not yet
	// reported (default DefaultMaxSetTasks): a ReplaceTask beyond it is refused with
	// ErrTooManySetTasks.
	MaxSetTasks int
	Logger      *slog.Logger

	// chunkMask, when set, replaces chunkMask: tests cut lists into small chunks.
	chunkMask uint64
}

// Counts are what a Replace changed, counted against the previous desired list.
type Counts struct {
	Added     int // persons new or with a changed record
	Deleted   int // persons no longer listed
	Unchanged int // persons listed with the same record
}

// Stats describe the store's contents.
type Stats struct {
	Terminals int
	Members   int // persons across terminals, excluded ones included
	Records   int // distinct records
	Chunks    int // distinct chunks of lists
	FileBytes int64
	// SetTasks is the SetWhitelist tasks kept, against Options.MaxSetTasks: pending, or
	// finished with a result not yet reported.
	SetTasks int
}

// Store is the desired whitelists of the terminals; see the package documentation.
type Store struct {
	j   *journal.Journal
	opt Options
	log *slog.Logger

	mu        sync.Mutex
	st        *state
	last      journal.Seq // the last record appended
	logBytes  int64       // written since the last snapshot
	snapBytes int64       // the last snapshot's size
	closed    bool

	setReady chan struct{} // SetResultsReady

	compactMu sync.Mutex
	compactC  chan struct{}
	quit      chan struct{}
	done      chan struct{}
}

// Open opens (creating if needed) the store in dir and replays its journal.
func Open(dir string, opt Options) (*Store, error) {
	if opt.MaxTerminals <= 0 {
		opt.MaxTerminals = DefaultMaxTerminals
	}
	if opt.MaxPersons <= 0 {
		opt.MaxPersons = DefaultMaxPersons
	}
	if opt.MaxRecords <= 0 {
		opt.MaxRecords = DefaultMaxRecords
	}
	if opt.CompactBytes <= 0 {
		opt.CompactBytes = DefaultCompactBytes
	}
	if opt.MaxSetTasks <= 0 {
		opt.MaxSetTasks = DefaultMaxSetTasks
	}
	if int64(opt.MaxRecords) >= excluded {
		return nil, fmt.Errorf("whitelist: Options.MaxRecords %d is over %d", opt.MaxRecords, int64(excluded-1))
	}
	s := &Store{opt: opt, log: opt.Logger, st: newState(), compactC: make(chan struct{}, 1), setReady: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{})}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if opt.chunkMask != 0 {
		s.st.mask = opt.chunkMask
	}
	jo := opt.Journal
	if jo.SegmentSize <= 0 {
		jo.SegmentSize = SegmentSize
	}
	if jo.Logger == nil {
		jo.Logger = s.log
	}
	j, err := journal.Open(dir, &jo)
	if err != nil {
		return nil, err
	}
	s.j = j
	if err := s.replay(); err != nil {
		j.Close()
		return nil, fmt.Errorf("whitelist: replaying %s: %w", dir, err)
	}
	if len(s.st.sets.done) > 0 {
		s.signalSets()
	}
	go s.runCompactor()
	return s, nil
}

// Close stops the compactor and closes the journal after writing what is queued.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.quit)
	<-s.done
	return s.j.Close()
}

// Flush returns once every update applied before the call is durable (per the journal's
// sync policy), or the error that prevented it.
func (s *Store) Flush() error {
	s.mu.Lock()
	seq := s.last
	s.mu.Unlock()
	if seq == 0 {
		return nil
	}
	return s.j.Wait(seq)
}

// Set makes r the desired record of the person r.ID on dev: added, changed, or, if a
// refusal excluded the person, included again. It applies at once; Flush makes it durable.
func (s *Store) Set(dev string, r Record) error {
	if err := checkID("device id", dev); err != nil {
		return err
	}
	if err := checkRecord(&r); err != nil {
		return err
	}
	// The full form is built on the stack: most Sets name a record the store holds already
	// (the terminals of a site hold the same persons), and only a new one becomes a string.
	var scratch [256]byte
	data, rev := appendFields(scratch[:0], &r), r.Rev()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	t := s.st.terms[dev]
	old, had := s.st.member(t, r.ID)
	idx, known, sameRev := s.st.lookup(data, rev)
	switch {
	case had && known && old == idx:
		return nil // desired exactly so already
	case t == nil && len(s.st.terms) >= s.opt.MaxTerminals:
		return ErrTooManyTerminals
	case !had && t != nil && t.members >= s.opt.MaxPersons:
		return fmt.Errorf("%w: terminal %q", ErrTooManyPersons, dev)
	case !known && s.st.live >= s.opt.MaxRecords:
		return ErrTooManyRecords
	}
	short := known && sameRev == 1
	if !known {
		idx = s.st.intern(string(data), rev)
	}
	return s.update(dev, false, nil, []op{{kind: opSet, id: r.ID, ref: idx, short: short}})
}

// Delete takes the person id off dev's list (a person not there is no change, but a
// terminal the store did not know becomes known, with an empty list).
func (s *Store) Delete(dev, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	t := s.st.terms[dev]
	if _, had := s.st.member(t, id); had {
		return s.update(dev, false, nil, []op{{kind: opDelete, id: id}})
	}
	if t != nil {
		return nil // not desired already
	}
	// The first task naming a terminal makes its desired list the agent's, a DeletePerson
	// too: from now on the terminal is reconciled (an empty update records it).
	if err := checkID("device id", dev); err != nil {
		return err
	}
	if len(s.st.terms) >= s.opt.MaxTerminals {
		return ErrTooManyTerminals
	}
	return s.update(dev, false, nil, nil)
}

// Exclude takes the person id out of dev's desired list if its desired record has rev
// (the record the terminal refused): it stays out until a Set, Include or Replace
// changes it. It reports whether it excluded the person.
func (s *Store) Exclude(dev, id string, rev face.Rev) (bool, error) {
	return s.flag(dev, id, rev, opExclude)
}

// Include undoes Exclude if the excluded record has rev (the terminal took it after all).
// It reports whether it included the person.
func (s *Store) Include(dev, id string, rev face.Rev) (bool, error) {
	return s.flag(dev, id, rev, opInclude)
}

func (s *Store) flag(dev, id string, rev face.Rev, kind byte) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, ErrClosed
	}
	t := s.st.terms[dev]
	o := op{kind: kind, id: id, rev: rev}
	old, had := s.st.member(t, id)
	if !had || (old&excluded == 0) != (kind == opExclude) || s.st.recs[old&^excluded].rev != rev {
		return false, nil
	}
	return true, s.update(dev, false, nil, []op{o})
}

// Forget drops dev's list, and the fact that it had one.
func (s *Store) Forget(dev string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.st.terms[dev] == nil {
		return nil
	}
	return s.update(dev, false, nil, []op{{kind: opForget}})
}

// Replace makes list dev's whole desired list and counts what changed against the
// previous one. Persons a refusal had excluded are included again if listed (counted as
// added: they were not desired) and dropped if not. A list that names a person twice is
// refused (ErrDuplicateID).
func (s *Store) Replace(dev string, list []Record) (Counts, error) {
	return s.replace(dev, list, nil)
}

// replace is Replace, and ReplaceTask with task.
func (s *Store) replace(dev string, list []Record, task *SetTask) (Counts, error) {
	var c Counts
	if err := checkID("device id", dev); err != nil {
		return c, err
	}
	if len(list) > s.opt.MaxPersons {
		return c, fmt.Errorf("%w: terminal %q: %d persons", ErrTooManyPersons, dev, len(list))
	}
	// The records' full forms go into one buffer: only records new to the store become
	// strings of their own (intern), so a Replace of a list the store holds allocates
	// little that outlives it.
	type item struct {
		from, to int
		rev      face.Rev
		id       string
	}
	items := make([]item, len(list))
	var buf []byte
	for i := range list {
		if err := checkRecord(&list[i]); err != nil {
			return c, err
		}
		from := len(buf)
		buf = appendFields(buf, &list[i])
		items[i] = item{from, len(buf), list[i].Rev(), list[i].ID}
	}
	slices.SortFunc(items, func(a, b item) int { return cmp.Compare(a.id, b.id) })
	for i := 1; i < len(items); i++ {
		if items[i].id == items[i-1].id {
			return c, fmt.Errorf("%w: %q", ErrDuplicateID, items[i].id)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return c, ErrClosed
	}
	if task != nil {
		if c, err := s.checkTask(dev, task); err != nil {
			return c, err
		}
	}
	t := s.st.terms[dev]
	if t == nil && len(s.st.terms) >= s.opt.MaxTerminals {
		return c, ErrTooManyTerminals
	}
	missing := 0
	for _, it := range items {
		if _, ok, _ := s.st.lookup(buf[it.from:it.to], it.rev); !ok {
			missing++
		}
	}
	if s.st.live+missing > s.opt.MaxRecords {
		return c, fmt.Errorf("%w: %d new records", ErrTooManyRecords, missing)
	}
	var ops []op
	set := func(it item) {
		idx, known, sameRev := s.st.lookup(buf[it.from:it.to], it.rev)
		if !known {
			idx = s.st.intern(string(buf[it.from:it.to]), it.rev)
		}
		ops = append(ops, op{kind: opSet, id: it.id, ref: idx, short: known && sameRev == 1})
	}
	k := 0
	if t != nil {
		for _, ch := range t.chunks {
			for _, r := range ch.refs {
				id := s.st.id(r)
				for ; k < len(items) && items[k].id < id; k++ {
					c.Added++
					set(items[k])
				}
				if k < len(items) && items[k].id == id {
					if idx, ok, _ := s.st.lookup(buf[items[k].from:items[k].to], items[k].rev); ok && idx == r {
						c.Unchanged++
					} else {
						c.Added++
						set(items[k])
					}
					k++
					continue
				}
				if r&excluded == 0 {
					c.Deleted++
				}
				ops = append(ops, op{kind: opDelete, id: id})
			}
		}
	}
	for ; k < len(items); k++ {
		c.Added++
		set(items[k])
	}
	if task != nil {
		task.Counts = c
	} else if len(ops) == 0 && t != nil && t.whole {
		return c, nil
	}
	return c, s.update(dev, true, task, ops)
}

// update writes an update of dev to the journal and applies it. Called with mu held,
// after the records it sets were interned; it ends the update (endUpdate) either way.
func (s *Store) update(dev string, whole bool, task *SetTask, ops []op) error {
	defer s.st.endUpdate()
	var flags byte
	if whole {
		flags = flagWhole
	}
	b := s.st.enc[:0]
	first := true
	start := func(kind byte) {
		if first && task != nil { // the task rides on the update's first record
			b = appendTaskHeader(appendUpdateHeader(b[:0], kind, flags|flagTask, dev), task)
		} else {
			b = appendUpdateHeader(b[:0], kind, flags, dev)
		}
		first = false
	}
	var written int64
	put := func(kind byte) error {
		b[1] = kind
		seq, err := s.j.AppendAsync(b)
		if err != nil {
			return err
		}
		s.last = seq
		written += int64(len(b) + journal.FrameOverhead)
		return nil
	}
	start(kindOps)
	header := len(b)
	parts := 0
	for _, o := range ops {
		if len(b) > header && len(b) >= partBytes {
			if err := put(kindPart); err != nil {
				return err
			}
			if err := s.j.Wait(s.last); err != nil {
				return err
			}
			parts++
			start(kindPart)
		}
		switch o.kind {
		case opSet:
			if o.short {
				rev := s.st.recs[o.ref].rev
				b = append(append(b, opSetRef), rev[:]...)
			} else {
				b = append(append(b, opSet), s.st.recs[o.ref].data...)
			}
		case opDelete:
			b = appendString(append(b, opDelete), o.id)
		case opExclude, opInclude:
			b = appendString(append(b, o.kind), o.id)
			b = append(b, o.rev[:]...)
		case opForget:
			b = append(b, opForget)
		}
	}
	kind := byte(kindOps)
	if parts > 0 {
		kind = kindLast
	}
	err := put(kind)
	if cap(b) <= 64<<10 { // do not pin the buffer of a large update
		s.st.enc = b[:0]
	} else {
		s.st.enc = nil
	}
	if err != nil {
		return err
	}
	s.st.apply(dev, whole, ops)
	if task != nil {
		s.st.sets.start(task, ops)
	}
	s.logBytes += written
	s.compactIfGrown()
	return nil
}

// compactIfGrown wakes the compactor once the records written since the last snapshot
// exceed both CompactBytes and that snapshot's size. Called with mu held.
func (s *Store) compactIfGrown() {
	if s.logBytes > max(s.opt.CompactBytes, s.snapBytes) {
		select {
		case s.compactC <- struct{}{}:
		default:
		}
	}
}
