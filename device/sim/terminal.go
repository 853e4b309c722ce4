package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Stats counts what one terminal saw and did.
type Stats struct {
	DeviceID    string
	Online      bool
	Persons     int
	Received    int // commands that reached the terminal while online
	Duplicates  int // of those, resends of a messageId already seen
	Acked       int // acks sent (success or refusal)
	Refused     int // acks sent with a non-zero code
	AcksLost    int // acks the terminal "sent" into the void
	Crashes     int
	Offline     int // offline periods (crashes included)
	Dropped     int // commands that arrived while offline
	Garbage     int // garbage messages or byte runs sent
	Heartbeats  int
	Violations  int // strict mode
	Lists       int // ListPersons commands answered with a page (repeats not counted)
	Faces       int // faces held (complete and checked)
	FaceBytes   int // their bytes
	FaceChunks  int // PutFace commands applied (repeats not counted)
	FaceRejects int // PutFace answered FaceHashCode: past the size or a hash mismatch
	FaceCuts    int // face transfers cut short (SetCutFace)
	Batches     int // AddPersons commands applied (repeats not counted)
}

// link is what a terminal needs from its transport.
type link interface {
	sendAck(a *face.Ack) error
	sendHeartbeat(h *face.Heartbeat) error
	sendGarbage(r *rand.Rand) error
	// crash is called when the terminal crashes mid-command (serial: write a cut frame).
	crash(r *rand.Rand)
	setOnline(up bool)
	close()
}

// pending is a command received and not yet answered.
type pending struct {
	cmd     face.Command
	epoch   uint64 // the terminal's life it belongs to; a crash starts a new one
	refuse  bool
	loseAck bool
}

// Terminal is one simulated face terminal. Its methods are safe for concurrent use.
type Terminal struct {
	id   string
	opts *Options
	tr   link
	g    *group

	mu         sync.Mutex
	rng        *rand.Rand
	online     bool
	epoch      uint64
	persons    map[string]face.Person
	ids        []string    // the keys of persons in bytewise order: ListPersons' pages
	digest     face.Digest // of persons, kept by XOR on every change
	protocol   int         // 1 or 2
	serial     string
	generation int // replacements + 1: numbers the default serial
	capacity   int // 0: no limit
	ackLatency Latency
	pending    []*pending
	results    map[string]int // messageId → the code answered, so a resend gets the same answer
	stats      Stats
	violations []error
	refuseNext []refusal // RefuseNext's: each refuses the first matching new command

	batch        int                      // AddPersons' most persons; 0: no batches
	batchResults map[string][]face.Result // AddPersons messageId → its results, for repeats
	faces        map[string][]byte        // the faces held, by sha256
	receiving    receiving                // the face being received
	cutFace      int                      // SetCutFace's n; 0: no cut
	cutEvery     int                      // SetCutFaceEvery's n; 0: no cuts
	cut          map[string]bool          // the faces whose transfer was cut already
}

// refusal is a command RefuseNext arms the terminal to refuse.
type refusal struct {
	op     face.Op
	person string
}

func newTerminal(id string, index int, opts *Options, g *group) *Terminal {
	return &Terminal{
		id: id, opts: opts, g: g,
		rng:        rand.New(rand.NewPCG(opts.Seed, uint64(index)+1)),
		online:     true,
		persons:    make(map[string]face.Person),
		results:    make(map[string]int),
		protocol:   opts.Protocol,
		generation: 1,
		serial:     defaultSerial(id, 1),
		capacity:   opts.Capacity,
		ackLatency: opts.AckLatency,

		batch:        min(opts.Batch, face.MaxBatch),
		batchResults: make(map[string][]face.Result),
		faces:        make(map[string][]byte),
		cutFace:      opts.CutFace,
		cut:          make(map[string]bool),
	}
}

// ID returns the terminal's device id.
func (t *Terminal) ID() string { return t.id }

