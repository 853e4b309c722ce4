package outbox

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/faces"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// TestPropertyRandomHistoriesBatches is TestPropertyRandomHistories for protocol v2's
// batches and face step: its tasks are AddPerson commands (most with a face held in a
// real face store, some without one, a few with a face the gateway lacks) and
// DeletePersons, a tenth of them with an expiry and a sixth without a result (a whitelist
// sync's corrections, which tasks go before), for terminals that announce batch sizes
// (two of them, changing with their heartbeats), one v2 terminal without batches and one
// v1 terminal. A scripted terminal takes the faces chunk by chunk and answers batches and commands with random
// codes (0, a refusal, 21, 23), chunks with the have it holds (a cut tail, a chunk sent
// twice) and now and then 22, 23 or a refusal; acks are lost, repeated and late, links go
// down (a chunk cut part way), devices pause, results are reported, the journal compacts
// and the outbox restarts. After every step it checks TestPropertyRandomHistories'
// invariants (one command in flight per device, a batch or a chunk being one), that the
// command in flight is the one last sent, and what each answer did: a task refused inside
// a batch fails alone, its neighbours succeed, 21 does not spend a try, 23 fails with
// reason "capacity", a face resumes from the have acked; every restart checks that
// replaying the journal reproduces the table. Finally it drains everything and checks
// that every accepted task got exactly one result, and every command without a result
// its outcome (once per outbox opened).
//
// Sizes: 6 histories of 400 steps, 2 with -short, 120 of 800 under FACEAGENT_SOAK=1.
// Repeat a failure with OUTBOX_BATCHPROP_SEED=<seed> (the history seed the failure names
// runs first), with FACEAGENT_SOAK=1 too if the failure came from a soak run (its
// histories are longer).
func TestPropertyRandomHistoriesBatches(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OUTBOX_BATCHPROP_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("OUTBOX_BATCHPROP_SEED=%q: %v", s, err)
		}
	}
	histories, steps := 6, 400
	switch {
	case os.Getenv("FACEAGENT_SOAK") == "1":
		histories, steps = 120, 800
	case testing.Short():
		histories = 2
	}
	t.Logf("seed %d (OUTBOX_BATCHPROP_SEED to repeat), %d histories of %d steps", seed, histories, steps)
	var all propCoverage
	for h := range histories {
		c := runBatchHistory(t, seed+uint64(h), steps)
		all.batches += c.batches
		all.batchPersons += c.batchPersons
		all.chunks += c.chunks
		all.singles += c.singles
		all.refusedInBatch += c.refusedInBatch
		all.missing += c.missing
		all.capacity += c.capacity
		all.resumed += c.resumed
		all.chunkTwice += c.chunkTwice
		all.hash22 += c.hash22
		all.hashTwice += c.hashTwice
	}
	t.Logf("answered %+v", all)
	if histories >= 6 && (all.batches == 0 || all.chunks == 0 || all.singles == 0 || all.refusedInBatch == 0 || all.missing == 0 ||
		all.capacity == 0 || all.resumed == 0 || all.chunkTwice == 0 || all.hash22 == 0 || all.hashTwice == 0) {
		t.Fatalf("the histories missed a case: %+v", all)
	}
}

// wireCmd is the command a device has in flight, as the outbox holds it.
type wireCmd struct {
	kind    string // "chunk", "batch" or "single"
	id      string // the message id it went under
	payload []byte
	cmd     face.Command
	items   []*item  // the tasks it carries (none for a chunk)
	tries   []uint16 // their tries
	forItem *item    // a chunk: the task its face is for; nil when the transfer was forgotten
	xferSHA string   // the face being sent
}

// batchHistory is one history of TestPropertyRandomHistoriesBatches: the outbox, the
// terminals, and what the test knows the outbox must hold.
type batchHistory struct {
	t        *testing.T
	seed     uint64
	step     int
	rng      *rand.Rand
	e        *env
	terms    map[string]*propTerminal
	devices  []string
	pool     []string // faces in the store, by SHA-256
	absent   string   // a face the store does not hold
	accepted map[string]bool
	payloads map[string]string
	expires  map[string]time.Time // the tasks taken in with an expiry
	// Commands without a result (Task.NoResult) taken in, and the outcomes NoResultDone
	// told of: once each per outbox opened, its lifetime.
	noResult map[string]bool
	outcomes struct {
		sync.Mutex
		life, all map[string]int
	}
	results map[string]Result
	// 21 answers the outbox took for a task since the last restart, in batches and sent
	// alone (ack counts them before each ack): the outbox counts them in memory.
	batchMiss, singleMiss map[string]int
	lastSent              map[string]Command
	nextID                int
	seen                  propCoverage
}

