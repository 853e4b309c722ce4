package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// Options configure an Outbox. The zero value (and nil) means the defaults.
type Options struct {
	// Journal configures the journal (sync policy, file layer). Its Logger is set by the
	// outbox. Its OnFailure, when set, is called after the outbox stopped taking tasks for
	// the failure (Err returns it by then): the health checks' event.
	Journal journal.Options
	// Settings are the initial dispatch settings; SetSettings changes them live.
	Settings Settings
	// Devices holds per-device configuration; SetDevice changes it live.
	Devices map[string]DeviceConfig
	// MaxQueuedPerDevice bounds the unfinished commands of one device. Default 10,000.
	MaxQueuedPerDevice int
	// MaxQueued bounds the unfinished commands of all devices, and separately the results
	// not yet reported. Default 100,000.
	MaxQueued int
	// CompactAfter is how many dead journal records trigger a snapshot (and only once they
	// also outnumber the live ones). Default 50,000. So do CompactBytes appended since the
	// last snapshot, once they are also more than that snapshot: records larger than usual
	// cannot pile up under the count. Default 16 MiB.
	CompactAfter int
	CompactBytes int64
	// Clock is the time source. Default: the system clock.
	Clock Clock
	// Seed seeds the retry jitter. 0: random.
	Seed uint64
	// Logger receives failures and recoveries. Default: discard.
	Logger *slog.Logger
	// NoResultDone, when set, is told the outcome of each command without a result
	// (Task.NoResult) that finishes while the outbox runs: its terminal's ack and a nil
	// error for code 0; the ack and an error wrapping ErrRefused for a refusal; a zero Ack
	// and an error wrapping ErrNoAnswer (no ack after MaxTries), ErrSuperseded or
	// ErrExpired otherwise. It is called once per command, after the outbox's lock is
	// released, in the order the commands finished, on the goroutine that decided the
	// outcome (as a Query's Done): it must not block, and it may call the outbox. It is
	// kept in memory only: a command replayed after a restart reports to the hook of the
	// new process, whose asker may not know its message id (and must ignore it).
	NoResultDone func(deviceID, messageID string, ack face.Ack, err error)
	// Faces, when set, turns on the face step (protocol v2; "Faces" in the package
	// documentation): a command whose person carries a face the terminal is not known to
	// hold is preceded by that face, in PutFace chunks read from Faces. Task payloads must
	// then be face.Command in msgp, and the Sender must send each command under
	// Command.MessageID (a command sent again after a code 21 gets a new one).
	Faces FaceSource
	// FaceChunk is the chunk size for devices whose DeviceConfig sets none. Default
	// DefaultFaceChunk (64 KiB); at most face.MaxChunkSize.
	FaceChunk int
	// Acked, when set, is told of each command with a result (not Task.NoResult) that its
	// terminal's ack finished: code 0 succeeded it, any other code failed it as a refusal.
	// cmd is the command as sent (Try 0; its Payload is shared with the outbox, do not
	// modify it; nil when it could not be read). It is called as NoResultDone is: once
	// per ack that finished a command, after the outbox's lock is released, in the order
	// the acks came; it must not block, and it may call the outbox. In memory only: an ack
	// that finished a command just before a crash is not told again after the restart
	// (the command's result is reported all the same).
	Acked func(deviceID string, cmd Command, code int)

	// Tests: how the payload file is created, and when it is rewritten (spill.go).
	createSpill  func(path string) (spillFile, error)
	spillMinDead int64
	spillEager   bool
	// Tests: run after each round of payload repairs, and after each background compaction.
	afterRepair  func()
	afterCompact func(error)
}

