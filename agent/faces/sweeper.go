package faces

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultSweepDelay is SweeperOptions.Delay's default.
const DefaultSweepDelay = time.Second

// sweepRetry is how long a sweep that could not read the desired state waits to try again
// when no change comes first.
const sweepRetry = time.Minute

// SweeperOptions configure a Sweeper.
type SweeperOptions struct {
	// InUse reads the durable desired state and returns what claims a face: every face a
	// desired person refers to, read after the call began and durable when it returns
	// (agent/whitelist's Faces). An error skips the sweep: nothing is removed.
	InUse func() (func(Sum) bool, error)
	// Delay is how long a sweep waits after the change that calls for it, so that a burst
	// of changes costs one sweep; 0 means DefaultSweepDelay.
	Delay time.Duration
	// Logger reports sweeps that removed faces or failed; nil: slog.Default().
	Logger *slog.Logger
}

// Sweeper removes the faces no desired person refers to any more: one sweep when it
// starts, then one Delay after each change of the desired state (Changed), a burst of
// changes coalesced into one sweep. It sleeps between changes: no polling.
type Sweeper struct {
	s    *Store
	o    SweeperOptions
	log  *slog.Logger
	kick chan struct{}
	wg   sync.WaitGroup
}

// NewSweeper returns a Sweeper of s; Start starts it.
func NewSweeper(s *Store, o SweeperOptions) *Sweeper {
	if o.Delay <= 0 {
		o.Delay = DefaultSweepDelay
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Sweeper{s: s, o: o, log: log, kick: make(chan struct{}, 1)}
}

// Changed tells the sweeper that the desired state changed (call it once the change is
// applied; the sweep's reading waits until it is durable). It never blocks.
func (w *Sweeper) Changed() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Start sweeps once, then after changes, until ctx is done (Wait waits for that).
func (w *Sweeper) Start(ctx context.Context) {
	w.wg.Add(1)
	go w.run(ctx)
}

// Wait returns once the sweeper stopped.
func (w *Sweeper) Wait() { w.wg.Wait() }

func (w *Sweeper) run(ctx context.Context) {
	defer w.wg.Done()
	timer := time.NewTimer(0) // the sweep at start
	defer timer.Stop()
	armed := true     // the timer runs for a sweep Delay (or less) away
	retrying := false // the timer runs for the retry of a failed sweep
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
			// The changes until the timer fires share its sweep: a steady stream of
			// changes gets one sweep every Delay, never none.
			if !armed || retrying {
				timer.Stop()
				timer.Reset(w.o.Delay)
				armed, retrying = true, false
			}
			continue
		case <-timer.C:
			armed = false
		}
		if _, err := w.Sweep(); err != nil {
			w.log.Warn("faces: sweep failed; trying again later", "err", err)
			timer.Reset(sweepRetry)
			armed, retrying = true, true
		}
	}
}

// Sweep removes now the faces the desired state no longer refers to: Mark, InUse, then
// Store.Sweep, in the order the store's invariant asks for. It returns how many it
// removed.
func (w *Sweeper) Sweep() (int, error) {
	m := w.s.Mark()
	inUse, err := w.o.InUse()
	if err != nil {
		return 0, err
	}
	n, err := w.s.Sweep(m, inUse)
	if n > 0 {
		w.log.Info("faces: removed faces no desired person refers to", "count", n)
	}
	return n, err
}
