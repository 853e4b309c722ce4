package whitelist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// replay rebuilds the state from the journal: a snapshot's records and terminals, then
// the updates in the order they were written. An update written in parts is applied at
// its last part; parts a crash cut off (never flushed, so never acknowledged) are
// dropped.
func (s *Store) replay() error {
	st := s.st
	var snapMap []uint32 // a snapshot's record numbers → record indexes
	inSnap := false      // the records so far are a snapshot's
	var group struct {
		active bool
		dev    string
		whole  bool
		task   *SetTask
		ops    []op
	}
	drop := func() {
		if group.active {
			s.log.Warn("desired whitelists: an update cut short by a crash is dropped", "device", group.dev)
			group.active, group.ops, group.task = false, nil, nil
			st.endUpdate()
		}
	}
	err := s.j.Replay(func(b []byte) error {
		rr, err := parseRecord(b)
		if err != nil {
			return err
		}
		s.logBytes += int64(len(b) + journal.FrameOverhead)
		switch rr.kind {
		case kindRecords:
			inSnap = true
			for i := range rr.recs {
				r := &rr.recs[i]
				snapMap = append(snapMap, st.intern(string(appendFields(nil, r)), r.Rev()))
			}
			return nil
		case kindTerminal:
			inSnap = true
			return s.loadTerminal(&rr, snapMap)
		case kindSetSnap, kindSetWork, kindSetRecent:
			inSnap = true
			return st.loadSetSnapshot(rr.kind, b)
		case kindSerials:
			inSnap = true
			for _, p := range rr.serials {
				st.setSerial(p[0], p[1])
			}
			return nil
		}
		if inSnap { // the snapshot ended
			snapMap, inSnap = nil, false
			st.endUpdate()
			s.snapBytes, s.logBytes = s.logBytes-int64(len(b)+journal.FrameOverhead), int64(len(b)+journal.FrameOverhead)
		}
		if rr.kind == kindSetEnd || rr.kind == kindSetReported {
			return st.applySetRecord(rr.kind, b)
		}
		if rr.kind == kindSerial {
			// Not part of an update: one cut short by a crash before it is dropped (an
			// update's parts are written under the lock SetSerial takes too).
			drop()
			st.setSerial(rr.dev, rr.serial)
			return nil
		}
		if rr.kind == kindLast && (!group.active || group.dev != rr.dev) {
			return fmt.Errorf("the last part of an update of %q without its first", rr.dev)
		}
		if rr.kind == kindOps || group.active && group.dev != rr.dev {
			drop()
		}
		if !group.active {
			group.active, group.dev, group.whole, group.task = true, rr.dev, false, rr.task
		}
		group.whole = group.whole || rr.flags&flagWhole != 0
		for _, ro := range rr.ops {
			o, err := st.resolve(ro)
			if err != nil {
				return fmt.Errorf("update of %q: %w", rr.dev, err)
			}
			if n := len(group.ops); n > 0 && o.kind != opForget && group.ops[n-1].id >= o.id {
				return fmt.Errorf("update of %q: person %q out of order", rr.dev, o.id)
			}
			group.ops = append(group.ops, o)
		}
		if rr.kind == kindPart {
			return nil
		}
		st.apply(group.dev, group.whole, group.ops)
		if group.task != nil {
			st.sets.start(group.task, group.ops)
		}
		st.endUpdate()
		group.active, group.ops, group.task = false, nil, nil
		return nil
	})
	if err != nil {
		return err
	}
	drop()
	if inSnap {
		st.endUpdate()
		s.snapBytes, s.logBytes = s.logBytes, 0
	}
	return nil
}

// resolve turns a decoded operation into one on the state, interning its record.
func (st *state) resolve(ro rawOp) (op, error) {
	o := op{kind: ro.kind, id: ro.id, rev: ro.rev}
	switch ro.kind {
	case opSet:
		o.ref = st.intern(string(appendFields(nil, &ro.rec)), ro.rec.Rev())
		o.id = ro.rec.ID
	case opSetRef:
		idx, ok := st.byRevOnly(ro.rev)
		if !ok {
			return o, fmt.Errorf("no single record has rev %s", ro.rev)
		}
		o.kind, o.ref, o.id = opSet, idx, st.id(idx)
	}
	return o, nil
}

