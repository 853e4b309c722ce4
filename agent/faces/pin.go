package faces

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Pin keeps faces from sweeps while a task that refers to them is on its way into the
// durable desired state. The intake takes one per task: Put stores a face the task
// brings, Keep holds one it refers to without data; Release, once the desired state
// that refers to them is durable (or the task was refused), lets sweeps judge them by
// the desired state again. A Pin is used by one goroutine; Release is idempotent.
type Pin struct {
	s    *Store
	sums []Sum
}

// Pin returns an empty Pin.
func (s *Store) Pin() *Pin { return &Pin{s: s} }

// Put stores the face sum of size bytes read from r and holds it. The data is hashed as
// it is written, into a temporary file in the store's directory that is fsynced and
// renamed to the face's name only when it is complete and hashes to sum, then the
// directory is fsynced: Put returns nil once the face is durable. A face the store holds
// already is held and not written again (r is not read); a Put of a face another Put is
// writing waits for that one. Errors wrap ErrHashMismatch or ErrSize (nothing is left
// behind), or ErrBudget (the face would pass Options.MaxBytes; the text names the key).
func (p *Pin) Put(sum Sum, size int64, r io.Reader) error {
	if err := p.s.put(sum, size, r); err != nil {
		return err
	}
	p.sums = append(p.sums, sum)
	return nil
}

// Keep holds a face the store has, and reports whether it has it: a task whose person
// refers to a face without its data is taken only if Keep is true.
func (p *Pin) Keep(sum Sum) bool {
	s := p.s
	s.mu.Lock()
	e, ok := s.faces[sum]
	if ok {
		e.holds++
		e.touched = s.gen
		s.faces[sum] = e
	}
	s.mu.Unlock()
	if ok {
		p.sums = append(p.sums, sum)
	}
	return ok
}

// Release lets go of the faces held. Each is marked as used now, so a sweep whose Mark
// was taken before this call keeps it (that sweep's reading of the desired state may
// predate the change that refers to it).
func (p *Pin) Release() {
	if len(p.sums) == 0 {
		return
	}
	s := p.s
	s.mu.Lock()
	for _, sum := range p.sums {
		if e, ok := s.faces[sum]; ok {
			e.holds--
			e.touched = s.gen
			s.faces[sum] = e
		}
	}
	s.mu.Unlock()
	p.sums = p.sums[:0]
}

// Mark is a point in the store's history that Sweep judges faces against: what was put,
// held or released since the Mark is kept.
type Mark struct{ gen uint64 }

// Mark returns a Mark for a sweep. Take it before reading the desired state the sweep
// is judged by.
func (s *Store) Mark() Mark {
	s.mu.Lock()
	s.gen++
	m := Mark{gen: s.gen}
	s.mu.Unlock()
	return m
}

// Sweep removes every face that inUse does not claim, unless a Pin holds it or it was
// put, held or released since m. inUse must claim every face a person of the durable
// desired state refers to, as read after m was taken (and anything else its caller still
// needs). It returns how many faces it removed.
//
// Why this never removes a face still referred to, whatever crashes: a face is only
// removed here, never by a crash or by Open (which removes only temporary and damaged
// files); the intake holds a task's faces from before the task's desired-state change
// until after it is durable, and Release marks them, so a change that the sweep's
// reading missed (it came after the reading began, hence after m) left its faces held
// or marked after m. A face the desired state stops referring to stays on disk until a
// sweep after that change, so a crash between the change and the removal leaves an
// unreferenced face for the next sweep, never a missing one.
func (s *Store) Sweep(m Mark, inUse func(Sum) bool) (int, error) {
	var victims []Sum
	s.mu.Lock()
	for sum, e := range s.faces {
		if e.holds == 0 && e.touched < m.gen && !inUse(sum) {
			victims = append(victims, sum)
		}
	}
	s.mu.Unlock()
	if len(victims) == 0 {
		return 0, nil
	}
	return s.remove(victims, "unreferenced", func(e entry) bool {
		// Held or touched while the list was being made: kept.
		return e.holds == 0 && e.touched < m.gen
	})
}

// remove deletes the faces in sums that still qualify (ok nil: all), each under a busy
// mark so that no Put renames the same face into place while its file is unlinked, then
// fsyncs the directory once. It returns how many it removed from the index.
func (s *Store) remove(sums []Sum, reason string, ok func(entry) bool) (int, error) {
	var gone []Sum
	var sizes []int64
	s.mu.Lock()
	b := &busy{done: make(chan struct{})}
	for _, sum := range sums {
		e, held := s.faces[sum]
		if !held || (ok != nil && !ok(e)) {
			continue
		}
		if _, inProgress := s.busy[sum]; inProgress {
			continue
		}
		delete(s.faces, sum)
		s.bytes -= e.size
		s.charged -= charge(e.size)
		s.busy[sum] = b
		gone = append(gone, sum)
		sizes = append(sizes, e.size)
	}
	s.mu.Unlock()
	var errs []error
	for i, sum := range gone {
		if err := os.Remove(filepath.Join(s.dir, fileName(sum, sizes[i]))); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("faces: removing %s: %w", sum.short(), err))
		}
	}
	if len(gone) > 0 {
		if err := s.syncDir(); err != nil {
			errs = append(errs, err)
		}
	}
	s.mu.Lock()
	for _, sum := range gone {
		delete(s.busy, sum)
	}
	s.mu.Unlock()
	close(b.done)
	if reason == "unreferenced" {
		s.removed.Add(uint64(len(gone)))
	}
	for range gone {
		s.opts.Metrics.removedFace(reason)
	}
	s.gauges()
	return len(gone), errors.Join(errs...)
}
