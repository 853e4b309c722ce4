package sim

import (
	"fmt"
	"slices"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Protocol v2 on the terminal's side: the persons with the revs the agent sent, the digest
// kept by XOR on every change, ListPersons answered from the ids kept in bytewise order, and
// the knobs a test turns while the fleet runs (the protocol spoken, factory reset,
// replacement, hand edits, capacity).

// Codes a simulated terminal answers besides 0 and Options.RefuseCode.
const (
	// UnknownOpCode refuses a command whose op the terminal does not know (ListPersons on a
	// v1 terminal, or an op of a later protocol), as terminals refuse what they cannot do.
	UnknownOpCode = 1
	// CapacityCode refuses an AddPerson of a new person on a full terminal (protocol v2's
	// "capacity exceeded").
	CapacityCode = face.CodeCapacity
)

// noRev is what a person stored without a rev (sent by a v1 AddPerson, or added at the
// terminal) lists and digests as.
const noRev = "0000000000000000"

// revOf is the rev p is listed with.
func revOf(p face.Person) string {
	if p.Rev == "" {
		return noRev
	}
	return p.Rev
}

// member is what p contributes to the digest. The rev was validated when the command was
// parsed (or by the knob that stored it).
func member(p face.Person) face.Digest {
	r, _ := face.ParseRev(revOf(p))
	return face.Digest(face.Member(p.ID, r))
}

// put stores p, replacing the person with its id, and keeps the digest and the id order.
// Called with mu held.
func (t *Terminal) put(p face.Person) {
	if old, ok := t.persons[p.ID]; ok {
		t.digest ^= member(old)
	} else {
		i, _ := slices.BinarySearch(t.ids, p.ID)
		t.ids = slices.Insert(t.ids, i, p.ID)
	}
	t.persons[p.ID] = p
	t.digest ^= member(p)
}

// remove deletes the person id if held, and reports whether it was. Called with mu held.
func (t *Terminal) remove(id string) bool {
	old, ok := t.persons[id]
	if !ok {
		return false
	}
	t.digest ^= member(old)
	delete(t.persons, id)
	if i, found := slices.BinarySearch(t.ids, id); found {
		t.ids = slices.Delete(t.ids, i, i+1)
	}
	return true
}

// execute carries cmd out, the first time its messageId is answered, and returns the
// ack's code; PutFace's have and AddPersons' results go into a. Called with mu held.
func (t *Terminal) execute(cmd *face.Command, a *face.Ack) int {
	switch cmd.Op {
	case face.AddPerson:
		return t.addPerson(cmd.Person)
	case face.DeletePerson:
		t.remove(cmd.Person.ID)
	case face.ListPersons:
		if t.protocol < 2 {
			return UnknownOpCode
		}
		t.stats.Lists++
	case face.PutFace:
		if t.protocol < 2 {
			return UnknownOpCode
		}
		code, have := t.putFace(&cmd.Face)
		a.Have = have
		return code
	case face.AddPersons:
		switch {
		case t.protocol < 2 || t.batch == 0:
			return UnknownOpCode
		case len(cmd.Persons) > t.batch:
			return BatchTooLargeCode
		}
		a.Results = t.addPersons(cmd.Persons)
		t.batchResults[cmd.MessageID] = a.Results
	default:
		return UnknownOpCode
	}
	return 0
}

// reanswer fills a, the ack of a repeated messageId answered code before, without
// applying anything again: a PutFace says what the terminal holds of the face now, an
// AddPersons the results of its first answer. Called with mu held.
func (t *Terminal) reanswer(cmd *face.Command, code int, a *face.Ack) {
	switch {
	case code != 0:
	case cmd.Op == face.PutFace:
		a.Have = t.faceHave(cmd.Face.SHA256)
	case cmd.Op == face.AddPersons:
		a.Results = t.batchResults[cmd.MessageID]
	}
}

// page fills a's ListPersons page for cmd from the persons held now: the ids after
// cmd.After in bytewise order, at most cmd.PageSize() of them; Next is the page's last id
// while persons follow it, "" once the list ends. Called with mu held.
func (t *Terminal) page(cmd face.Command, a *face.Ack) {
	i, found := slices.BinarySearch(t.ids, cmd.After)
	if found {
		i++
	}
	j := min(i+cmd.PageSize(), len(t.ids))
	a.Persons = make([]face.PersonRev, 0, j-i)
	for _, id := range t.ids[i:j] {
		a.Persons = append(a.Persons, face.PersonRev{ID: id, Rev: revOf(t.persons[id])})
	}
	if j < len(t.ids) {
		a.Next = t.ids[j-1]
	}
}

// Protocol returns the protocol version the terminal speaks now (1 or 2).
func (t *Terminal) Protocol() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.protocol
}

