package outbox

import (
	"fmt"
	"strings"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// The terminal of TestPropertyRandomHistoriesBatches (property_batch_test.go): how it
// answers, and what each answer must do to the tasks it answers.

// propTerminal is a scripted terminal of the batch property test: it keeps the faces it
// was sent by PutFace's resume rule (checking their bytes against their hash), the
// persons it added, and the acks it gave (it answers a repeated message id from memory).
type propTerminal struct {
	id       string
	v2       bool
	batches  []int // the batch sizes its heartbeats announce, drawn at random
	serial   int
	held     map[string]bool
	recvSHA  string
	recvSize int
	recv     []byte
	persons  map[string]bool
	answered map[string]face.Ack
	seen     []string // message ids it answered, the latest last (for late acks)
}

func (pt *propTerminal) forget() {
	pt.held, pt.persons, pt.answered = map[string]bool{}, map[string]bool{}, map[string]face.Ack{}
	pt.recvSHA, pt.recvSize, pt.recv, pt.seen = "", 0, nil, nil
}

func (pt *propTerminal) remember(a face.Ack) {
	if len(pt.answered) >= 256 {
		clear(pt.answered)
	}
	pt.answered[a.MessageID] = a
	if pt.seen = append(pt.seen, a.MessageID); len(pt.seen) > 32 {
		pt.seen = pt.seen[1:]
	}
}

// put takes a chunk as a v2 terminal does and returns the bytes it holds of its face; a
// face completed goes through the hash check. It returns ok false when the bytes it got
// do not hash to the face's SHA-256: the outbox sent wrong bytes.
func (pt *propTerminal) put(c *face.FaceChunk) (have int, complete, ok bool) {
	if pt.held[c.SHA256] {
		return c.Size, true, true
	}
	if pt.recvSHA != c.SHA256 || pt.recvSize != c.Size {
		if c.Offset != 0 {
			return 0, false, true
		}
		pt.recvSHA, pt.recvSize, pt.recv = c.SHA256, c.Size, nil
	}
	if c.Offset != len(pt.recv) || c.Offset+len(c.Data) > c.Size {
		return len(pt.recv), false, true // a chunk sent twice, or a probe
	}
	pt.recv = append(pt.recv, c.Data...)
	if len(pt.recv) < pt.recvSize {
		return len(pt.recv), false, true
	}
	data := pt.recv
	pt.recvSHA, pt.recv = "", nil
	if face.FaceSHA256(data) != c.SHA256 {
		return 0, false, false
	}
	pt.held[c.SHA256] = true
	return len(data), true, true
}

// dropRecv forgets the face being received (a 22: the terminal starts over).
func (pt *propTerminal) dropRecv() { pt.recvSHA, pt.recv = "", nil }

func (h *batchHistory) chunkAck(pt *propTerminal, w *wireCmd, good bool) face.Ack {
	c := &w.cmd.Face
	a := face.Ack{MessageID: w.id}
	if !good {
		switch r := h.rng.IntN(100); {
		case r < 4:
			a.Code = face.CodeCapacity
			return a
		case r < 7:
			a.Code, a.Message = 5, "chunk refused"
			return a
		case r < 20 && pt.recvSHA == c.SHA256 && len(pt.recv) > 0:
			pt.recv = pt.recv[:h.rng.IntN(len(pt.recv))] // it lost the tail of what it had
		}
	}
	if pt.recvSHA == c.SHA256 && c.Offset < len(pt.recv) && len(c.Data) > 0 {
		h.seen.chunkTwice++ // it got these bytes before: their ack was lost
	}
	have, complete, ok := pt.put(c)
	if !ok {
		h.fail("terminal %s: face %s received from the outbox does not hash to its name", pt.id, shortSum(c.SHA256))
	}
	if complete && !good && len(c.Data) > 0 && h.rng.IntN(6) == 0 {
		delete(pt.held, c.SHA256)
		a.Code = face.CodeFaceHash
		return a
	}
	a.Have = have
	return a
}

func (h *batchHistory) batchAck(pt *propTerminal, w *wireCmd, good bool) face.Ack {
	a := face.Ack{MessageID: w.id}
	if !good && h.rng.IntN(20) == 0 {
		a.Code, a.Message = 7, "busy"
		return a
	}
	for _, p := range w.cmd.Persons {
		code := 4 // refused for a reason of its own (an invalid validity, say): its neighbours go on
		if good || h.rng.IntN(10) != 0 {
			code = h.addCode(pt, p, good)
		}
		if !good && h.rng.IntN(10) == 0 {
			continue // no result for this person
		}
		a.Results = append(a.Results, face.Result{ID: p.ID, Code: code})
	}
	return a
}

func (h *batchHistory) singleAck(pt *propTerminal, w *wireCmd, good bool) face.Ack {
	a := face.Ack{MessageID: w.id}
	switch w.cmd.Op {
	case face.AddPerson:
		a.Code = h.addCode(pt, w.cmd.Person, good)
	case face.DeletePerson:
		if !good && h.rng.IntN(10) == 0 {
			a.Code = 3
		} else {
			delete(pt.persons, w.cmd.Person.ID)
		}
	default:
		h.fail("%s sent as %s", w.id, w.cmd.Op)
	}
	if a.Code != 0 {
		a.Message = "refused"
	}
	return a
}

// addCode is the terminal's code for adding p: a v2 terminal lacking p's face answers
// 21; otherwise, unless good, a code is drawn.
func (h *batchHistory) addCode(pt *propTerminal, p face.Person, good bool) int {
	code := 0
	if pt.v2 && p.Face.SHA256 != "" && !pt.held[p.Face.SHA256] {
		code = face.CodeFaceMissing
	} else if !good {
		switch r := h.rng.IntN(100); {
		case r < 12:
			code = 3
		case r < 18 && pt.v2:
			code = face.CodeFaceMissing // it lost the face
			delete(pt.held, p.Face.SHA256)
		case r < 24:
			code = face.CodeCapacity
		}
	}
	if code == 0 {
		pt.persons[p.ID] = true
	}
	return code
}

// checkChunkAcked checks what an answer to a chunk did: 23 fails the task the face is
// for with "capacity", another refusal fails it naming the face, 22 starts the face over
// (or fails the task naming the hash check), and a have short of the face is where the
// next chunk starts.
func (h *batchHistory) checkChunkAcked(dev string, w *wireCmd, a face.Ack) {
	it := w.forItem
	if it == nil {
		return // its ack is ignored: the next chunk starts the face over
	}
	sha := w.cmd.Face.SHA256
	st, _, reason, _ := h.state(it)
	if h.gone(it) {
		reason = "" // a command without a result that finished: only its status is kept
	}
	switch a.Code {
	case face.CodeCapacity:
		if st == Scheduled || st == Failed && reason != "capacity" && !h.gone(it) {
			h.fail("chunk %s answered 23: %s for it is %s (%q)", w.id, it.id(), st, reason)
		}
	case face.CodeFaceHash:
		h.seen.hash22++
		if st == Failed && reason != hashReason(sha) && !h.gone(it) {
			h.fail("chunk %s answered 22: %s failed with %q", w.id, it.id(), reason)
		}
		if next, ok := h.current(dev); ok && next.kind == "chunk" && next.cmd.Face.SHA256 == sha && next.cmd.Face.Offset != 0 {
			h.fail("after a 22 face %s goes on at %d, not from 0", shortSum(sha), next.cmd.Face.Offset)
		}
	case 0:
		if a.Have >= w.cmd.Face.Size {
			return
		}
		if st == Failed && (strings.Contains(reason, "does not take it") || h.gone(it)) {
			return // 3 acks in a row without progress: the next task with the face starts it over
		}
		if next, ok := h.current(dev); ok && next.kind == "chunk" && next.cmd.Face.SHA256 == sha {
			if next.cmd.Face.Offset != a.Have {
				h.fail("face %s acked with have %d goes on at %d (for %s, then for %s: %s %q)", shortSum(sha), a.Have, next.cmd.Face.Offset,
					it.id(), next.forItem.id(), st, reason)
			}
			if a.Have < w.cmd.Face.Offset+len(w.cmd.Face.Data) {
				h.seen.resumed++ // from a have short of what was sent
			}
		}
	default:
		if st == Scheduled || st == Failed && !strings.Contains(reason, shortSum(sha)) && !h.gone(it) {
			h.fail("chunk %s refused: %s for it is %s (%q)", w.id, it.id(), st, reason)
		}
	}
}

func hashReason(sha string) string {
	return fmt.Sprintf("face %s: failed the terminal's hash check %d times (code %d)", shortSum(sha), maxFaceHash, face.CodeFaceHash)
}

// checkBatchAcked checks that each task of an answered batch got its own person's
// result: 0 succeeds it, 21 puts it back without spending the try (or fails it after 3
// rounds), 23 fails it with "capacity", another code fails it alone as a refusal; a
// person without a result, or a batch refused whole, is a failed try.
func (h *batchHistory) checkBatchAcked(w *wireCmd, a face.Ack) {
	maxTries := h.e.o.Settings().MaxTries
	for i, it := range w.items {
		p := w.cmd.Persons[slicesIndexPerson(w.cmd.Persons, it.person())]
		st, tries, reason, _ := h.state(it)
		code, ok := personResult(a.Results, p.ID)
		if h.gone(it) {
			h.checkGone(it, st, a.Code == 0 && ok && code == 0)
			continue
		}
		switch {
		case a.Code != 0 || !ok:
			why := "no result for its person"
			if a.Code != 0 {
				why = fmt.Sprintf("batch refused by the device: code %d", a.Code)
			}
			if st == Failed && (int(tries) < maxTries || !strings.Contains(reason, why)) ||
				st != Failed && st != Scheduled && !h.expired(it, st) || tries != w.tries[i] {
				h.fail("batch %s (code %d): %s without a result is %s after %d tries (%q), sent with %d", w.id, a.Code, it.id(), st, tries, reason, w.tries[i])
			}
		case code == 0:
			if st != Succeeded {
				h.fail("batch %s: %s answered 0 is %s (%q); its neighbours: %v", w.id, it.id(), st, reason, a.Results)
			}
		case code == face.CodeFaceMissing:
			h.seen.missing++
			h.checkMissing(it, p.Face.SHA256, w.tries[i], true)
		case code == face.CodeCapacity:
			h.seen.capacity++
			if st != Failed || reason != "capacity" {
				h.fail("batch %s: %s answered 23 is %s (%q)", w.id, it.id(), st, reason)
			}
		default:
			if want := fmt.Sprintf("refused by the device: code %d (in batch %s)", code, w.id); st != Failed || reason != want {
				h.fail("batch %s: %s answered %d is %s (%q), want Failed (%q)", w.id, it.id(), code, st, reason, want)
			}
			h.seen.refusedInBatch++
		}
	}
}

// personResult is the code results give the person with id.
func personResult(results []face.Result, id string) (int, bool) {
	for _, r := range results {
		if r.ID == id {
			return r.Code, true
		}
	}
	return 0, false
}

func slicesIndexPerson(ps []face.Person, id string) int {
	for i := range ps {
		if ps[i].ID == id {
			return i
		}
	}
	return -1
}

// checkMissing checks a task answered 21: back in the queue with the try it was sent with
// refunded, or, after 3 such answers, failed naming the face; one without a face fails as
// a refusal.
func (h *batchHistory) checkMissing(it *item, sha string, sentTries uint16, inBatch bool) {
	id := it.id()
	st, tries, reason, _ := h.state(it)
	if h.gone(it) {
		h.checkGone(it, st, false)
		return
	}
	count := h.singleMiss
	if inBatch {
		count = h.batchMiss
	}
	switch {
	case sha == "":
		if st != Failed || !strings.Contains(reason, "code 21") {
			h.fail("%s without a face answered 21 is %s (%q)", id, st, reason)
		}
	case sha == h.absent && st == Failed && strings.Contains(reason, "not on the gateway"):
		// Its face went first, and the gateway lacks it.
	case st == Failed && strings.Contains(reason, "still missing"):
		// The outbox counts 21 rounds per task in a batch exactly (and forgets them at a
		// restart); a task sent alone counts those in a row.
		if count[id] <= maxFaceMissing {
			h.fail("%s failed after %d answers 21: %q", id, count[id], reason)
		}
	case st == Scheduled || h.expired(it, st):
		if tries != sentTries-1 {
			h.fail("%s answered 21 holds %d tries, sent with %d: 21 spent a try", id, tries, sentTries)
		}
		if inBatch && count[id] > maxFaceMissing {
			h.fail("%s answered 21 in batches %d times is still queued", id, count[id])
		}
	default:
		h.fail("%s answered 21 is %s (%q)", id, st, reason)
	}
}

// checkSingleAcked checks what the answer to a command sent alone did.
func (h *batchHistory) checkSingleAcked(w *wireCmd, a face.Ack) {
	it := w.items[0]
	st, _, reason, _ := h.state(it)
	if h.gone(it) {
		h.checkGone(it, st, a.Code == 0)
		return
	}
	switch a.Code {
	case 0:
		if st != Succeeded {
			h.fail("%s (as %s) acked 0 is %s (%q)", it.id(), w.id, st, reason)
		}
	case face.CodeFaceMissing:
		h.seen.missing++
		h.checkMissing(it, w.cmd.Person.Face.SHA256, w.tries[0], false)
	case face.CodeCapacity:
		h.seen.capacity++
		if st != Failed || reason != "capacity" {
			h.fail("%s answered 23 is %s (%q)", it.id(), st, reason)
		}
	default:
		if want := fmt.Sprintf("refused by the device: code %d: %s", a.Code, a.Message); st != Failed || reason != want {
			h.fail("%s answered %d is %s (%q), want Failed (%q)", it.id(), a.Code, st, reason, want)
		}
	}
}

// checkGone checks a command without a result that an answer finished: its reason went
// to NoResultDone, not kept in the table; its status says whether it succeeded.
func (h *batchHistory) checkGone(it *item, st Status, succeeded bool) {
	if !st.Terminal() || (st == Succeeded) != succeeded {
		h.fail("%s (without a result) is %s after an answer that succeeded: %v", it.id(), st, succeeded)
	}
}

// hashTwice runs the face step's hash failure through: a chunk of a fresh transfer in
// flight is answered 22, which sends the face again from 0; the terminal takes it, and
// answers 22 once more at its end: the task the face is for fails, naming the face.
func (h *batchHistory) hashTwice(dev string) {
	w, ok := h.current(dev)
	pt := h.terms[dev]
	if !ok || w.kind != "chunk" || w.forItem == nil || pt.held[w.cmd.Face.SHA256] {
		return
	}
	sha, it := w.cmd.Face.SHA256, w.forItem
	o := h.e.o
	o.mu.Lock()
	fresh := o.t.devices[dev].live.faces.xfer.hashFails == 0 && o.t.devices[dev].live.faces.xfer.sha == sha
	o.mu.Unlock()
	if st, _, _, in := h.state(it); !fresh || st != Scheduled || !in || h.e.status(dev).Paused {
		return
	}
	pt.dropRecv()
	o.AckMessage(dev, face.Ack{MessageID: w.id, Code: face.CodeFaceHash})
	if st, _, reason, _ := h.state(it); h.expired(it, st) {
		return // back in the queue, it expired: the next task goes
	} else if st != Scheduled {
		h.fail("one 22 for face %s: %s is %s (%q)", shortSum(sha), it.id(), st, reason)
	}
	for first := true; ; first = false {
		w, ok := h.current(dev)
		if first && (!ok || w.kind != "chunk" || w.forItem != it) {
			// Something else goes first now: the batch the chunk was sent for is gathered
			// otherwise since (a heartbeat changed its size).
			return
		}
		if !ok || w.kind != "chunk" || w.cmd.Face.SHA256 != sha || w.forItem != it {
			var ids []string
			for _, x := range w.items {
				ids = append(ids, x.id())
			}
			h.fail("after a 22 for face %s: %s %s %v (face %s) in flight, want its chunk for %s\n%s", shortSum(sha), w.kind, w.id, ids,
				shortSum(w.cmd.Person.Face.SHA256), it.id(), h.dump())
		}
		if first && w.cmd.Face.Offset != 0 {
			h.fail("after a 22 face %s starts at %d", shortSum(sha), w.cmd.Face.Offset)
		}
		have, complete, ok := pt.put(&w.cmd.Face)
		if !ok {
			h.fail("terminal %s: face %s does not hash to its name", dev, shortSum(sha))
		}
		if complete {
			delete(pt.held, sha)
			o.AckMessage(dev, face.Ack{MessageID: w.id, Code: face.CodeFaceHash})
			break
		}
		o.AckMessage(dev, face.Ack{MessageID: w.id, Have: have})
	}
	if st, _, reason, _ := h.state(it); st != Failed || reason != hashReason(sha) && !h.gone(it) {
		h.fail("two 22s for face %s: %s is %s (%q), want Failed (%q)", shortSum(sha), it.id(), st, reason, hashReason(sha))
	}
	h.seen.hashTwice++
}
