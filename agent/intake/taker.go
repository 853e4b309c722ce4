package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// Outbox is where the taker journals good tasks: agent/outbox's *Outbox. EnqueueBatch
// returns one error per task: nil (stored), outbox.ErrDuplicate (stored before),
// outbox.ErrDeviceFull, ErrFull or ErrInvalidTask (over a bound: dead-lettered), anything
// else (the journal failed: the message is not taken).
type Outbox interface {
	EnqueueBatch(tasks []outbox.Task) []error
}

// DeadLetters is the journalled backlog of refused tasks (the agent's deadletter log).
// Room reports an error when n deadletters of size bytes in total would not fit; Add
// journals them, durably, before it returns.
type DeadLetters interface {
	Room(n, size int) error
	Add(deadletters [][]byte) error
}

// Options configure a Taker. The zero value of a bound means none.
type Options struct {
	// MaxBatch is the most tasks one message may carry ([intake] max_batch).
	MaxBatch int
	// MaxMessageSize is the largest message taken, in bytes ([intake] max_message_size);
	// the HTTP pull also reads no more of a page.
	MaxMessageSize int
	// MaxWhitelist is the most persons one SetWhitelist task may carry ([intake]
	// max_whitelist); 0 refuses SetWhitelist tasks. They are taken only with desired
	// whitelists (OpenDesired), which keep them and their results.
	MaxWhitelist int
	// Devices are the configured terminals: a task for another is refused.
	Devices []string
	// Logger receives refusals and failures. Default: discard.
	Logger *slog.Logger
}

// Metrics are intake's series. Build them with NewMetrics; a nil *Metrics counts nothing.
type Metrics struct {
	Accepted *metrics.Counter // faceagent_tasks_accepted_total
	Rejected *metrics.Counter // faceagent_tasks_rejected_total
}

// NewMetrics registers intake's series on r.
func NewMetrics(r *metrics.Registry) *Metrics {
	return &Metrics{
		Accepted: r.NewCounter("faceagent_tasks_accepted_total", "Tasks stored in the journal at intake."),
		Rejected: r.NewCounter("faceagent_tasks_rejected_total", "Tasks (or messages) dead-lettered at intake."),
	}
}

// ErrNotReady is returned while the taker has no outbox (start-up, shutdown): the message
// is not taken, and must not be acknowledged.
var ErrNotReady = errors.New("agent: not accepting tasks right now")

// Taker turns task messages into journalled outbox tasks and dead-letters the rest. It is
// safe for concurrent use: every intake (the embedded broker's interception, the upstream
// connection, the HTTP pull) calls Accept on its own goroutine.
type Taker struct {
	limits wire.Limits
	log    *slog.Logger
	m      *Metrics

	ob   atomic.Pointer[Outbox]
	dead atomic.Pointer[DeadLetters]
	// touched is told which devices got new tasks (the state writer's queue depth).
	touched atomic.Pointer[func(deviceID string)]
	// draining refuses new tasks: they are dead-lettered.
	draining atomic.Bool
	// desired, when set, keeps the desired whitelists in step with the outbox; mu makes
	// the messages take turns from their first change there to the outbox's answer.
	desired atomic.Pointer[Desired]
	mu      sync.Mutex
	// faces, when set, stores the faces the tasks bring (OpenFaces).
	faces atomic.Pointer[Faces]
}

// NewTaker returns a Taker that takes nothing until Open.
func NewTaker(o Options, m *Metrics) *Taker {
	known := make(map[string]bool, len(o.Devices))
	for _, id := range o.Devices {
		known[id] = true
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = &Metrics{}
	}
	if m.Accepted == nil || m.Rejected == nil { // counted, not exported
		m = &Metrics{Accepted: cmpOr(m.Accepted), Rejected: cmpOr(m.Rejected)}
	}
	return &Taker{
		limits: wire.Limits{
			MaxBatch:       o.MaxBatch,
			MaxMessageSize: o.MaxMessageSize,
			MaxWhitelist:   o.MaxWhitelist,
			KnownDevice:    func(id string) bool { return known[id] },
		},
		log: log,
		m:   m,
	}
}

// Open starts taking: good tasks go to ob, refused ones to dead.
func (t *Taker) Open(ob Outbox, dead DeadLetters) {
	t.dead.Store(&dead)
	t.ob.Store(&ob)
}