// propCoverage counts what a history exercised: the test fails when its histories
// together miss one of them (the test would check nothing there).
type propCoverage struct {
	batches, batchPersons, chunks, singles int
	refusedInBatch, missing, capacity      int
	resumed, chunkTwice, hash22, hashTwice int
}

func runBatchHistory(t *testing.T, seed uint64, steps int) propCoverage {
	rng := rand.New(rand.NewPCG(seed, 11))
	store, err := faces.Open(t.TempDir(), faces.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	h := &batchHistory{t: t, seed: seed, rng: rng, accepted: map[string]bool{}, payloads: map[string]string{}, expires: map[string]time.Time{},
		noResult: map[string]bool{},
		results:  map[string]Result{}, batchMiss: map[string]int{}, singleMiss: map[string]int{},
		lastSent: map[string]Command{}}
	for i := range 5 {
		sha, data := testFace(200+rng.IntN(4000), seed+uint64(i))
		sum, _ := faces.ParseSum(sha)
		if err := store.Put(sum, int64(len(data)), bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		h.pool = append(h.pool, sha)
	}
	h.absent, _ = testFace(300, seed+99)
	h.terms = map[string]*propTerminal{
		"b4": {v2: true, batches: []int{4, 4, 8, 0}}, // serial-like: small chunks and commands
		"b2": {v2: true, batches: []int{2, 3, 3, 1}}, // MQTT-like: chunks above 4 KiB are probed
		"s2": {v2: true, batches: []int{0}},          // v2 without batches: the face step alone
		"v1": {batches: []int{0}},                    // v1: neither
	}
	for id, pt := range h.terms {
		pt.id = id
		pt.forget()
	}
	h.devices = []string{"b4", "b2", "s2", "v1"}
	// Odd seeds run with a non-blocking sender (sends made inline: the test sees each
	// one when the call that decided it returns), even ones with a goroutine per send.
	h.e = newEnvSender(t, Options{
		Journal: journal.Options{Sync: journal.SyncNone, SegmentSize: 8 << 10},
		Settings: Settings{
			RetryInterval: time.Second, MaxTries: 3, HeartbeatTimeout: 10 * time.Second,
			MaxBackoff: 4 * time.Second, BreakerThreshold: 4, BreakerCooldown: 5 * time.Second,
			FailedRetention: time.Minute, MaxBatch: 6,
		},
		Devices: map[string]DeviceConfig{
			"b4": {FaceChunk: 1024, MaxCommandBytes: 700},
			"b2": {FaceChunk: 6000},
			"s2": {FaceChunk: 2048},
		},
		Faces:              store,
		NoResultDone:       h.noResultDone,
		MaxQueuedPerDevice: 10, MaxQueued: 40, CompactAfter: 40, Seed: seed,
		spillMinDead: 24, spillEager: true,
	}, seed%2 == 1)
	e := h.e
	weighted := []string{"b4", "b4", "b2", "b2", "s2", "v1"} // most steps for the batching terminals

	for h.step = range steps {
		dev := weighted[rng.IntN(len(weighted))]
		switch op := rng.IntN(200); {
		case op < 44:
			for range 1 + rng.IntN(4) { // consecutive adds make batches
				h.enqueue(dev)
			}
		case op < 100:
			for range 1 + rng.IntN(3) {
				h.answer(dev, false)
			}
		case op < 106:
			h.lateAck(dev)
		case op < 144:
			h.heartbeat(dev)
		case op < 162:
			// Terminals mostly answer before their ack timeout; the others time out.
			for _, d := range h.devices {
				if rng.IntN(3) != 0 {
					h.answer(d, false)
				}
			}
			e.clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		case op < 167:
			h.linkDown(dev)
		case op < 173:
			if rng.IntN(3) == 0 { // paused a third of the time
				e.o.Pause(dev)
			} else {
				e.o.Resume(dev)
			}
		case op < 186:
			h.report(rng.IntN(16))
		case op < 197:
			h.hashTwice(dev)
		default:
			h.restart()
		}
		h.check()
	}

	// Drain: every device online and its terminal answering well, until nothing is
	// unfinished.
	for _, d := range h.devices {
		e.o.Resume(d)
	}
	for i := 0; e.o.Unfinished() > 0; i++ {
		if i > 2000 {
			t.Fatalf("seed %d: could not drain: %+v\n%s", seed, e.o.Stats(), h.dump())
		}
		for _, d := range h.devices {
			h.heartbeat(d)
			for range 8 {
				h.answer(d, true)
			}
		}
		e.clock.Advance(2 * time.Second)
		h.check()
	}
	h.report(1 << 20)
	for id := range h.accepted {
		if _, ok := h.results[id]; !ok {
			t.Fatalf("seed %d: accepted task %s has no result", seed, id)
		}
	}
	h.outcomes.Lock()
	for id := range h.noResult {
		if h.outcomes.all[id] == 0 {
			t.Fatalf("seed %d: command without a result %s: no outcome", seed, id)
		}
	}
	h.outcomes.Unlock()
	// Once the held failures are past their retention and the chunks left behind by tasks
	// that finished meanwhile got their answer or their last try, nothing waits for a
	// deadline: an idle outbox arms no timer.
	e.clock.Advance(2 * time.Minute)
	if n := e.clock.armed(); n != 0 || e.o.Stats().FailedHeld != 0 {
		t.Fatalf("seed %d: idle outbox: %d timers armed, stats %+v", seed, n, e.o.Stats())
	}
	snaps := e.o.j.Stats().Snapshots
	checkReplay(t, e, seed, steps)
	e.open()
	if r := e.o.j.Recovery(); snaps == 0 && r.Snapshot == "" {
		t.Fatalf("seed %d: the history never compacted; the test misses snapshots", seed)
	}
	return h.seen
}

func (h *batchHistory) fail(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("seed %d step %d: %s", h.seed, h.step, fmt.Sprintf(format, args...))
}

func (h *batchHistory) dump() string {
	h.e.o.mu.Lock()
	defer h.e.o.mu.Unlock()
	return h.e.o.t.dump()
}

// enqueue takes in an AddPerson (most with a face) or a DeletePerson for dev, a tenth
// of them with an expiry, some without a result (a whitelist sync's corrections); now and
// then it redelivers an earlier message id.
func (h *batchHistory) enqueue(dev string) {
	id := fmt.Sprintf("m%d", h.nextID)
	if h.rng.IntN(12) == 0 && h.nextID > 0 {
		id = fmt.Sprintf("m%d", h.rng.IntN(h.nextID))
	} else {
		h.nextID++
	}
	person := fmt.Sprintf("p%d", h.rng.IntN(8))
	cmd := face.Command{MessageID: id, Op: face.AddPerson, Person: face.Person{ID: person, Name: "N " + person}}
	switch r := h.rng.IntN(100); {
	case r < 12:
		cmd.Op = face.DeletePerson
		cmd.Person.Name = ""
	case r < 14:
		cmd.Person.Face = face.FaceRef{SHA256: h.absent, Size: 300, Kind: face.FaceTemplate}
	case r < 75:
		cmd.Person.Face = face.FaceRef{SHA256: h.pool[h.rng.IntN(len(h.pool))], Kind: face.FaceTemplate}
	}
	payload, err := cmd.AppendMsg(nil)
	if err != nil {
		h.t.Fatal(err)
	}
	tk := Task{MessageID: id, TaskID: "t" + id, DeviceID: dev, Op: string(cmd.Op), PersonID: person, Payload: payload,
		NoResult: h.rng.IntN(6) == 0}
	if h.rng.IntN(10) == 0 { // it expires in a batch's queue, or before its retry
		tk.ExpiresAt = h.e.clock.Now().Add(time.Duration(h.rng.IntN(20_000)) * time.Millisecond)
		h.expires[id] = tk.ExpiresAt
	}
	err = h.e.o.Enqueue(tk)
	switch {
	case err == nil:
		if h.accepted[id] || h.noResult[id] {
			h.fail("duplicate %s accepted twice", id)
		}
		if tk.NoResult {
			h.noResult[id] = true
		} else {
			h.accepted[id] = true
		}
		h.payloads[id] = string(payload)
	case errors.Is(err, ErrDuplicate), errors.Is(err, ErrFull), errors.Is(err, ErrDeviceFull):
	default:
		h.fail("enqueue: %v", err)
	}
}

// current returns what dev has in flight, as the outbox holds it.
func (h *batchHistory) current(dev string) (wireCmd, bool) {
	o := h.e.o
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.t.devices[dev]
	var w wireCmd
	switch {
	case d == nil:
		return w, false
	case d.live.query != nil:
		q := d.live.query
		w = wireCmd{kind: "chunk", id: q.id, payload: q.payload}
		if fs := d.live.faces; fs != nil {
			w.forItem, w.xferSHA = fs.xfer.forItem, fs.xfer.sha
		}
	case d.inflight == nil:
		return w, false
	case d.live.batch != nil:
		b := d.live.batch
		w = wireCmd{kind: "batch", id: b.id, payload: b.payload, items: d.inflightItems()}
	default:
		it := d.inflight
		p, err := o.t.payload(it)
		if err != nil {
			h.fail("payload of %s in flight: %v", it.id(), err)
		}
		w = wireCmd{kind: "single", id: o.wireID(d, it), payload: p, items: []*item{it}}
	}
	if _, err := w.cmd.UnmarshalMsg(w.payload); err != nil {
		h.fail("%s %s in flight on %s: payload: %v", w.kind, w.id, dev, err)
	}
	if w.kind == "chunk" && w.xferSHA != w.cmd.Face.SHA256 {
		w.forItem = nil // the transfer was forgotten (a 21, a reset) while the chunk was out
	}
	for _, it := range w.items {
		w.tries = append(w.tries, it.tries)
	}
	return w, true
}

// noResultDone is Options.NoResultDone: a command without a result is told of once.
func (h *batchHistory) noResultDone(dev, id string, a face.Ack, err error) {
	h.outcomes.Lock()
	defer h.outcomes.Unlock()
	if h.outcomes.life == nil {
		h.outcomes.life, h.outcomes.all = map[string]int{}, map[string]int{}
	}
	if h.outcomes.life[id]++; h.outcomes.life[id] > 1 {
		h.t.Errorf("seed %d step %d: NoResultDone told of %s twice", h.seed, h.step, id)
	}
	h.outcomes.all[id]++
}

// gone reports whether it is a command without a result that finished: it left the
// table, and its outcome went to NoResultDone (its reason is not kept).
func (h *batchHistory) gone(it *item) bool {
	_, _, _, in := h.state(it)
	return !in && h.noResult[it.id()]
}

// expired reports whether st, the status of it, is Expired, as it may be once its expiry
// passed: whenever it is back in the queue, its turn finds it expired.
func (h *batchHistory) expired(it *item, st Status) bool {
	exp, ok := h.expires[it.id()]
	return st == Expired && ok && !h.e.clock.Now().Before(exp)
}

// state returns the status, tries and last error of it, and whether it is still in the
// table.
func (h *batchHistory) state(it *item) (Status, uint16, string, bool) {
	o := h.e.o
	o.mu.Lock()
	defer o.mu.Unlock()
	return it.status, it.tries, o.t.lastErr(it), o.t.items.get(it.id()) == it
}

// answer has dev's terminal answer the command in flight. good answers as a healthy
// terminal does (the drain); otherwise commands and acks are lost at random, and codes are
// drawn.
func (h *batchHistory) answer(dev string, good bool) {
	w, ok := h.current(dev)
	if !ok {
		return
	}
	pt := h.terms[dev]
	if !good && h.rng.IntN(12) == 0 {
		return // the command is lost on its way
	}
	var a face.Ack
	if old, ok := pt.answered[w.id]; ok && w.kind != "chunk" {
		a = old // a repeated id: answered from memory
	} else {
		switch w.kind {
		case "chunk":
			a = h.chunkAck(pt, &w, good)
		case "batch":
			a = h.batchAck(pt, &w, good)
		default:
			a = h.singleAck(pt, &w, good)
		}
		pt.remember(a)
	}
	if !good && h.rng.IntN(12) == 0 {
		return // the ack is lost on its way back
	}
	h.ack(dev, a)
	switch w.kind {
	case "chunk":
		h.seen.chunks++
		h.checkChunkAcked(dev, &w, a)
	case "batch":
		h.seen.batches++
		h.seen.batchPersons += len(w.items)
		h.checkBatchAcked(&w, a)
	default:
		h.seen.singles++
		h.checkSingleAcked(&w, a)
	}
	if !good && h.rng.IntN(8) == 0 {
		// The same ack again: the outbox ignores it.
		before := h.dump()
		h.e.o.AckMessage(dev, a) // not h.ack: it must change nothing, the 21 counts included
		if after := h.dump(); after != before {
			h.fail("a second ack of %s changed the table:\nbefore:\n%s\nafter:\n%s", w.id, before, after)
		}
	}
}

// ack passes the terminal's ack a to the outbox, and counts the 21 answers in it that
// the outbox will take: those for the tasks of the batch it waits an answer for (in
// flight, or waiting for its retry), or for a task sent alone that is not finished.
func (h *batchHistory) ack(dev string, a face.Ack) {
	o := h.e.o
	o.mu.Lock()
	if d := o.t.devices[dev]; d != nil {
		if b := d.live.batch; b != nil && b.id == a.MessageID && a.Code == 0 {
			for i, it := range b.items {
				code, ok := personResult(a.Results, b.persons[i].ID)
				if ok && code == face.CodeFaceMissing && o.t.items.get(it.id()) == it && it.dev == d && !it.status.Terminal() {
					h.batchMiss[it.id()]++
				}
			}
		}
		it := o.faceAckItem(d, o.t.items.get(a.MessageID), a.MessageID)
		if it != nil && it.dev == d && !it.status.Terminal() && a.Code == face.CodeFaceMissing {
			h.singleMiss[it.id()]++
		}
	}
	o.mu.Unlock()
	o.AckMessage(dev, a)
}

// lateAck repeats one of the acks dev's terminal gave before: the outbox ignores what it
// no longer waits for, and takes the answer of a command waiting for its retry.
func (h *batchHistory) lateAck(dev string) {
	pt := h.terms[dev]
	if len(pt.seen) == 0 {
		return
	}
	if a, ok := pt.answered[pt.seen[h.rng.IntN(len(pt.seen))]]; ok {
		h.ack(dev, a)
	}
}

// heartbeat is the terminal's heartbeat, with a batch size drawn from the device's; now
// and then the terminal was replaced (a new serial, nothing held).
func (h *batchHistory) heartbeat(dev string) {
	pt := h.terms[dev]
	hb := face.Heartbeat{DeviceID: dev, Serial: fmt.Sprintf("S%d", pt.serial), Persons: len(pt.persons)}
	if pt.v2 {
		if h.rng.IntN(60) == 0 {
			pt.serial++
			pt.forget()
			hb.Serial, hb.Persons = fmt.Sprintf("S%d", pt.serial), 0
		}
		hb.Protocol, hb.Digest, hb.Batch = 2, "0000000000000000", pt.batches[h.rng.IntN(len(pt.batches))]
	}
	h.e.o.TerminalHeartbeat(dev, hb)
}

// linkDown takes dev's link down; a chunk in flight may have reached the terminal in part.
func (h *batchHistory) linkDown(dev string) {
	if w, ok := h.current(dev); ok && w.kind == "chunk" && h.rng.IntN(2) == 0 {
		pt, c := h.terms[dev], w.cmd.Face
		if n := len(c.Data); n > 0 {
			part := c
			part.Data = c.Data[:h.rng.IntN(n)]
			if part.Offset+len(part.Data) < part.Size {
				pt.put(&part)
			}
		}
	}
	h.e.o.LinkDown(dev)
}

// report reports up to n results: each accepted task gets exactly one.
func (h *batchHistory) report(n int) {
	res, err := h.e.o.Results(n)
	if err != nil {
		h.t.Fatal(err)
	}
	var ids []string
	for _, r := range res {
		if prev, dup := h.results[r.MessageID]; dup {
			h.fail("second result for %s: %+v, after %+v", r.MessageID, r, prev)
		}
		if !h.accepted[r.MessageID] {
			h.fail("result for %s, never accepted", r.MessageID)
		}
		h.results[r.MessageID] = r
		ids = append(ids, r.MessageID)
	}
	if err := h.e.o.MarkReported(ids...); err != nil {
		h.t.Fatal(err)
	}
}

// restart closes the outbox, checks that its journal replays to the table it had, and
// opens it again: what it learned in memory (faces held, batch sizes, 21 rounds) is gone.
func (h *batchHistory) restart() {
	checkReplay(h.t, h.e, h.seed, h.step)
	h.outcomes.Lock()
	clear(h.outcomes.life) // its asker starts over
	h.outcomes.Unlock()
	h.e.open()
	clear(h.batchMiss)
	clear(h.singleMiss)
	clear(h.lastSent)
}

// check runs the invariants, and with a non-blocking sender checks that what each device
// has in flight is the command it was last sent.
func (h *batchHistory) check() {
	h.t.Helper()
	checkInvariants(h.t, h.e, h.seed, h.step, h.accepted, h.results, func(it *item) string { return h.payloads[it.id()] })
	for {
		select {
		case c := <-h.e.snd.sent:
			h.lastSent[c.DeviceID] = c
			continue
		default:
		}
		break
	}
	if !h.e.nb {
		return
	}
	for _, dev := range h.devices {
		w, ok := h.current(dev)
		if !ok {
			continue
		}
		if c := h.lastSent[dev]; c.MessageID != w.id || !bytes.Equal(c.Payload, w.payload) {
			h.fail("%s has %s %s in flight, but was last sent %s %s", dev, w.kind, w.id, c.Op, c.MessageID)
		}
	}
}