// Outbox is the durable local message table: it stores tasks in a journal before it accepts
// them and delivers them to devices one at a time per device. It is safe for concurrent use.
// See the package documentation for the protocol between the agent and the outbox.
type Outbox struct {
	j        *journal.Journal
	sender   Sender
	clock    Clock
	log      *slog.Logger
	maxDev   int
	maxAll   int
	compactN int
	// compactBytes: bytes appended since the last snapshot that trigger one (with
	// compactN's other condition, and once they are more than the snapshot).
	compactBytes int64

	ctx    context.Context // cancelled by Close: aborts Sends
	cancel context.CancelFunc
	wg     sync.WaitGroup // Send goroutines and the compactor

	jerr atomic.Pointer[error] // set (without o.mu) when the journal refused a write

	mu       sync.Mutex
	t        *table
	settings Settings
	configs  map[string]DeviceConfig
	rng      *rand.Rand
	pending  map[string]pendingAdd // adds written but not yet durable
	enc      []byte
	sends    []sendJob // decided under mu, handed on by startSendsLocked
	takeIDs  []string  // MarkReported's list of ids to record, reused
	errBuf   []byte    // supersededBy's
	inline   []sendJob // non-blocking sends for unlock to make
	nonBlock NonBlockingSender
	heap     deviceHeap
	retained []*item // failed and reported, by finish time (item.next), each once: purged after FailedRetention
	timerGen uint64
	timerAt  int64 // when the armed timer fires (unix ns), 0 when none
	timer    Timer
	records  int // journal records since the last snapshot, snapshot included
	// baseBytes is the journal's FileBytes after the last snapshot (at Open: what was
	// there): what was appended since is FileBytes less it (compact.go).
	baseBytes  int64
	compacting bool
	closed     bool
	resultsC   chan struct{}
	repair     payloadRepair // damaged payloads read again from the journal (repair.go)
	// Queries (query.go): every pending one by message id (nil until the first), and the
	// finished ones whose Done unlock calls.
	queries   map[string]*query
	queryDone []queryDone

	noResultDone func(deviceID, messageID string, ack face.Ack, err error) // Options.NoResultDone
	changed      atomic.Pointer[func(deviceID string)]                     // OnChanged's

	faces        FaceSource // Options.Faces: nil, no face step
	faceChunk    int
	faceIDPrefix string                                       // makes the chunks' message ids unique across restarts
	faceSeq      uint64                                       // and this among the chunks of every device
	acked        func(deviceID string, cmd Command, code int) // Options.Acked
	ackedCmds    []ackedCommand                               // for unlock to tell acked

	afterSendFailed func() // test hook: runs after a Send error was handled
	afterRepair     func() // test hooks: Options.afterRepair, afterCompact
	afterCompact    func(error)
}

type pendingAdd struct {
	rec *record
	seq journal.Seq
}

