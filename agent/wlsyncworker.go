package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// The sync worker carries out what the reconciler decided that waits for the disk: its
// corrections (outbox.EnqueueBatch returns once they are in the journal) and its sync
// reports (journalled before they are published). The reconciler decides on the goroutine
// that delivered the triggering event — with an external broker, the one MQTT client
// goroutine that delivers every MQTT terminal's acks and heartbeats — so doing that work
// there would hold every other terminal's acks behind one terminal's repair.
//
// What must hold:
//   - Order: one FIFO and one goroutine, so a terminal's corrections reach its queue in
//     the order decided and its reports are journalled in the order made (started before
//     its done).
//   - One in flight: the worker only queues; the outbox sends. Corrections queued together
//     are stored with one journal wait (EnqueueBatch).
//   - Bound: the queue holds at most cap jobs, the reconciler's window plus 8 per
//     max_reconciling. The reconciler queues at most a window of corrections at once per
//     reconciling terminal and makes two reports per reconciliation, so the bound is
//     reached only while the disk stalls.
//     Past it a correction is refused (the reconciliation fails and backs off: Correct's
//     contract) and a report is journalled on the caller's goroutine (the old path, which
//     waits for the disk): nothing waits for room, so the worker, whose own calls reach
//     the reconciler again, can never wait for itself.
type syncWorker struct {
	ob   *outbox.Outbox
	rep  func(wire.SyncReport)           // journals a report (syncReporter.SyncReport)
	done func(dev, id string, err error) // a correction was not queued: tell the reconciler
	log  *slog.Logger

	mu      sync.Mutex
	jobs    []syncJob
	cap     int
	closed  bool
	wake    chan struct{} // capacity 1: jobs arrived
	stopped chan struct{} // closed when run returned
}

// syncJob is a correction (task) or a report (report, when isReport).
type syncJob struct {
	task     outbox.Task
	report   wire.SyncReport
	isReport bool
}

// errSyncQueueFull refuses a correction while the worker holds its bound of jobs.
var errSyncQueueFull = errors.New("the whitelist sync queue is full")

func newSyncWorker(ob *outbox.Outbox, capacity int, log *slog.Logger) *syncWorker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &syncWorker{ob: ob, cap: max(capacity, 1), log: log,
		wake: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// start runs the worker until stop.
func (w *syncWorker) start() { go w.run() }

// stop ends the worker once the jobs queued before it are carried out; jobs pushed after
// it are carried out on the caller's goroutine.
func (w *syncWorker) stop() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	nudge(w.wake)
	<-w.stopped
}

// correct queues t; an error means it was not queued.
func (w *syncWorker) correct(t outbox.Task) error {
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		return outbox.ErrClosed
	case len(w.jobs) >= w.cap:
		w.mu.Unlock()
		return fmt.Errorf("%w (%d jobs)", errSyncQueueFull, w.cap)
	}
	w.jobs = append(w.jobs, syncJob{task: t})
	w.mu.Unlock()
	nudge(w.wake)
	return nil
}

// report queues r, or journals it at once when the worker is stopped or full.
func (w *syncWorker) report(r wire.SyncReport) {
	w.mu.Lock()
	if w.closed || len(w.jobs) >= w.cap {
		closed := w.closed
		w.mu.Unlock()
		if !closed {
			w.log.Warn("whitelist sync queue full: journalling a sync report on the event's goroutine",
				"device", r.DeviceID, "status", r.Status, "queued", w.cap)
		}
		w.rep(r)
		return
	}
	w.jobs = append(w.jobs, syncJob{report: r, isReport: true})
	w.mu.Unlock()
	nudge(w.wake)
}

func (w *syncWorker) run() {
	defer close(w.stopped)
	var batch []syncJob
	var tasks []outbox.Task
	for {
		w.mu.Lock()
		batch, w.jobs = w.jobs, batch[:0]
		closed := w.closed
		w.mu.Unlock()
		if len(batch) == 0 {
			if closed {
				return
			}
			<-w.wake
			continue
		}
		// Consecutive corrections go in one EnqueueBatch; a report between them keeps
		// its place.
		for i := 0; i < len(batch); {
			if batch[i].isReport {
				w.rep(batch[i].report)
				i++
				continue
			}
			tasks = tasks[:0]
			for ; i < len(batch) && !batch[i].isReport; i++ {
				tasks = append(tasks, batch[i].task)
			}
			for k, err := range w.ob.EnqueueBatch(tasks) {
				if err != nil {
					w.done(tasks[k].DeviceID, tasks[k].MessageID, err)
				}
			}
		}
		clear(batch)
		clear(tasks)
	}
}

// nudge signals c (capacity 1) without blocking.
func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// startWorker starts w's sync worker, its queue bounded to jobs, journalling reports with
// rep, and returns the reconciler's Reporter (through the worker).
func (w *whitelistSync) startWorker(jobs int, rep func(wire.SyncReport)) whitelist.Reporter {
	w.work = newSyncWorker(w.ob, jobs, w.log)
	w.work.rep, w.work.done = rep, w.notQueued
	w.work.start()
	return workerReporter{w.work}
}

// workerReporter is the reconciler's Reporter: reports go through the worker.
type workerReporter struct{ w *syncWorker }

func (r workerReporter) SyncReport(rep wire.SyncReport) { r.w.report(rep) }