// SetProtocol makes the terminal speak protocol v1 (1: no v2 fields in its heartbeats,
// ListPersons refused as an unknown op, revs not kept) or v2 (2) from now on, as a firmware
// downgrade or upgrade would. Persons stored under v1 list with rev 0000000000000000.
func (t *Terminal) SetProtocol(v int) error {
	if v != 1 && v != 2 {
		return fmt.Errorf("sim: protocol %d: want 1 or 2", v)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.protocol = v
	return nil
}

// Serial returns the hardware serial the terminal reports.
func (t *Terminal) Serial() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.serial
}

// Digest returns the digest of the persons the terminal holds.
func (t *Terminal) Digest() face.Digest {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.digest
}

// SetCapacity sets the most persons the terminal holds (0: no limit). Persons already
// held stay; an AddPerson of a new person is refused with CapacityCode while the terminal
// is full.
func (t *Terminal) SetCapacity(n int) error {
	if n < 0 {
		return fmt.Errorf("sim: capacity %d is negative", n)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.capacity = n
	return nil
}

// SetAckLatency changes the terminal's ack latency (Options.AckLatency) for the commands
// it receives from now on.
func (t *Terminal) SetAckLatency(l Latency) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ackLatency = l
}

// FactoryReset forgets every person (digest 0), every face and every messageId answered, and drops
// the commands not yet acked, as a terminal reset to factory settings does. Its serial
// stays.
func (t *Terminal) FactoryReset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.wipe()
}

// Replace makes the terminal a new one in the same place: empty, with serial as its
// hardware serial ("" picks a new one). It returns the new serial.
func (t *Terminal) Replace(serial string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.wipe()
	t.generation++
	if serial == "" {
		serial = defaultSerial(t.id, t.generation)
	}
	t.serial = serial
	return serial
}

func defaultSerial(id string, generation int) string {
	return fmt.Sprintf("FS-%s-%d", id, generation)
}

// wipe empties the terminal. Called with mu held.
func (t *Terminal) wipe() {
	clear(t.persons)
	t.ids = t.ids[:0]
	t.digest = 0
	clear(t.results)
	clear(t.batchResults)
	clear(t.faces)
	clear(t.cut)
	t.receiving = receiving{}
	t.pending = nil
	t.epoch++ // acks due for commands received before are not sent
}

// TamperAdd stores p as if added at the terminal itself, bypassing the agent: with its
// Rev as given (empty: listed as 0000000000000000), over any person with its id, ignoring
// the capacity.
func (t *Terminal) TamperAdd(p face.Person) error {
	if err := (&face.Command{MessageID: "tamper", Op: face.AddPerson, Person: p}).Validate(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.put(p)
	return nil
}

// TamperDelete removes the person id as if deleted at the terminal; false if not held.
func (t *Terminal) TamperDelete(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.remove(id)
}

// TamperRev changes the rev stored with the person id (a record edited at the terminal
// keeps a rev that no longer says what it holds); false if the person is not held.
func (t *Terminal) TamperRev(id, rev string) (bool, error) {
	if _, err := face.ParseRev(rev); err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.persons[id]
	if !ok {
		return false, nil
	}
	p.Rev = rev
	t.put(p)
	return true, nil
}

// RefuseNext makes the terminal refuse (Options.RefuseCode, not applied) the next new
// command with op for the person id, once; the same messageId sent again is refused again,
// a later command is not.
func (t *Terminal) RefuseNext(op face.Op, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refuseNext = append(t.refuseNext, refusal{op: op, person: id})
}

// SendHeartbeat sends a heartbeat now (if online), besides those of HeartbeatInterval: a
// test that changed the terminal need not wait for the next tick.
func (t *Terminal) SendHeartbeat() { t.heartbeat() }

// Capacity returns the most persons the terminal holds (0: no limit).
func (t *Terminal) Capacity() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.capacity
}
