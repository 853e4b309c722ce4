package intake

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// Faces is the gateway's face store as the taker uses it (agent/faces's Store, adapted
// by the root): each message's faces are held from before its tasks change the desired
// whitelists until that change is durable, so that a face sweep in between never removes
// them.
type Faces interface {
	// Hold returns an empty hold for one message's faces.
	Hold() FaceHold
}

// FaceHold holds faces for one message (agent/faces's Pin). Its methods are called from
// one goroutine.
type FaceHold interface {
	// Put stores the face sha256 (its wire form) whose bytes are data, checking that they
	// hash to it, unless the store holds it already, and holds it; it returns once the
	// face is durable. An error wrapping ErrRefused refuses the task (over the store's
	// budget, naming [faces] max_bytes; data not hashing to sha256); any other error is
	// the store failing (the message is not taken).
	Put(sha256 string, data []byte) error
	// Keep holds the face sha256 if the store has it, and returns its size.
	Keep(sha256 string) (size int64, ok bool)
	// Release lets go of every face held: call it once the desired whitelists that refer
	// to them are durable (or the message was not taken).
	Release()
}

// OpenFaces keeps the faces the tasks bring in f from now on. Call it before Open.
// Without it, faces are not stored and a task's face is taken as it comes.
func (t *Taker) OpenFaces(f Faces) {
	if f == nil {
		t.faces.Store(nil)
		return
	}
	t.faces.Store(&f)
}

// Quiet runs fn while no message is between its first change to the desired whitelists
// and the outbox's answer (when an undo may still put back a record the message
// replaced): a face sweep reads the faces the desired whitelists refer to inside it.
func (t *Taker) Quiet(fn func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fn()
}

// takeFaces stores or holds, in the message's order, the faces of batch's tasks in h,
// and takes the tasks out of batch whose faces cannot be had: a face sent without data
// that the gateway does not hold, or one the store refuses (over its budget). An earlier
// task of the same message may bring the face a later one refers to without data. Their
// rejects are returned; err is the store failing.
func takeFaces(h FaceHold, batch *wire.Batch) (rejects []wire.Reject, err error) {
	batch.Filter(func(_ int, task *wire.Task) bool {
		if err != nil {
			return true // the message is not taken anyway
		}
		why := ""
		for k := range task.Faces {
			f := &task.Faces[k]
			if why, err = takeFace(h, task, f); why != "" || err != nil {
				break
			}
		}
		if why == "" {
			return true
		}
		raw, _ := json.Marshal(task)
		rejects = append(rejects, wire.NewReject(why, raw))
		return false
	})
	return rejects, err
}

// takeFace stores or holds one face of task; why is the reason the task is refused.
// A face sent without data gets the size the store has for it.
func takeFace(h FaceHold, task *wire.Task, f *wire.PersonFace) (why string, err error) {
	if f.Data != nil {
		if err := h.Put(f.SHA256, f.Data); err != nil {
			if errors.Is(err, ErrRefused) {
				return faceWhere(task, f) + err.Error(), nil
			}
			return "", fmt.Errorf("face store: %w", err)
		}
		return "", nil
	}
	size, ok := h.Keep(f.SHA256)
	switch {
	case !ok:
		return faceWhere(task, f) + "not held by this gateway, and sent without its data (send \"data\" with it once)", nil
	case f.Size != 0 && f.Size != size:
		return faceWhere(task, f) + fmt.Sprintf("size %d, but the face this gateway holds is %d bytes", f.Size, size), nil
	}
	f.Size = size
	return "", nil
}

// faceWhere names a face and its person in a reason: "face <sha256> of person "951": ".
func faceWhere(task *wire.Task, f *wire.PersonFace) string {
	id := task.Person.ID
	where := "person.face"
	if task.Op == wire.SetWhitelist && f.Person < len(task.Persons) {
		id = task.Persons[f.Person].ID
		where = "persons[" + strconv.Itoa(f.Person) + "].face"
	}
	return fmt.Sprintf("%s: face %s of person %q: ", where, f.SHA256, id)
}
