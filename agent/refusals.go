package agent

import (
	"log/slog"
	"sync/atomic"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// taskRefusals keeps each terminal's desired whitelist in step with what the terminal
// did with the back office's AddPerson tasks (the outbox's Acked). A task the terminal
// refused takes that very record (by rev) out of the terminal's desired list
// (whitelist.Store.Exclude), so that no repair sends it again and the terminal is judged
// in sync without it: a refusal never turns into a repair loop. A later task for the
// person puts it back (the intake's Set or Delete, whatever the record), and so does a
// task with that same record that the terminal then took (Include: a failure retried,
// or a task for the same record taken while the refused one was in flight, which Set
// found not excluded yet). An exclusion of an older record is a no-op: Exclude acts only
// while rev is the desired record's.
//
// Codes 21 to 23 (a face missing or bad, the terminal full) say nothing against the
// record: they leave it desired, as they do for the reconciler's own corrections.
//
// The exclusion is journalled like any update of the desired lists (durable with the
// journal's next sync, as the outbox's failure record is); an ack told just before a
// crash whose exclusion did not reach the disk leaves the record desired, and the first
// repair's refused correction excludes it (the reconciler does that for its own).
type taskRefusals struct {
	wl      atomic.Pointer[whitelist.Store] // set once the desired whitelists are open
	changed func(dev string)                // told of each terminal whose list this changed
	log     *slog.Logger
}

// acked is the outbox's Acked.
func (r *taskRefusals) acked(dev string, cmd outbox.Command, code int) {
	wl := r.wl.Load()
	if wl == nil || cmd.Op != string(face.AddPerson) || cmd.Payload == nil {
		return
	}
	switch code {
	case 0:
		if !wl.Excluded(dev, cmd.PersonID) { // the common case, without decoding the command
			return
		}
	case face.CodeFaceMissing, face.CodeFaceHash, face.CodeCapacity:
		return
	}
	var c face.Command
	if _, err := c.UnmarshalMsg(cmd.Payload); err != nil || c.Person.ID != cmd.PersonID {
		r.log.Error("whitelist: a task's command cannot be read back; its refusal leaves the person desired",
			"device", dev, "message", cmd.MessageID, "err", err)
		return
	}
	rec := record(&c.Person)
	rec.Face = c.Person.Face // the command carries the face its record was desired with
	rev := rec.Rev()
	var changed bool
	var err error
	if code == 0 {
		changed, err = wl.Include(dev, c.Person.ID, rev)
	} else {
		changed, err = wl.Exclude(dev, c.Person.ID, rev)
	}
	switch {
	case err != nil:
		r.log.Error("whitelist: cannot follow a task's outcome in the desired list",
			"device", dev, "person", c.Person.ID, "code", code, "err", err)
	case changed:
		if code != 0 {
			r.log.Info("whitelist: the terminal refused a person's record; it leaves the desired list until a task changes it",
				"device", dev, "person", c.Person.ID, "rev", rev.String(), "code", code)
		}
		if r.changed != nil {
			r.changed(dev)
		}
	}
}