// Open opens (creating if needed) the message table in dir, replays its journal, and
// starts dispatching. Commands that were in flight when the process stopped are scheduled
// again with the same message id and their tries kept. sender delivers commands.
func Open(dir string, sender Sender, opts *Options) (*Outbox, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.MaxQueuedPerDevice <= 0 {
		o.MaxQueuedPerDevice = 10_000
	}
	if o.MaxQueued <= 0 {
		o.MaxQueued = 100_000
	}
	if o.CompactAfter <= 0 {
		o.CompactAfter = 50_000
	}
	if o.CompactBytes <= 0 {
		o.CompactBytes = 16 << 20
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	seed := o.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	ob := &Outbox{
		sender: sender, clock: o.Clock, log: o.Logger,
		maxDev: o.MaxQueuedPerDevice, maxAll: o.MaxQueued, compactN: o.CompactAfter, compactBytes: o.CompactBytes,
		t:        newTable(),
		settings: o.Settings.withDefaults(),
		configs:  map[string]DeviceConfig{},
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		pending:  map[string]pendingAdd{},
		resultsC: make(chan struct{}, 1),

		noResultDone: o.NoResultDone,
		acked:        o.Acked,
		afterRepair:  o.afterRepair, afterCompact: o.afterCompact,
		faces: o.Faces, faceChunk: o.FaceChunk,
	}
	if ob.faceChunk <= 0 {
		ob.faceChunk = DefaultFaceChunk
	}
	ob.faceIDPrefix = faceIDPrefix(ob.rng.Uint64())
	for id, c := range o.Devices {
		ob.configs[id] = c
	}
	ob.nonBlock, _ = sender.(NonBlockingSender)
	jo := o.Journal
	jo.Logger = o.Logger
	onFailure := jo.OnFailure
	jo.OnFailure = func(err error) {
		ob.journalFailed(err)
		if onFailure != nil {
			onFailure(err)
		}
	}
	j, err := journal.Open(dir, &jo)
	if err != nil {
		return nil, err
	}
	ob.j = j
	// The payload file is created once the journal holds the directory's lock: no other
	// process uses this directory now.
	if ob.t.spill, err = openSpill(dir, o.createSpill, o.spillMinDead, o.Logger); err != nil {
		o.Logger.Error("outbox: payloads stay in memory", "err", err)
	} else {
		ob.t.spill.eager = o.spillEager
	}
	var r record
	err = j.Replay(func(p []byte) error {
		if err := decodeRecord(p, &r); err != nil {
			return fmt.Errorf("outbox: decoding a journal record: %w", err)
		}
		ob.records++
		return ob.t.apply(&r)
	})
	if err != nil {
		if ob.t.spill != nil {
			ob.t.spill.close() // before the journal lets the directory go, as in Close
		}
		j.Close()
		return nil, err
	}
	ob.baseBytes = j.Stats().FileBytes
	ob.ctx, ob.cancel = context.WithCancel(context.Background())

	ob.mu.Lock()
	defer ob.unlock()
	for _, d := range ob.t.devices {
		d.live.cfg = ob.configs[d.id]
	}
	// At-least-once: what was in flight may or may not have arrived; send it again, same id,
	// tries kept (the device treats a repeated id as a duplicate).
	for _, it := range ob.t.items.all() {
		switch {
		case it.status == InFlight:
			ob.emit(&record{Kind: kindRequeue, ID: it.id(), Tries: uint32(it.tries)})
		case it.status == Failed && it.reported:
			ob.retained = append(ob.retained, it)
		}
	}
	slices.SortFunc(ob.retained, func(a, b *item) int { return cmp.Compare(a.next, b.next) })
	for _, d := range ob.t.devices {
		ob.pump(d)
	}
	if len(ob.t.results) > 0 {
		ob.signalResults()
	}
	ob.rearm()
	ob.startSendsLocked()
	return ob, nil
}

// Close stops dispatching, cancels Sends in progress and waits for them, then closes the
// journal (writing what is queued). It is idempotent.
func (o *Outbox) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	if o.timer != nil {
		o.timer.Stop()
		o.timer, o.timerAt = nil, 0
	}
	o.cancelQueries(ErrClosed)
	o.unlock()
	o.cancel()
	o.wg.Wait()
	o.mu.Lock()
	if s := o.t.spill; s != nil {
		// After the compactor (the one reader without the lock) returned, and before the
		// journal lets the directory go to the next Open. Payloads still needed after
		// Close (an Enqueue that was waiting for its fsync) go to the heap.
		s.close()
		o.t.spill = nil
	}
	o.mu.Unlock()
	return o.j.Close()
}

// Err returns the journal failure that stopped the outbox, or nil.
func (o *Outbox) Err() error {
	if p := o.jerr.Load(); p != nil {
		return *p
	}
	return nil
}

// journalFailed is the journal's OnFailure. It runs on the journal's writer goroutine and
// must not take o.mu (a compaction may hold it while waiting for that goroutine).
func (o *Outbox) journalFailed(err error) {
	err = fmt.Errorf("%w: %w", ErrJournal, err)
	o.jerr.CompareAndSwap(nil, &err)
	o.log.Error("outbox stops: journal refuses writes; reopen after fixing the cause", "err", err)
}