// OpenDesired keeps the terminals' desired whitelists in d from now on: every task taken
// is applied there first (see Desired). Call it before Open.
func (t *Taker) OpenDesired(d Desired) {
	if d == nil {
		t.desired.Store(nil)
		return
	}
	t.desired.Store(&d)
}

// Close stops taking: from now on Accept returns ErrNotReady (the message is not
// acknowledged and comes again). Call it when shutdown begins, before the outbox closes.
func (t *Taker) Close() { t.ob.Store(nil) }

// OnTouched sets the function told which device got new tasks (nil: none).
func (t *Taker) OnTouched(fn func(deviceID string)) {
	if fn == nil {
		t.touched.Store(nil)
		return
	}
	t.touched.Store(&fn)
}

// SetDraining refuses new tasks (dead-lettered as "gateway draining") while on.
func (t *Taker) SetDraining(on bool) { t.draining.Store(on) }

// Draining reports whether new tasks are refused.
func (t *Taker) Draining() bool { return t.draining.Load() }

// MaxMessageSize is the largest message taken (0: no bound).
func (t *Taker) MaxMessageSize() int { return t.limits.MaxMessageSize }

// Intercepted is Accept for the embedded broker's interception of the tasks topic
// (agent/broker's Intercept): a message not taken is logged with its publisher, and the
// broker refuses it with the protocol's means so that it is sent again.
func (t *Taker) Intercepted(ctx context.Context, clientID string, payload []byte) error {
	err := t.Accept(ctx, payload)
	if err != nil {
		t.log.Error("task message not stored; not acknowledged", "client", clientID, "err", err)
	}
	return err
}