// Persons returns the whitelist, sorted by person id.
func (t *Terminal) Persons() []face.Person {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]face.Person, 0, len(t.persons))
	for _, p := range t.persons {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Stats returns a snapshot of the counters.
func (t *Terminal) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.stats
	s.DeviceID, s.Online, s.Persons = t.id, t.online, len(t.persons)
	s.Faces = len(t.faces)
	for _, f := range t.faces {
		s.FaceBytes += len(f)
	}
	return s
}

// Violations returns the strict-mode violations seen so far.
func (t *Terminal) Violations() []error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]error(nil), t.violations...)
}

// receive is called by the transport for every command that arrives, in arrival order.
func (t *Terminal) receive(cmd face.Command) {
	if t.opts.OnCommand != nil {
		t.opts.OnCommand(t.id, cmd)
	}
	t.mu.Lock()
	if !t.online {
		t.stats.Dropped++
		t.mu.Unlock()
		return
	}
	t.stats.Received++
	_, seen := t.results[cmd.MessageID]
	for _, p := range t.pending {
		if p.cmd.MessageID == cmd.MessageID {
			seen = true
		}
	}
	if seen {
		t.stats.Duplicates++
	}
	var violation error
	if t.opts.Strict {
		// protocol: one command in flight per terminal. A command arriving while another
		// messageId is unanswered is a violation, unless it is a resend of that very command
		// (same messageId, same content): the agent's retry timer may fire before a slow ack.
		// See "Strict mode" in doc.go.
		for _, p := range t.pending {
			if _, answered := t.results[p.cmd.MessageID]; answered {
				continue // a late copy of an answered messageId: its first ack went out
			}
			if !p.cmd.Equal(&cmd) {
				violation = fmt.Errorf("strict: %s received %s (%s person %s) while %s is unacked",
					t.id, cmd.MessageID, cmd.Op, cmd.Person.ID, p.cmd.MessageID)
				t.stats.Violations++
				t.violations = append(t.violations, violation)
				break
			}
		}
	}
	r := t.rng
	if t.opts.CrashRate > 0 && r.Float64() < t.opts.CrashRate {
		_, answered := t.results[cmd.MessageID]
		applied := r.IntN(2) == 0 && !answered // a duplicate is never executed again
		if applied {
			t.execute(&cmd, &face.Ack{})
		}
		t.mu.Unlock()
		t.opts.Logger.Info("terminal crashed mid-command", "device", t.id, "messageId", cmd.MessageID, "applied", applied)
		t.crashNow()
		t.report(violation)
		return
	}
	p := &pending{cmd: cmd, epoch: t.epoch,
		refuse:  t.opts.RefuseRate > 0 && r.Float64() < t.opts.RefuseRate,
		loseAck: t.opts.AckLoss > 0 && r.Float64() < t.opts.AckLoss}
	if _, answered := t.results[cmd.MessageID]; !answered && !seen {
		for i, x := range t.refuseNext {
			if x.op == cmd.Op && x.person == cmd.Person.ID {
				p.refuse = true
				t.refuseNext = append(t.refuseNext[:i], t.refuseNext[i+1:]...)
				break
			}
		}
	}
	t.pending = append(t.pending, p)
	delay := t.ackLatency.Sample(r)
	switch cmd.Op {
	case face.AddPerson:
		delay += t.opts.PersonTime
	case face.AddPersons:
		delay += time.Duration(len(cmd.Persons)) * t.opts.PersonTime
	}
	t.mu.Unlock()
	t.report(violation)
	if delay <= 0 {
		// Not inline: receive may run in the transport's delivery callback, which must not
		// wait on a publish.
		t.g.run(func() { t.answer(p) })
		return
	}
	t.after(delay, func() { t.answer(p) })
}

func (t *Terminal) report(violation error) {
	if violation == nil {
		return
	}
	t.opts.Logger.Error("one-in-flight violated", "device", t.id, "err", violation)
	if t.opts.OnViolation != nil {
		t.opts.OnViolation(t.id, violation)
	}
}