func (o *Outbox) usable() error {
	if o.closed {
		return ErrClosed
	}
	return o.Err()
}

func (o *Outbox) now() int64 { return o.clock.Now().UnixNano() }

// emit writes r to the journal and applies it to the table. The record is durable later (or
// never, after a crash or a journal failure): emit is for decisions that are safe to
// repeat — a lost Send record means one uncounted try, a lost Finish means a resend.
func (o *Outbox) emit(r *record) journal.Seq {
	r.Version = recordVersion
	seq, err := o.append(r, true)
	if err != nil {
		return 0
	}
	if err := o.t.apply(r); err != nil {
		o.log.Error("outbox: applying own record", "err", err) // a bug: kinds are ours
	}
	return seq
}

// append writes r to the journal. Lazy records (sends, retries, finishes, reports) go out
// with the next fsync somebody waits for, or within the journal's LazyDelay: their loss in a
// crash costs a resend, never a task, and a stream of acks then costs a few fsyncs a second
// instead of one each.
func (o *Outbox) append(r *record, lazy bool) (journal.Seq, error) {
	r.Version = recordVersion
	var err error
	o.enc, err = r.MarshalMsg(o.enc[:0])
	if err != nil {
		return 0, err
	}
	var seq journal.Seq
	if lazy {
		seq, err = o.j.AppendLazy(o.enc)
	} else {
		seq, err = o.j.AppendAsync(o.enc)
	}
	if err != nil {
		if !errors.Is(err, journal.ErrClosed) {
			o.journalFailed(err)
		}
		return 0, err
	}
	o.records++
	o.maybeCompact()
	return seq, nil
}

// Enqueue stores t durably and schedules it. It returns nil only once the task is in the
// journal: only then may the task be acknowledged upstream. Refusals: ErrDuplicate (already
// stored: acknowledge it too), ErrDeviceFull, ErrFull, ErrInvalidTask, ErrJournal, ErrClosed.
func (o *Outbox) Enqueue(t Task) error {
	return o.EnqueueBatch([]Task{t})[0]
}

