package outbox

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Batches (protocol v2's AddPersons): the AddPerson tasks at the head of a device's queue
// go to the terminal in one command, as many as its heartbeat announces (Settings.MaxBatch
// at most). See "Batches" in the package documentation. The dispatch core calls in at:
// pump (pumpBatch, before a task's face step and send), ack (batchAcked), the ack timeout,
// a failed Send and a device going offline (inflightTryFailed and requeueInflight, which
// handle a single task and a batch alike), and TerminalHeartbeat (noteBatchSize).

// batchSend is the AddPersons command last sent to a device: in flight, or its tasks
// waiting for their retry (its late ack still answers them, and the retry sends it again
// as it was: the same tasks, the same message id, the same bytes).
type batchSend struct {
	id      string
	items   []*item       // its tasks, in queue order
	persons []face.Person // persons[i] is items[i]'s, as sent
	payload []byte        // the face.Command in msgp, under id
	sends   int           // Command.Try of its last send
}

// batchMark is what the outbox learned about a task in batches, in memory only.
type batchMark struct {
	salt uint16 // changes the id of the batches it is in: a terminal answers a repeated id from memory
	miss uint8  // code 21 answers to it
}

// batchIDLen is the length of a batch's message id: "B" and 16 URL-safe base64
// characters, the first 12 bytes (96 bits) of a digest. Short: the batch and its ack
// carry it on a serial line.
const batchIDLen = 1 + 16

// noteBatchSize records the batch size a terminal's heartbeat announces: 0 unless it
// speaks protocol 2 and says batch.
func (d *device) noteBatchSize(h *face.Heartbeat) {
	d.live.batchSize = 0
	if h.Version() >= 2 {
		d.live.batchSize = h.BatchSize()
	}
}

// batchOutcome is what pumpBatch did.
type batchOutcome uint8

const (
	batchNone  batchOutcome = iota // no batch: the head goes alone
	batchBusy                      // a batch or a face chunk took the slot (or the journal refused): pump is done
	batchAgain                     // a task of the batch failed (its face could not be sent): look at the queue again
)

// pumpBatch is pump's hook for head, d's first queued task (due, not expired, its payload
// read): when tasks can go with it, it sends their batch, or first a chunk of a face one
// of them needs.
func (o *Outbox) pumpBatch(d *device, head *item, headPay []byte, now int64) batchOutcome {
	b := o.gatherBatch(d, head, headPay, now)
	if b == nil {
		d.live.batch = nil // its late ack is ignored from now on: the head is sent alone
		return batchNone
	}
	if fs := d.live.faces; o.faces != nil && fs != nil && fs.v2 {
		// Every face the batch needs goes first, each once (a face held is skipped), each
		// chunk for the task that needs it: a face that cannot be sent fails that task.
		for i, it := range b.items {
			ref := b.persons[i].Face
			if ref.SHA256 == "" || fs.holds(ref.SHA256) {
				continue
			}
			if o.sendChunk(d, fs, it, ref, now) == faceSent {
				return batchBusy
			}
			return batchAgain
		}
	}
	ackTimeout := o.settingsFor(d).RetryInterval
	next := now + int64(ackTimeout)
	for _, it := range b.items {
		o.emit(&record{Kind: kindSend, ID: it.id(), Tries: uint32(it.tries) + 1, Next: next})
		if it.status != InFlight { // the journal refused the record: the outbox stops
			return batchBusy
		}
		d.live.c.sent++
		if it.tries > 1 {
			d.live.c.retries++
		}
	}
	b.sends++
	d.live.batch = b
	o.sends = append(o.sends, sendJob{dev: d.id, timeout: ackTimeout, cmd: Command{
		MessageID: b.id, DeviceID: d.id, Op: string(face.AddPersons), Payload: b.payload, Try: b.sends,
	}, nonBlocking: o.nonBlock != nil && o.nonBlock.SendsWithoutBlocking(d.id)})
	return batchBusy
}

// gatherBatch returns the batch that starts with head: head and the tasks queued right
// behind it, in queue order, while each is an AddPerson (the op and its payload's), due,
// not expired, for a person not yet in the batch, and the command still fits
// DeviceConfig.MaxCommandBytes; at most the smaller of Settings.MaxBatch and the
// terminal's batch size. It returns nil when head goes alone. The batch last sent is
// returned as it was while its tasks still wait where they were, head first.
//
// head is nextOf's: the first of the queue, or a task that the commands without a result
// never sent before it let go first. Those stay out of its batch (they go after it, in
// their order), so the batch's tasks are in queue order, the first in the in-flight slot.
func (o *Outbox) gatherBatch(d *device, head *item, headPay []byte, now int64) *batchSend {
	limit := min(o.settings.MaxBatch, d.live.batchSize)
	if limit < 2 || len(d.queue) < 2 || o.t.opOf(head) != string(face.AddPerson) {
		return nil
	}
	at := slices.Index(d.queue, head) // 0, or past the few corrections nextOf passed over
	if at < 0 || at == len(d.queue)-1 {
		return nil
	}
	o.pruneMarks(d)
	if b := d.live.batch; b != nil && len(b.items) <= limit && o.batchWaiting(d, b, at) {
		return b
	}
	var cmd face.Command
	if _, err := cmd.UnmarshalMsg(headPay); err != nil || cmd.Op != face.AddPerson {
		return nil
	}
	b := &batchSend{items: []*item{head}, persons: []face.Person{cmd.Person}}
	maxBytes := d.live.cfg.MaxCommandBytes
	// size bounds the command's msgp bytes from above (Msgsize), or is exact once an
	// encoding had to be checked.
	batch := face.Command{MessageID: string(make([]byte, batchIDLen)), Op: face.AddPersons}
	size := batch.Msgsize() + cmd.Person.Msgsize()
	var enc []byte
	for _, it := range d.queue[at+1:] {
		if len(b.items) >= limit || it.next > now || o.t.opOf(it) != string(face.AddPerson) {
			break
		}
		if exp := o.t.expiresAt(it); exp != 0 && now >= exp {
			break // its turn comes when it is the head: it expires then
		}
		p, err := o.t.payload(it)
		if err != nil {
			break // read again (and repaired) when it is the head
		}
		var c face.Command
		if _, err := c.UnmarshalMsg(p); err != nil || c.Op != face.AddPerson || hasPerson(b.persons, c.Person.ID) {
			break // one person once: the results name persons
		}
		if maxBytes > 0 {
			next := size + c.Person.Msgsize()
			if next > maxBytes {
				batch.Persons = append(b.persons, c.Person)
				enc, _ = batch.AppendMsg(enc[:0])
				if len(enc) > maxBytes {
					break
				}
				next = len(enc)
			}
			size = next
		}
		b.items = append(b.items, it)
		b.persons = append(b.persons, c.Person)
	}
	if len(b.items) < 2 {
		return nil
	}
	b.id = o.batchID(d, b.items)
	batch.MessageID, batch.Persons = b.id, b.persons
	payload, err := batch.AppendMsg(nil)
	if err != nil {
		return nil // cannot happen with persons that decoded
	}
	b.payload = payload
	return b
}

func hasPerson(persons []face.Person, id string) bool {
	for i := range persons {
		if persons[i].ID == id {
			return true
		}
	}
	return false
}

// batchWaiting reports whether b's tasks are in d's queue from at on, in order, each
// still due for the same batch (nothing changed its id): its retry sends it as it was.
func (o *Outbox) batchWaiting(d *device, b *batchSend, at int) bool {
	if len(d.queue)-at < len(b.items) {
		return false
	}
	for i, it := range b.items {
		if d.queue[at+i] != it {
			return false
		}
	}
	return o.batchID(d, b.items) == b.id
}

// batchID is the message id of a batch of items: a digest of their message ids and of
// their marks' salts. The same tasks make the same id, after a restart too, with nothing
// journalled: a terminal that applied the batch before the crash answers the resend from
// its memory. Other tasks (or a salt changed by a 21 or a batch refused whole) make
// another id, under which a terminal applies the batch afresh — AddPerson is idempotent.
func (o *Outbox) batchID(d *device, items []*item) string {
	h := sha256.New()
	var n [4]byte
	for _, it := range items {
		id := it.id()
		binary.BigEndian.PutUint16(n[:2], uint16(len(id)))
		binary.BigEndian.PutUint16(n[2:], d.live.marks[it].salt)
		h.Write(n[:])
		_, _ = io.WriteString(h, id)
	}
	var sum [sha256.Size]byte
	return "B" + base64.RawURLEncoding.EncodeToString(h.Sum(sum[:0])[:(batchIDLen-1)*3/4])
}

// pruneMarks drops the marks of tasks that finished or left the table.
func (o *Outbox) pruneMarks(d *device) {
	for it := range d.live.marks {
		if it.status.Terminal() || o.t.items.get(it.id()) != it {
			delete(d.live.marks, it)
		}
	}
	if len(d.live.marks) == 0 {
		d.live.marks = nil
	}
}

// bumpMark changes it's batch salt and returns its mark.
func (d *device) bumpMark(it *item, miss bool) batchMark {
	if d.live.marks == nil {
		d.live.marks = map[*item]batchMark{}
	}
	m := d.live.marks[it]
	m.salt++
	if miss {
		m.miss++
	}
	d.live.marks[it] = m
	return m
}

// batchAcked takes the terminal's ack of b, d's batch: each task's result goes to that
// task alone. Code 0 succeeds it; 21 forgets its face and sends it again (its face first)
// without spending a try; 23 fails it with "capacity"; another code fails it as a
// refusal; a task whose person the ack has no result for counts a failed try. An ack whose
// own code is not 0 (the batch was not processed) is a failed try for every task.
func (o *Outbox) batchAcked(d *device, b *batchSend, a *face.Ack) {
	d.live.batch = nil // answered: a second ack is ignored
	now := o.now()
	if a.Code != 0 {
		// A terminal that takes no batches now, or not this many: single commands until its
		// next heartbeat announces a batch size again, each under a new id (it answers the
		// batch's id from its memory).
		d.live.batchSize = 0
		for _, it := range b.items {
			d.bumpMark(it, false)
		}
		o.batchRetry(d, b.items, fmt.Sprintf("batch refused by the device: code %d: %s", a.Code, a.Message), now)
		return
	}
	d.live.failures, d.live.trips, d.live.breakerUntil = 0, 0, 0
	var missing []*item
	for i, it := range b.items {
		if o.t.items.get(it.id()) != it || it.dev != d || it.status.Terminal() {
			continue
		}
		code, ok := resultFor(a.Results, b.persons[i].ID, i)
		if !ok {
			missing = append(missing, it)
			continue
		}
		pa := &face.Ack{MessageID: it.id(), Code: code}
		if o.acked != nil && !o.t.noResult(it) {
			o.noteAcked(it, code) // each task of a batch as if acked alone
		}
		switch {
		case code == 0:
			o.finishItemAck(it, Succeeded, "", pa)
		case code == face.CodeFaceMissing && o.faces != nil:
			if reason := o.batchFaceMissing(d, it, b.persons[i].Face); reason != "" {
				o.finishItemAck(it, Failed, reason, pa)
			}
		case code == face.CodeCapacity:
			o.finishItemAck(it, Failed, "capacity", pa)
		default:
			o.finishItemAck(it, Failed, fmt.Sprintf("refused by the device: code %d (in batch %s)", code, b.id), pa)
		}
	}
	if len(missing) > 0 {
		o.batchRetry(d, missing, fmt.Sprintf("no result for its person in the ack of batch %s", b.id), now)
	}
}

// resultFor returns the code the results give the person with id, the i-th of its
// batch: results come in the batch's order, so results[i] is checked first.
func resultFor(results []face.Result, id string, i int) (int, bool) {
	if i < len(results) && results[i].ID == id {
		return results[i].Code, true
	}
	for _, r := range results {
		if r.ID == id {
			return r.Code, true
		}
	}
	return 0, false
}

// batchFaceMissing handles a code 21 for it in a batch: its face is forgotten and it goes
// back to its place in the queue without spending the try (when still in flight), to go
// again after its face. It returns why it fails instead: it carries no face, or it was
// answered 21 maxFaceMissing times already.
func (o *Outbox) batchFaceMissing(d *device, it *item, ref face.FaceRef) string {
	fs := o.facesOf(d)
	fs.v2 = true
	if ref.SHA256 == "" {
		return fmt.Sprintf("refused by the device: code %d (it carries no face)", face.CodeFaceMissing)
	}
	fs.forget(ref.SHA256)
	if m := d.bumpMark(it, true); int(m.miss) > maxFaceMissing {
		return fmt.Sprintf("face %s: still missing on the terminal after it was sent %d times (code %d)",
			shortSum(ref.SHA256), maxFaceMissing, face.CodeFaceMissing)
	}
	if it.status == InFlight {
		o.requeue(it)
	}
	return ""
}

// batchRetry counts a failed try for each of items still in flight: each is sent again
// after one backoff for all (so that they stay together: the same batch goes again), or
// fails after MaxTries. A task acked late (no longer in flight) keeps its place.
func (o *Outbox) batchRetry(d *device, items []*item, reason string, now int64) {
	s := o.settingsFor(d)
	tries := 0
	for _, it := range items {
		tries = max(tries, int(it.tries))
	}
	next := now + int64(o.backoff(s, tries))
	for _, it := range items {
		switch {
		case it.status != InFlight || it.dev != d:
		case int(it.tries) >= s.MaxTries:
			o.finishItem(it, Failed, fmt.Sprintf("%s (after %d tries)", reason, it.tries))
		default:
			o.emit(&record{Kind: kindRetry, ID: it.id(), Next: next, Err: reason})
		}
	}
}

// inflightItems returns the tasks d has in flight: one, a batch's, or none.
func (d *device) inflightItems() []*item {
	if d.inflight == nil {
		return nil
	}
	return append([]*item{d.inflight}, d.batched...)
}

// inflightTryFailed handles a try of d's command in flight that got no ack in time, or
// whose send failed: a single task's, or a batch's, whose every task counts a failed try
// (and the device's breaker one).
func (o *Outbox) inflightTryFailed(d *device, reason string, now int64) {
	if len(d.batched) == 0 {
		o.tryFailed(d.inflight, reason, now)
		return
	}
	o.batchRetry(d, d.inflightItems(), reason, now)
	o.unacked(d, o.settingsFor(d), now)
}

// requeueInflight puts every task d has in flight back at its place in the queue without
// spending the try: d went offline.
func (o *Outbox) requeueInflight(d *device) {
	for _, it := range d.inflightItems() {
		o.requeue(it)
	}
}

// batchInFlight reports whether messageID is d's batch in flight with that try: its
// failed Send counts as a failed try of the batch. The slot holds one of the batch's
// tasks, not necessarily its first: a late ack of the first task's own earlier send may
// have finished it while the batch was on its way, and the slot passed to the next.
func (d *device) batchInFlight(messageID string, try int) bool {
	b := d.live.batch
	return b != nil && b.id == messageID && b.sends == try && d.inflight != nil && slices.Contains(b.items, d.inflight)
}