// answer acks p after its latency: applies it (or refuses it), forgets it, sends the ack.
func (t *Terminal) answer(p *pending) {
	t.mu.Lock()
	found := false
	for i, q := range t.pending {
		if q == p {
			t.pending = append(t.pending[:i], t.pending[i+1:]...)
			found = true
			break
		}
	}
	if !found || p.epoch != t.epoch || !t.online {
		t.mu.Unlock() // crashed or went offline since: the command is forgotten
		return
	}
	ack := face.Ack{MessageID: p.cmd.MessageID}
	code, answered := t.results[p.cmd.MessageID]
	if answered {
		t.reanswer(&p.cmd, code, &ack)
	} else {
		if p.refuse {
			code = t.opts.RefuseCode
		} else {
			code = t.execute(&p.cmd, &ack)
		}
		if code == cutCode {
			// Cut mid-face: it kept part of the chunk and dies before answering; the
			// messageId stays unanswered, so a resend is answered with the have it kept.
			t.mu.Unlock()
			t.opts.Logger.Info("terminal cut a face transfer", "device", t.id, "messageId", p.cmd.MessageID, "have", ack.Have)
			t.crashNow()
			return
		}
		t.results[p.cmd.MessageID] = code
	}
	ack.Code = code
	if code == 0 && p.cmd.Op == face.ListPersons {
		// A repeat reads the list again: reading has nothing to apply twice.
		t.page(p.cmd, &ack)
	}
	// A repeated messageId is a duplicate: acked again with the first answer's code, never
	// executed again (docs/protocol.md "Message ids and duplicates"). Re-executing a late copy of an
	// AddPerson could otherwise undo the DeletePerson the agent sent after the first ack.
	if p.loseAck {
		t.stats.AcksLost++
		t.mu.Unlock()
		return
	}
	t.stats.Acked++
	if code != 0 {
		t.stats.Refused++
	}
	garbage := t.opts.GarbageRate > 0 && t.rng.Float64() < t.opts.GarbageRate
	if garbage {
		t.stats.Garbage++
	}
	t.mu.Unlock()
	if garbage {
		t.send("garbage", t.tr.sendGarbage(t.rngLocked()))
	}
	switch code {
	case 0:
	case UnknownOpCode:
		ack.Message = fmt.Sprintf("unknown op %.64q", string(p.cmd.Op))
	case CapacityCode:
		ack.Message = "capacity exceeded"
	case FaceMissingCode:
		ack.Message = "face missing"
	case FaceHashCode:
		ack.Message = "face discarded: past its size or hash mismatch"
	case BatchTooLargeCode:
		ack.Message = "batch too large"
	default:
		ack.Message = "refused by facesim"
	}
	t.send("ack", t.tr.sendAck(&ack))
}

// rngLocked returns a generator for the transport; the terminal's own stays under mu.
func (t *Terminal) rngLocked() *rand.Rand {
	t.mu.Lock()
	defer t.mu.Unlock()
	return rand.New(rand.NewPCG(t.rng.Uint64(), t.rng.Uint64()))
}

func (t *Terminal) send(what string, err error) {
	if err != nil {
		t.opts.Logger.Debug("terminal send failed", "device", t.id, "what", what, "err", err)
	}
}

// heartbeat sends one heartbeat if online.
func (t *Terminal) heartbeat() {
	t.mu.Lock()
	if !t.online {
		t.mu.Unlock()
		return
	}
	t.stats.Heartbeats++
	h := face.Heartbeat{DeviceID: t.id, Time: time.Now().UTC().Format(time.RFC3339),
		Firmware: t.opts.Firmware, Persons: len(t.persons)}
	if t.protocol >= 2 {
		h.Protocol, h.Serial, h.Digest, h.Capacity, h.Batch = 2, t.serial, t.digest.String(), t.capacity, t.batch
	}
	t.mu.Unlock()
	t.send("heartbeat", t.tr.sendHeartbeat(&h))
}