// EnqueueBatch stores several tasks with one journal wait; errs[i] is Enqueue's answer
// for tasks[i].
func (o *Outbox) EnqueueBatch(tasks []Task) (errs []error) {
	errs = make([]error, len(tasks))
	type accepted struct {
		i   int
		rec *record
	}
	type dup struct {
		i   int
		seq journal.Seq
	}
	var acc []accepted
	var recs []record // the accepted tasks' add records, in one allocation
	var dups []dup
	var last journal.Seq
	o.mu.Lock()
	if err := o.usable(); err != nil {
		o.mu.Unlock()
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	now := o.now()
	for i, t := range tasks {
		if t.MessageID == "" || t.DeviceID == "" {
			errs[i] = fmt.Errorf("%w: message id and device id are required", ErrInvalidTask)
			continue
		}
		if len(t.MessageID) > maxFieldLen || len(t.TaskID) > maxFieldLen || len(t.PersonID) > maxFieldLen {
			errs[i] = fmt.Errorf("%w: message id, task id and person id are limited to %d bytes", ErrInvalidTask, maxFieldLen)
			continue
		}
		if o.t.seen(t.MessageID) || (len(o.queries) > 0 && o.queries[t.MessageID] != nil) {
			errs[i] = fmt.Errorf("%w: %s", ErrDuplicate, t.MessageID)
			continue
		}
		if p, ok := o.pending[t.MessageID]; ok {
			// Being stored right now: the answer is that store's outcome. Answering
			// "duplicate" at once would let the caller acknowledge a task whose first copy
			// may still fail to reach the disk.
			dups = append(dups, dup{i, p.seq})
			continue
		}
		if n := o.t.active + len(o.pending) + len(o.queries); n >= o.maxAll {
			errs[i] = fmt.Errorf("%w: %d unfinished commands (max_queued %d)", ErrFull, n, o.maxAll)
			continue
		}
		if n := len(o.t.results); n >= o.maxAll {
			// Finished commands stay in memory until their result is reported: while the
			// reporter cannot publish, intake must stop too, or the table grows without bound.
			errs[i] = fmt.Errorf("%w: %d results not yet reported (max_queued %d)", ErrFull, n, o.maxAll)
			continue
		}
		d := o.dev(t.DeviceID)
		if n := d.unfinished(); n >= o.maxDev {
			errs[i] = fmt.Errorf("%w: device %s has %d unfinished commands (max_queued_per_device %d)",
				ErrDeviceFull, t.DeviceID, n, o.maxDev)
			continue
		}
		o.t.maxOrd++
		if recs == nil {
			// Never grown past len(tasks): the pointers to its elements stay valid.
			recs = make([]record, 0, len(tasks)-i)
			acc = make([]accepted, 0, len(tasks)-i)
		}
		recs = append(recs, record{
			Kind: kindAdd, ID: t.MessageID, Task: t.TaskID, Device: t.DeviceID, Op: t.Op,
			Person: t.PersonID, Payload: t.Payload, Ord: o.t.maxOrd, Added: now, NoResult: t.NoResult,
		})
		r := &recs[len(recs)-1]
		if !t.ExpiresAt.IsZero() {
			r.Expires = t.ExpiresAt.UnixNano()
		}
		seq, err := o.append(r, false)
		if err != nil {
			errs[i] = o.journalErr(err)
			continue
		}
		last = seq
		o.pending[r.ID] = pendingAdd{r, seq}
		d.live.pending++
		acc = append(acc, accepted{i, r})
	}
	o.mu.Unlock()
	defer func() {
		for _, d := range dups {
			if err := o.j.Wait(d.seq); err != nil {
				errs[d.i] = o.journalErr(err)
			} else {
				errs[d.i] = fmt.Errorf("%w: %s", ErrDuplicate, tasks[d.i].MessageID)
			}
		}
	}()
	if len(acc) == 0 {
		return errs
	}
	werr := o.j.Wait(last)

	o.mu.Lock()
	for _, a := range acc {
		delete(o.pending, a.rec.ID)
		d := o.dev(a.rec.Device)
		d.live.pending--
		if werr != nil {
			errs[a.i] = o.journalErr(werr)
			continue
		}
		o.applyAdd(a.rec)
	}
	o.rearm()
	o.startSendsLocked()
	o.unlock()
	return errs
}

func (o *Outbox) journalErr(err error) error {
	if errors.Is(err, journal.ErrClosed) {
		return ErrClosed
	}
	if errors.Is(err, ErrJournal) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrJournal, err)
}

// applyAdd puts a durable add into the table and coalesces: of the never-sent commands for
// one person on one device, only the latest stays.
func (o *Outbox) applyAdd(r *record) {
	d := o.dev(r.Device)
	prev := d.scheduledFor(r.Person)
	if err := o.t.apply(r); err != nil {
		return
	}
	it := o.t.items.get(r.ID)
	if it == nil || it.status != Scheduled {
		return
	}
	// Only a command never sent is superseded (docs/design.md "Coalescing"). One that was sent
	// and waits for its retry may still be working in the terminal, whose late ack would
	// come after the next command had already been sent: two in flight for the terminal.
	// It is left to finish; the later command follows it (the last one still wins).
	if r.Person != "" && prev != nil && prev.status == Scheduled && prev.tries == 0 {
		older, later := prev, it
		if prev.ord > it.ord {
			older, later = it, prev
		}
		// A command that reports a result is not superseded by one that reports none: the
		// back office would get "superseded" by a message id it never sent. Both are sent,
		// in order; the later, built from the same desired whitelist, repeats the earlier.
		if o.t.noResult(older) || !o.t.noResult(later) {
			o.finishItem(older, Superseded, o.supersededBy(later.id()))
		}
	}
	if d.live.cfg == (DeviceConfig{}) {
		d.live.cfg = o.configs[d.id]
	}
	o.pump(d)
}

