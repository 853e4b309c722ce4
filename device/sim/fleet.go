package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Fleet is a set of simulated terminals sharing Options.
type Fleet struct {
	opts      Options
	g         *group
	terms     []*Terminal
	byID      map[string]*Terminal
	ready     []chan struct{}
	closeOnce sync.Once
}

func newFleet(ids []string, opts Options) (*Fleet, error) {
	opts.fill()
	if opts.Protocol != 1 && opts.Protocol != 2 {
		return nil, fmt.Errorf("sim: protocol %d: want 1 or 2", opts.Protocol)
	}
	if opts.Capacity < 0 {
		return nil, fmt.Errorf("sim: capacity %d is negative", opts.Capacity)
	}
	f := &Fleet{opts: opts, g: newGroup(), byID: make(map[string]*Terminal, len(ids))}
	for i, id := range ids {
		if id == "" || f.byID[id] != nil {
			return nil, fmt.Errorf("sim: device id %q empty or repeated", id)
		}
		t := newTerminal(id, i, &f.opts, f.g)
		f.terms = append(f.terms, t)
		f.byID[id] = t
	}
	return f, nil
}

func (f *Fleet) start() {
	for _, t := range f.terms {
		t.loops()
	}
}

// WaitReady waits until every terminal can receive commands (MQTT: subscribed once).
func (f *Fleet) WaitReady(ctx context.Context) error {
	for i, r := range f.ready {
		select {
		case <-r:
		case <-ctx.Done():
			return fmt.Errorf("sim: %s not ready: %w", f.terms[i].id, ctx.Err())
		}
	}
	return nil
}

// Terminals returns the terminals in the order their ids were given.
func (f *Fleet) Terminals() []*Terminal { return f.terms }

// Terminal returns the terminal with that id, or nil.
func (f *Fleet) Terminal(id string) *Terminal { return f.byID[id] }

// Stats returns every terminal's counters, in order.
func (f *Fleet) Stats() []Stats {
	out := make([]Stats, len(f.terms))
	for i, t := range f.terms {
		out[i] = t.Stats()
	}
	return out
}

// Violations returns every strict-mode violation of every terminal, joined; nil if none.
func (f *Fleet) Violations() error {
	var errs []error
	for _, t := range f.terms {
		errs = append(errs, t.Violations()...)
	}
	return errors.Join(errs...)
}

// Close stops every terminal, closes their connections or ports and waits for every
// goroutine. It is idempotent.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		// Stop timers and loops first, then the transports (which wakes readers).
		f.g.beginClose()
		for _, t := range f.terms {
			if t.tr != nil {
				t.tr.close()
			}
		}
		f.g.wg.Wait()
	})
	return nil
}