// crashNow takes the terminal down for CrashDowntime, forgetting what is pending.
func (t *Terminal) crashNow() {
	t.mu.Lock()
	t.stats.Crashes++
	r := rand.New(rand.NewPCG(t.rng.Uint64(), 0))
	t.mu.Unlock()
	t.tr.crash(r)
	t.offlineFor(t.opts.CrashDowntime)
}

// offlineFor takes the terminal offline now and back online after d.
func (t *Terminal) offlineFor(d time.Duration) {
	t.mu.Lock()
	if !t.online {
		t.mu.Unlock()
		return
	}
	t.online = false
	t.epoch++
	t.pending = nil
	t.stats.Offline++
	t.mu.Unlock()
	t.tr.setOnline(false)
	t.after(d, func() {
		t.mu.Lock()
		t.online = true
		t.mu.Unlock()
		t.tr.setOnline(true)
		t.heartbeat() // a terminal announces itself when it comes back
	})
}

// GoOffline takes the terminal offline now for d, as Options.OfflineEvery's periods do: it
// hears nothing (MQTT: it disconnects; serial: it discards what arrives), sends nothing and
// forgets the commands not yet acked; once d has passed it is back and sends a heartbeat. A
// terminal already offline stays as it is.
func (t *Terminal) GoOffline(d time.Duration) { t.offlineFor(d) }

// after runs f after d unless the fleet closes first.
func (t *Terminal) after(d time.Duration, f func()) {
	// The delay counts from now, not from when the goroutine gets to run: under load that
	// start can take milliseconds, and a terminal that acks "after 20 ms" must not take 22.
	due := time.Now().Add(d)
	t.g.run(func() {
		tm := time.NewTimer(time.Until(due))
		defer tm.Stop()
		select {
		case <-tm.C:
			f()
		case <-t.g.done:
		}
	})
}

// loops runs the heartbeat ticker and the offline schedule until the fleet closes.
func (t *Terminal) loops() {
	if t.opts.HeartbeatInterval > 0 {
		t.g.run(func() {
			tick := time.NewTicker(t.opts.HeartbeatInterval)
			defer tick.Stop()
			t.heartbeat()
			for {
				select {
				case <-tick.C:
					t.heartbeat()
				case <-t.g.done:
					return
				}
			}
		})
	}
	if t.opts.OfflineEvery > 0 && t.opts.OfflineFor > 0 {
		t.g.run(func() {
			for {
				t.mu.Lock()
				wait := time.Duration(t.rng.ExpFloat64() * float64(t.opts.OfflineEvery))
				t.mu.Unlock()
				tm := time.NewTimer(wait)
				select {
				case <-tm.C:
					t.opts.Logger.Info("terminal going offline", "device", t.id, "for", t.opts.OfflineFor)
					t.offlineFor(t.opts.OfflineFor)
				case <-t.g.done:
					tm.Stop()
					return
				}
			}
		})
	}
}

// group owns goroutines: none starts once closing began, close waits for all. run and
// enter (every command a terminal gets) share mu's read lock, so that 64 terminals do not
// queue on it; beginClose takes the write lock, after which no Add can race with Wait.
type group struct {
	mu     sync.RWMutex
	closed bool
	wg     sync.WaitGroup
	done   chan struct{}
	// ctx ends when closing begins: the context of the group's requests (publishes).
	ctx    context.Context
	cancel context.CancelFunc
}

func newGroup() *group {
	ctx, cancel := context.WithCancel(context.Background())
	return &group{done: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// run starts f in a goroutine unless the group is closing; it reports whether it did.
func (g *group) run(f func()) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// enter counts the caller's own goroutine as one of the group's (for callbacks from a
// library); false once closing. Pair with exit.
func (g *group) enter() bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *group) exit() { g.wg.Done() }

// beginClose stops new goroutines and signals done; wait for the rest with g.wg.Wait.
func (g *group) beginClose() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		close(g.done)
		g.cancel()
	}
}