// supersededBy returns the error of a command superseded by the one with id later. It is
// built in o.errBuf and valid until the next call: finishItem encodes it into its record,
// and the table keeps a copy (setErr), so a supersede allocates no string of its own.
func (o *Outbox) supersededBy(later string) string {
	o.errBuf = append(append(o.errBuf[:0], "superseded by "...), later...)
	return unsafe.String(unsafe.SliceData(o.errBuf), len(o.errBuf))
}

// unfinished counts d's commands not yet finished, queries included: the bound of
// MaxQueuedPerDevice.
func (d *device) unfinished() int {
	n := len(d.queue) + d.live.pending + len(d.live.queries) + d.inflightTasks()
	if d.live.query != nil {
		n++
	}
	return n
}

// finishItem makes it terminal and queues its result.
func (o *Outbox) finishItem(it *item, st Status, reason string) { o.finishItemAck(it, st, reason, nil) }

// finishItemAck is finishItem with the terminal's ack that decided it (nil: none, or only
// its code and message are known), which a command without a result hands to NoResultDone.
func (o *Outbox) finishItemAck(it *item, st Status, reason string, a *face.Ack) {
	d := it.dev
	if o.noResultDone != nil && o.t.noResult(it) {
		o.noResultOutcome(it, st, reason, a)
	}
	if d.live.payItem == it { // done with: only RetryFailed sends it again, reading it anew
		d.live.payItem, d.live.pay = nil, nil
	}
	seq := o.emit(&record{Kind: kindFinish, ID: it.id(), Status: uint8(st), Err: reason, Done: o.now()})
	if n := len(o.t.results); n > 0 && o.t.results[n-1].it == it {
		o.t.results[n-1].seq = seq
	}
	switch st {
	case Succeeded:
		d.live.c.succeeded++
	case Failed:
		d.live.c.failed++
	case Superseded:
		d.live.c.superseded++
	case Expired:
		d.live.c.expired++
	}
	o.signalResults()
}

func (o *Outbox) signalResults() {
	select {
	case o.resultsC <- struct{}{}:
	default:
	}
}

// Ack reports a device's answer to a command. Code 0 is success; any other code is a refusal
// and fails the command at once (protocol v1: "non-zero: the terminal refused"). An ack also
// shows the device is online. An ack for an unknown or finished message is ignored (a
// second ack for a resent command).
func (o *Outbox) Ack(deviceID, messageID string, code int, message string) {
	o.ack(deviceID, messageID, code, message, nil)
}

// AckMessage is Ack with the terminal's whole ack, as the device link decoded it: the ack
// of a Query goes to its Done with what it carries (a ListPersons page), and any other
// ack is handled as Ack handles it. Passing the ack costs an ordinary ack nothing: it is
// copied only for a pending query's ack.
func (o *Outbox) AckMessage(deviceID string, a face.Ack) {
	o.ack(deviceID, a.MessageID, a.Code, a.Message, &a)
}