// loadTerminal rebuilds one terminal of a snapshot.
func (s *Store) loadTerminal(rr *rawRecord, snapMap []uint32) error {
	st := s.st
	if st.terms[rr.dev] != nil {
		return fmt.Errorf("snapshot: terminal %q twice", rr.dev)
	}
	members := make([]uint32, 0, len(rr.members))
	t := &terminal{whole: rr.flags&flagWhole != 0, digest: rr.digest}
	prev := int64(-1)
	for _, v := range rr.members {
		zz := v >> 1
		n := prev + (int64(zz>>1) ^ -int64(zz&1))
		if n < 0 || n >= int64(len(snapMap)) {
			return fmt.Errorf("snapshot: terminal %q: record %d is not in the snapshot", rr.dev, n)
		}
		prev = n
		ref := snapMap[n]
		if v&1 != 0 {
			ref |= excluded
		} else {
			t.count++
		}
		if k := len(members); k > 0 && st.id(members[k-1]) >= st.id(ref) {
			return fmt.Errorf("snapshot: terminal %q: person %q out of order", rr.dev, st.id(ref))
		}
		members = append(members, ref)
	}
	t.members = len(members)
	st.recut(t, 0, 0, members)
	st.terms[rr.dev] = t
	return nil
}

// Compact replaces the journal by a snapshot of the store now. The compactor calls it
// when the journal has grown (Options.CompactBytes); it is exported for tests and tools.
func (s *Store) Compact() error {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	type capTerm struct {
		dev    string
		t      terminal
		chunks []*chunk
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	// Under mu: no update is appended between the checkpoint and the capture, so the
	// snapshot is exactly the state the segments before the checkpoint built.
	cp, err := s.j.Checkpoint()
	if err != nil {
		s.mu.Unlock()
		return err
	}
	st := s.st
	devs := make([]string, 0, len(st.terms))
	for dev := range st.terms {
		devs = append(devs, dev)
	}
	slices.Sort(devs)
	remap := make([]uint32, len(st.recs)) // record index → snapshot number+1
	var datas []string
	terms := make([]capTerm, len(devs))
	for i, dev := range devs {
		t := st.terms[dev]
		// Chunks are immutable: the capture holds them, not a copy of the members.
		terms[i] = capTerm{dev: dev, t: *t, chunks: slices.Clone(t.chunks)}
		for _, c := range t.chunks {
			for _, r := range c.refs {
				if idx := r &^ excluded; remap[idx] == 0 {
					datas = append(datas, st.recs[idx].data)
					remap[idx] = uint32(len(datas))
				}
			}
		}
	}
	setSnap := st.sets.capture()
	serials := st.capturedSerials()
	s.logBytes = 0
	s.mu.Unlock()

	var size int64
	var buf []byte
	err = s.j.WriteSnapshot(cp, func(emit func([]byte) error) error {
		put := func() error {
			size += int64(len(buf) + journal.FrameOverhead)
			return emit(buf)
		}
		buf = append(buf[:0], recordVersion, kindRecords)
		for _, d := range datas {
			if len(buf) > 2 && len(buf)+len(d) > 64<<10 {
				if err := put(); err != nil {
					return err
				}
				buf = buf[:2]
			}
			buf = append(buf, d...)
		}
		if len(buf) > 2 {
			if err := put(); err != nil {
				return err
			}
		}
		for _, ct := range terms {
			var flags byte
			if ct.t.whole {
				flags = flagWhole
			}
			buf = append(buf[:0], recordVersion, kindTerminal, flags)
			buf = appendString(buf, ct.dev)
			buf = binary.LittleEndian.AppendUint64(buf, uint64(ct.t.digest))
			buf = binary.AppendUvarint(buf, uint64(ct.t.members))
			prev := int64(-1)
			for _, c := range ct.chunks {
				for _, r := range c.refs {
					n := int64(remap[r&^excluded] - 1)
					d := n - prev
					prev = n
					v := uint64(d<<1^d>>63) << 1
					if r&excluded != 0 {
						v |= 1
					}
					buf = binary.AppendUvarint(buf, v)
				}
			}
			if err := put(); err != nil {
				return err
			}
		}
		var err error
		buf, err = setSnap.emit(buf, func(b []byte) error { buf = b; return put() })
		if err != nil {
			return err
		}
		buf, err = appendSerials(buf, serials, func(b []byte) error {
			size += int64(len(b) + journal.FrameOverhead)
			return emit(b)
		})
		return err
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.snapBytes = size
	s.mu.Unlock()
	return nil
}

func (s *Store) runCompactor() {
	defer close(s.done)
	for {
		select {
		case <-s.quit:
			return
		case <-s.compactC:
		}
		if err := s.Compact(); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, journal.ErrClosed) {
			s.log.Error("compacting the desired whitelists' journal failed; it keeps growing until the next try", "err", err)
		}
	}
}

// Page appends to dst the desired entries of dev with an id greater than after (bytewise;
// "" for the first page), in id order, at most limit of them. A reconciliation reads the
// desired list this way beside the terminal's ListPersons pages, without holding either
// whole.
func (s *Store) Page(dev, after string, limit int, dst []Entry) []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	t := st.terms[dev]
	if t == nil || limit <= 0 {
		return dst
	}
	ci, i, found := st.find(t, after)
	if found {
		i++
	}
	for n := 0; ci < len(t.chunks) && n < limit; ci, i = ci+1, 0 {
		for _, r := range t.chunks[ci].refs[i:] {
			if r&excluded != 0 {
				continue
			}
			dst = append(dst, Entry{ID: st.id(r), Rev: st.recs[r].rev})
			if n++; n == limit {
				break
			}
		}
	}
	return dst
}

// Get returns the desired record of the person id on dev; ok is false if there is none (or
// a refusal excluded it).
func (s *Store) Get(dev, id string) (r Record, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, had := s.st.member(s.st.terms[dev], id)
	if !had || ref&excluded != 0 {
		return r, false
	}
	off := 0
	r, err := parseFields(s.st.recs[ref].data, &off)
	return r, err == nil
}

// Excluded reports whether a refusal excluded the person id from dev's desired list.
func (s *Store) Excluded(dev, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, had := s.st.member(s.st.terms[dev], id)
	return had && ref&excluded != 0
}

// Count is the length of dev's desired list.
func (s *Store) Count(dev string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.st.terms[dev]; t != nil {
		return t.count
	}
	return 0
}

// Digest is dev's desired digest, as the terminal computes its own (face.Digest).
func (s *Store) Digest(dev string) face.Digest {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.st.terms[dev]; t != nil {
		return t.digest
	}
	return 0
}

// Known reports whether dev has a desired list (an update named it, Forget did not drop
// it); Whole whether a Replace set the whole list: only then is everything else on the
// terminal known to be unwanted.
func (s *Store) Known(dev string) (known, whole bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.st.terms[dev]
	return t != nil, t != nil && t.whole
}

// Terminals returns the terminals with a desired list, sorted.
func (s *Store) Terminals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	devs := make([]string, 0, len(s.st.terms))
	for dev := range s.st.terms {
		devs = append(devs, dev)
	}
	slices.SortFunc(devs, strings.Compare)
	return devs
}

// Stats returns the store's sizes.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	st := Stats{Terminals: len(s.st.terms), Records: s.st.live, Chunks: s.st.nchunks, SetTasks: s.st.sets.kept()}
	for _, t := range s.st.terms {
		st.Members += t.members
	}
	s.mu.Unlock()
	st.FileBytes = s.j.Stats().FileBytes
	return st
}