// Accept stores one task message: its tasks in the outbox, its rejects in the deadletter
// log. It returns an error only when nothing could be stored for reasons that a retry may
// cure (journal failure, no room for the deadletters, shutting down): the message must
// then not be acknowledged. It keeps nothing of payload once it returns (parsing copies the
// strings, a reject its payload): the embedded broker hands it the packet's own buffer.
func (t *Taker) Accept(ctx context.Context, payload []byte) error {
	obp := t.ob.Load()
	if obp == nil {
		return ErrNotReady
	}
	ob, deadLog := *obp, *t.dead.Load()
	lim := t.limits
	if t.desired.Load() == nil {
		lim.MaxWhitelist = 0 // nothing would keep the list nor give the result
	}
	batch := wire.Parse(payload, lim)
	rejects := batch.Rejects
	if t.draining.Load() {
		for _, task := range batch.Tasks {
			raw, _ := json.Marshal(task)
			rejects = append(rejects, wire.NewReject("gateway draining: not taking new tasks", raw))
		}
		batch.Tasks = nil
	}
	if fp := t.faces.Load(); fp != nil && len(batch.Tasks) > 0 {
		// Held until the message's changes to the desired whitelists are durable (this
		// function's end), so that no face sweep removes them in between.
		hold := (*fp).Hold()
		defer hold.Release()
		refused, err := takeFaces(hold, &batch)
		if err != nil {
			return err
		}
		rejects = append(rejects, refused...)
	}
	// The deadletters known before anything is stored must fit in the backlog, or none of
	// the message is taken: it is not acknowledged and comes again later, when the
	// upstream broker has taken the backlog. (Checking first keeps its good tasks from
	// being stored by a message that is then refused.)
	dead := make([][]byte, 0, len(rejects))
	size := 0
	for _, r := range rejects {
		b, _ := json.Marshal(r)
		dead = append(dead, b)
		size += len(b)
	}
	if len(dead) > 0 {
		if err := deadLog.Room(len(dead), size); err != nil {
			return err
		}
	}
	if len(batch.Tasks) > 0 {
		tasks := make([]outbox.Task, len(batch.Tasks))
		// The commands are encoded into one buffer for the batch (the outbox copies the
		// payloads it keeps), sized for all of them: one allocation, not one per task.
		size := 0
		for i := range batch.Tasks {
			if batch.Tasks[i].Op == wire.SetWhitelist {
				continue // kept by the desired whitelists: no command
			}
			cmd := batch.Command(i)
			size += cmd.Msgsize()
		}
		buf := make([]byte, 0, size)
		for i := range batch.Tasks {
			task := &batch.Tasks[i]
			cmd := batch.Command(i) // the id Parse computed: each task is hashed once
			if task.Op == wire.SetWhitelist {
				// The desired whitelists keep it (Desired.Apply's ErrKept): it is never
				// sent as one command, so it has no payload.
				tasks[i] = outbox.Task{MessageID: cmd.MessageID, TaskID: task.TaskID, DeviceID: task.DeviceID, Op: string(task.Op)}
				continue
			}
			start := len(buf)
			var err error
			if buf, err = cmd.AppendMsg(buf); err != nil { // Parse validated the task; this would be a bug in one of them
				return fmt.Errorf("encoding task %s: %w", task.TaskID, err)
			}
			tasks[i] = outbox.Task{
				MessageID: cmd.MessageID, TaskID: task.TaskID, DeviceID: task.DeviceID,
				Op: string(task.Op), PersonID: task.Person.ID, Payload: buf[start:len(buf):len(buf)],
			}
		}
		// order[k] is the index in batch.Tasks of tasks[k]; undos[k] undoes its change to
		// the desired whitelists (nil: not applied there).
		order := make([]int, len(tasks))
		for i := range order {
			order[i] = i
		}
		var undos []func() error
		var desired Desired
		var releaseTurn func()
		if dp := t.desired.Load(); dp != nil {
			// One message at a time from here until the outbox took its tasks: the desired
			// whitelists and the outbox see the tasks in the same order.
			desired = *dp
			t.mu.Lock()
			locked := true
			unlock := func() {
				if locked {
					locked = false
					t.mu.Unlock()
				}
			}
			defer unlock()
			releaseTurn = unlock
			var refused []refusal
			var err error
			var kept int
			tasks, order, undos, refused, kept, err = t.applyDesired(desired, ob, batch.Tasks, tasks, order)
			if err != nil {
				return err
			}
			t.m.Accepted.Add(uint64(kept))
			for _, rf := range refused {
				raw, _ := json.Marshal(batch.Tasks[rf.i])
				r := wire.NewReject(rf.err.Error(), raw)
				b, _ := json.Marshal(r)
				dead = append(dead, b)
				rejects = append(rejects, r)
			}
		}
		errs := ob.EnqueueBatch(tasks)
		touched := t.touched.Load()
		accepted := 0
		var undo []func() error
		for k, err := range errs {
			i := order[k]
			switch {
			case err == nil:
				accepted++
				if touched != nil {
					(*touched)(tasks[k].DeviceID)
				}
			case errors.Is(err, outbox.ErrDuplicate):
				// Already stored (a redelivery): acknowledging it again is right.
			case errors.Is(err, outbox.ErrDeviceFull), errors.Is(err, outbox.ErrFull), errors.Is(err, outbox.ErrInvalidTask):
				// Admitted past the backlog's bound (at most one message's tasks): the
				// task is in no queue, so the deadletter is all that speaks for it, and
				// its change to the desired whitelists is undone.
				raw, _ := json.Marshal(batch.Tasks[i])
				r := wire.NewReject("over a bound: "+err.Error(), raw)
				b, _ := json.Marshal(r)
				dead = append(dead, b)
				rejects = append(rejects, r)
				if undos != nil && undos[k] != nil {
					undo = append(undo, undos[k])
				}
			default:
				// Journal failed or closed: nothing of this message may be acknowledged.
				return err
			}
		}
		if len(undo) > 0 {
			if err := t.undoDesired(desired, undo); err != nil {
				return err
			}
		}
		if releaseTurn != nil {
			releaseTurn() // the outbox and the desired whitelists agree: the next message's turn
		}
		t.m.Accepted.Add(uint64(accepted))
	}
	// Journalled (and fsynced) before the caller acknowledges the message; published in
	// order by the deadletter log's own goroutine.
	if err := deadLog.Add(dead); err != nil {
		return fmt.Errorf("journalling deadletters: %w", err)
	}
	for _, r := range rejects {
		t.m.Rejected.Inc()
		t.log.Info("task refused", "reason", r.Reason)
	}
	return nil
}

// cmpOr returns c, or a counter of its own when c is nil.
func cmpOr(c *metrics.Counter) *metrics.Counter {
	if c == nil {
		return new(metrics.Counter)
	}
	return c
}