// ack is Ack and AckMessage; a is the whole ack, or nil when only its id, code and message
// are known.
func (o *Outbox) ack(deviceID, messageID string, code int, message string, a *face.Ack) {
	o.mu.Lock()
	defer o.unlock()
	if o.closed {
		return
	}
	now := o.now()
	d := o.dev(deviceID)
	d.live.lastSeen, d.live.lastAck, d.live.down = now, now, false
	if len(o.queries) > 0 {
		if q := o.queries[messageID]; q != nil && q.dev == d {
			if a == nil {
				a = &face.Ack{MessageID: messageID, Code: code, Message: message}
			}
			o.ackQuery(q, a)
		}
	}
	if b := d.live.batch; b != nil && b.id == messageID && o.Err() == nil {
		if a == nil {
			a = &face.Ack{MessageID: messageID, Code: code, Message: message}
		}
		o.batchAcked(d, b, a) // batch.go
	}
	it := o.t.items.get(messageID)
	if o.faces != nil {
		it = o.faceAckItem(d, it, messageID)
	}
	if it != nil && it.dev == d && !it.status.Terminal() && o.Err() == nil {
		// A Scheduled one was acked late, after its ack timeout: it arrived all the same.
		if a == nil && o.noResultDone != nil && o.t.noResult(it) {
			a = &face.Ack{MessageID: messageID, Code: code, Message: message}
		}
		if o.acked != nil && !o.t.noResult(it) {
			o.noteAcked(it, code)
		}
		switch again, reason := false, ""; {
		case code == 0:
			d.live.failures, d.live.trips, d.live.breakerUntil = 0, 0, 0
			o.finishItemAck(it, Succeeded, "", a)
		case code == face.CodeFaceMissing && o.faces != nil:
			// protocol v2: the face first, then the command again, without spending the try.
			if again, reason = o.faceMissing(d, it); !again {
				if reason == "" {
					reason = fmt.Sprintf("refused by the device: code %d: %s", code, message)
				}
				o.finishItemAck(it, Failed, reason, a)
			}
		case code == face.CodeCapacity:
			o.finishItemAck(it, Failed, "capacity", a)
		default:
			o.finishItemAck(it, Failed, fmt.Sprintf("refused by the device: code %d: %s", code, message), a)
		}
	}
	o.pump(d)
	o.touch(d)
	o.rearm()
	o.startSendsLocked()
}

// ackedCommand is a command an ack finished, for unlock to hand to Options.Acked.
type ackedCommand struct {
	cmd  Command
	code int
}

// noteAcked queues Options.Acked's call for it, which an ack with code is about to
// finish. Its payload is the one kept from its last send, or read again (a late ack of a
// command sent before a restart); a payload that cannot be read is passed as nil.
func (o *Outbox) noteAcked(it *item, code int) {
	d := it.dev
	var payload []byte
	if d.live.payItem == it {
		payload = d.live.pay
	} else if p, err := o.t.payload(it); err == nil {
		payload = p
	}
	o.ackedCmds = append(o.ackedCmds, ackedCommand{code: code, cmd: Command{MessageID: it.id(), TaskID: it.task(),
		DeviceID: d.id, Op: o.t.opOf(it), PersonID: it.person(), Payload: payload}})
}

// Heartbeat reports that a device is alive: it is online for HeartbeatTimeout from now.
func (o *Outbox) Heartbeat(deviceID string) {
	o.seen(deviceID, false)
}

// LinkUp reports that the transport to a device is up. It makes a device without
// heartbeats (DeviceConfig.NoHeartbeat) available; others still wait for a heartbeat.
func (o *Outbox) LinkUp(deviceID string) {
	o.mu.Lock()
	defer o.unlock()
	if o.closed {
		return
	}
	d := o.dev(deviceID)
	d.live.down = false
	o.pump(d)
	o.touch(d)
	o.rearm()
	o.startSendsLocked()
}

// LinkDown reports that the transport to a device is down: the device is offline at once,
// and a command in flight goes back to the head of its queue without spending a try.
func (o *Outbox) LinkDown(deviceID string) {
	o.seen(deviceID, true)
}

func (o *Outbox) seen(deviceID string, down bool) {
	o.mu.Lock()
	defer o.unlock()
	if o.closed {
		return
	}
	d := o.dev(deviceID)
	if down {
		d.live.down, d.live.lastSeen = true, 0
		if d.inflight != nil && o.Err() == nil {
			o.requeueInflight(d)
		}
		if q := d.live.query; q != nil {
			o.requeueQuery(q)
		}
	} else {
		d.live.down, d.live.lastSeen = false, o.now()
	}
	o.pump(d)
	o.touch(d)
	o.rearm()
	o.startSendsLocked()
}
