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
func parsePlainTasks(msg []byte) (tasks []Task, ok bool) {
	p := jsonplain.NewScanner(msg, maxSharedMessage)
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

// plainTask reads one task object into t.
func plainTask(p *jsonplain.Scanner, t *Task) bool {
	persons := false
	return p.Object(func(key []byte) bool {
		switch string(key) { // compared without a copy
		case "taskId":
			return p.Str(&t.TaskID)
		case "deviceId":
			return p.Str(&t.DeviceID)
		case "op":
			return face.ScanPlainOp(p, &t.Op)
		case "person":
			return face.ScanPlainPerson(p, &t.Person)
		case "persons":
			// A repeated "persons" is left to encoding/json, which decodes the second
			// list over the first one's elements.
			if persons {
				return false
			}
			persons = true
			return plainPersons(p, &t.Persons)
		}
		return false
	})
}

// plainPersons reads an array of person objects into *dst: an empty array gives an empty
// slice that is not nil, as with encoding/json (nil means "persons" was absent).
func plainPersons(p *jsonplain.Scanner, dst *[]face.Person) bool {
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
		if !face.ScanPlainPerson(p, &persons[len(persons)-1]) {
			return false
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
