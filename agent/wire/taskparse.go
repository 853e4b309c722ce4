package wire

import (
	"bytes"

	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/internal/jsonplain"
)

// maxSharedMessage bounds the messages whose decoded strings share one copy of the message
// (one allocation per message instead of one per field; the outbox copies what it keeps, so
// the copy goes with the batch). Above it each field gets its own copy.
const maxSharedMessage = 256 << 10

// parsePlainTasks decodes msg — a task object, or an array of them — as encoding/json
// decodes it into a Task or a []Task, when msg is written in the plain subset the back
// office writes (internal/jsonplain): the fields by their exact names (any order; a
// repeated one: the last wins, a repeated "person" merges, as with encoding/json), white
// space anywhere JSON allows it, strings in valid UTF-8 with no escape and no control
// character. It gives up (ok false) on anything else — another spelling of a key, an
// unknown member, null, an escape, a number, malformed JSON — and parseClean then
// decodes with encoding/json, which gives that input the same answer as before
// (FuzzParsePlainTasks). A batch of 64 tasks was 64 reflective decodes and about 400
// string allocations; here it is one copy of the message.
//
// Face data is decoded from the message into one buffer per face (plainFace); a message
// that carries any gets a copy per string instead of one shared copy, which would hold
// the base64 a second time.
func parsePlainTasks(msg []byte) (tasks []Task, ok bool) {
	share := maxSharedMessage
	if bytes.Contains(msg, []byte(`"data"`)) {
		share = 0
	}
	p := jsonplain.NewScanner(msg, share)
	p.Space()
	if !p.Byte('[') {
		var t Task
		if !plainTask(&p, &t) || !p.End() {
			return nil, false
		}
		return []Task{t}, true
	}
	tasks = make([]Task, 0, bytes.Count(msg, []byte(`"taskId"`)))
	p.Space()
	if p.Byte(']') {
		return tasks, p.End()
	}
	for {
		tasks = append(tasks, Task{})
		if !plainTask(&p, &tasks[len(tasks)-1]) {
			return nil, false
		}
		p.Space()
		if p.Byte(']') {
			break
		}
		if !p.Byte(',') {
			return nil, false
		}
	}
	if !p.End() {
		return nil, false
	}
	return tasks, true
}

// plainTask reads one task object into t, the persons' faces into t.Faces.
func plainTask(p *jsonplain.Scanner, t *Task) bool {
	persons := false
	var personFace *Face
	ok := p.Object(func(key []byte) bool {
		switch string(key) { // compared without a copy
		case "taskId":
			return p.Str(&t.TaskID)
		case "deviceId":
			return p.Str(&t.DeviceID)
		case "op":
			return face.ScanPlainOp(p, &t.Op)
		case "person":
			return plainPerson(p, &t.Person, &personFace)
		case "persons":
			// A repeated "persons" is left to encoding/json, which decodes the second
			// list over the first one's elements.
			if persons {
				return false
			}
			persons = true
			return plainPersons(p, &t.Persons, &t.Faces)
		}
		return false
	})
	if !ok {
		return false
	}
	if personFace != nil {
		// encoding/json gives "person"'s face first, then those of "persons".
		t.Faces = append([]PersonFace{{Person: 0, Face: *personFace}}, t.Faces...)
	}
	if t.Op == face.DeletePerson {
		t.Faces = nil // ignored, as Task.UnmarshalJSON ignores it
	}
	return true
}

// plainPersons reads an array of person objects into *dst, their faces into *faces: an
// empty array gives an empty slice that is not nil, as with encoding/json (nil means
// "persons" was absent).
func plainPersons(p *jsonplain.Scanner, dst *[]face.Person, faces *[]PersonFace) bool {
	p.Space()
	if !p.Byte('[') {
		return false
	}
	persons := []face.Person{}
	p.Space()
	if p.Byte(']') {
		*dst = persons
		return true
	}
	for {
		persons = append(persons, face.Person{})
		var f *Face
		if !plainPerson(p, &persons[len(persons)-1], &f) {
			return false
		}
		if f != nil {
			*faces = append(*faces, PersonFace{Person: len(persons) - 1, Face: *f})
		}
		p.Space()
		if p.Byte(']') {
			break
		}
		if !p.Byte(',') {
			return false
		}
	}
	*dst = persons
	return true
}
