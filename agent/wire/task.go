package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Bounds on a task's fields, tighter than the terminal protocol's so that a MessageID built
// from them always fits face.MaxIDLen.
const (
	MaxTaskIDLen   = 128
	MaxPersonIDLen = 64
	MaxNameLen     = face.MaxTextLen
)

// SetWhitelist is the task op that replaces a terminal's whole desired whitelist with
// Task.Persons. It is an upstream op only: no terminal command carries it (the agent
// reconciles the terminal with the list through AddPerson and DeletePerson commands).
const SetWhitelist face.Op = "SetWhitelist"

// DefaultMaxWhitelist is the default bound on the persons of one SetWhitelist task
// (Limits.MaxWhitelist): the top face capacity of common door terminals, so that one list
// can fill any terminal the agent drives, while one parsed list stays within a few
// megabytes (docs/benchmarks.md, "SetWhitelist").
const DefaultMaxWhitelist = 50000

// Task is one whitelist task from the back office (docs/integration.md "Tasks"):
//
//	{"taskId":"t-1","deviceId":"2042253","op":"AddPerson","person":{"id":"951","name":"…","validFrom":"…","validTo":"…"}}
//	{"taskId":"t-2","deviceId":"2042253","op":"SetWhitelist","persons":[{"id":"951",…},…]}
//
// AddPerson and DeletePerson carry Person; SetWhitelist carries Persons (the terminal's
// whole desired list, empty to clear it; nil only when the message had no "persons").
// Parse decodes each person once, into Persons: the rest of the agent takes that slice as
// it is and must not modify it.
//
// A person of AddPerson or SetWhitelist may carry a face ("face":{"sha256","kind","data"}):
// Faces holds them in the order of the persons, each with the person's index (0 for
// Person). A DeletePerson's face is ignored (Parse leaves Faces nil).
type Task struct {
	TaskID   string        `json:"taskId"`
	DeviceID string        `json:"deviceId"`
	Op       face.Op       `json:"op"`
	Person   face.Person   `json:"person"`
	Persons  []face.Person `json:"persons"`
	Faces    []PersonFace  `json:"-"`
}

// MarshalJSON writes the task as the back office writes it: "person" for AddPerson and
// DeletePerson, "persons" for SetWhitelist (each written when it is set, so that what
// Parse refused is shown as it was read).
func (t Task) MarshalJSON() ([]byte, error) {
	w := struct {
		TaskID   string         `json:"taskId"`
		DeviceID string         `json:"deviceId"`
		Op       face.Op        `json:"op"`
		Person   *face.Person   `json:"person,omitempty"`
		Persons  *[]face.Person `json:"persons,omitempty"`
	}{TaskID: t.TaskID, DeviceID: t.DeviceID, Op: t.Op}
	if len(t.Faces) > 0 {
		return t.marshalWithFaces()
	}
	if t.Persons != nil {
		w.Persons = &t.Persons
	}
	if t.Persons == nil || t.Person != (face.Person{}) {
		w.Person = &t.Person
	}
	return json.Marshal(w)
}

// personOut is a person as MarshalJSON writes it with its face.
type personOut struct {
	face.Person
	Face *faceOut `json:"face,omitempty"`
}

// marshalWithFaces is MarshalJSON for a task whose persons carry faces.
func (t Task) marshalWithFaces() ([]byte, error) {
	w := struct {
		TaskID   string       `json:"taskId"`
		DeviceID string       `json:"deviceId"`
		Op       face.Op      `json:"op"`
		Person   *personOut   `json:"person,omitempty"`
		Persons  *[]personOut `json:"persons,omitempty"`
	}{TaskID: t.TaskID, DeviceID: t.DeviceID, Op: t.Op}
	out := func(f *PersonFace) *faceOut {
		return &faceOut{SHA256: f.SHA256, Kind: f.Kind, Size: f.Size, Data: f.Data}
	}
	faces := t.Faces
	if t.Persons != nil {
		persons := make([]personOut, len(t.Persons))
		for i := range t.Persons {
			persons[i].Person = t.Persons[i]
			if len(faces) > 0 && faces[0].Person == i {
				persons[i].Face = out(&faces[0])
				faces = faces[1:]
			}
		}
		w.Persons = &persons
	}
	if t.Persons == nil || t.Person != (face.Person{}) {
		w.Person = &personOut{Person: t.Person}
		if t.Persons == nil && len(faces) > 0 && faces[0].Person == 0 {
			w.Person.Face = out(&faces[0])
		}
	}
	return json.Marshal(w)
}

// MessageID is the id the task's command carries to the terminal, stable for the task:
//
//	<op>-<person id>-<n>
//
// where n is the first 63 bits of SHA-256 over the task's fields (taskId, deviceId, op,
// person id, name, validFrom, validTo, each length-prefixed), in decimal — the shape of the
// field report's "EditPerson-951-1494527067538440192" (docs/design.md "The field report").
// The same task always gets the same id (across resends and restarts, and when the back
// office redelivers it), so terminals can recognise duplicates; two tasks differing in any
// field get different ids. The op and person id up front keep ids readable in terminal
// logs.
//
// A SetWhitelist task's id is "SetWhitelist-<n>", n hashing taskId, deviceId, op and then
// every person's fields in order (messageIDSetWhitelist): it names the task in its result
// and in the outbox, and no terminal ever sees it.
//
// A task whose persons carry faces hashes each face's sha256 too (after the fields above,
// with its person's index for SetWhitelist), so a task that only changes a face gets a new
// id; a task without faces keeps the id it always had.
func (t *Task) MessageID() string {
	if t.Op == SetWhitelist {
		return t.messageIDSetWhitelist()
	}
	// The fields go into one buffer hashed by sha256.Sum256: a hash.Hash from sha256.New
	// and the []byte(f) conversions written to it escape to the heap, and every task gets
	// its id twice (validation and command). The bytes hashed are the same.
	var stack [1024]byte
	buf := stack[:0]
	for _, f := range [...]string{t.TaskID, t.DeviceID, string(t.Op), t.Person.ID, t.Person.Name, t.Person.ValidFrom, t.Person.ValidTo} {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(f)))
		buf = append(buf, f...)
	}
	for _, f := range t.Faces {
		// At most one, checked by validation; a sha256 is 64 bytes: it fits the stack buffer.
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(f.SHA256)))
		buf = append(buf, f.SHA256...)
	}
	sum := sha256.Sum256(buf)
	v := binary.BigEndian.Uint64(sum[:8]) >> 1
	var idb [face.MaxIDLen]byte // fits: see the bounds above
	b := append(idb[:0], t.Op...)
	b = append(b, '-')
	b = append(b, t.Person.ID...)
	b = append(b, '-')
	b = strconv.AppendUint(b, v, 10)
	return string(b)
}

// messageIDSetWhitelist is MessageID for a SetWhitelist task, the fields streamed into the
// hash (a list of 50,000 persons is megabytes) with the same length prefixes, and the
// number of persons ahead of them so that no list hashes like another.
func (t *Task) messageIDSetWhitelist() string {
	h := sha256.New()
	var buf [1024]byte
	b := buf[:0]
	field := func(f string) {
		if len(b)+4+len(f) > len(buf) {
			h.Write(b)
			b = buf[:0]
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		if len(f) > len(buf)-4 {
			h.Write(b)
			h.Write([]byte(f))
			b = buf[:0]
			return
		}
		b = append(b, f...)
	}
	field(t.TaskID)
	field(t.DeviceID)
	field(string(t.Op))
	b = binary.BigEndian.AppendUint64(b, uint64(len(t.Persons)))
	for i := range t.Persons {
		p := &t.Persons[i]
		field(p.ID)
		field(p.Name)
		field(p.ValidFrom)
		field(p.ValidTo)
	}
	for _, f := range t.Faces {
		if len(b)+8 > len(buf) {
			h.Write(b)
			b = buf[:0]
		}
		b = binary.BigEndian.AppendUint64(b, uint64(f.Person))
		field(f.SHA256)
	}
	h.Write(b)
	var sum [sha256.Size]byte
	v := binary.BigEndian.Uint64(h.Sum(sum[:0])[:8]) >> 1
	var idb [64]byte
	return string(strconv.AppendUint(append(idb[:0], "SetWhitelist-"...), v, 10))
}

// Command is the terminal command for the task. A SetWhitelist task's command is no
// terminal command: it carries the task's MessageID and op and no person (face's
// Command.Validate refuses it), and stands for the task in the outbox until its result;
// the list itself is Persons.
func (t *Task) Command() face.Command {
	return t.commandWithID(t.MessageID())
}

// An AddPerson command carries the person's face ref (FaceRef: sha256, size, kind; the
// data goes to the terminal on its own, with PutFace) and the agent's rev of the record
// with that face (face.PersonRecordRev), whatever rev the back office sent: the terminal
// stores it and a reconciliation compares it with the desired record's, which the agent
// computes the same way. Other commands carry neither.
func (t *Task) commandWithID(id string) face.Command {
	p := t.Person
	p.Rev, p.Face = "", face.FaceRef{}
	if t.Op == face.AddPerson {
		if len(t.Faces) > 0 {
			p.Face = t.Faces[0].Ref()
		}
		p.Rev = face.PersonRecordRev(&p).String()
	}
	return face.Command{MessageID: id, Op: t.Op, Person: p}
}

// Validate checks the task's fields; the error text becomes the deadletter reason.
// It does not know the configured devices: Parse checks those through Limits.
func (t *Task) Validate() error {
	_, err := t.validate()
	return err
}

// validate is Validate returning the task's MessageID as well (empty on error), so that
// Parse hashes each task once.
func (t *Task) validate() (messageID string, err error) {
	if err := t.validateFields(); err != nil {
		return "", err
	}
	if t.Op == SetWhitelist {
		// Each person passed the same checks as an AddPerson's person, which are
		// stricter than the terminal protocol's (FuzzParse checks each one).
		return t.MessageID(), nil
	}
	// What reaches the terminal must pass the terminal protocol's own checks.
	cmd := t.Command()
	if err := cmd.Validate(); err != nil {
		return "", err
	}
	return cmd.MessageID, nil
}

func (t *Task) validateFields() error {
	if err := checkID("taskId", t.TaskID, MaxTaskIDLen); err != nil {
		return err
	}
	if err := checkID("deviceId", t.DeviceID, face.MaxIDLen); err != nil {
		return err
	}
	switch t.Op {
	case face.AddPerson, face.DeletePerson:
		if t.Persons != nil {
			return fmt.Errorf("persons: only %s carries persons (%s takes one person)", SetWhitelist, t.Op)
		}
		if err := checkPerson("person.", &t.Person); err != nil {
			return err
		}
		return t.checkFaces()
	case SetWhitelist:
		if err := t.validatePersons(); err != nil {
			return err
		}
		return t.checkFaces()
	case "":
		return fmt.Errorf("op: missing (want %q, %q or %q)", face.AddPerson, face.DeletePerson, SetWhitelist)
	default:
		return fmt.Errorf("op: unknown op %.64q (want %q, %q or %q)", string(t.Op), face.AddPerson, face.DeletePerson, SetWhitelist)
	}
}

// validatePersons checks a SetWhitelist task's list: present, each person valid as an
// AddPerson's person, no person id twice (the terminal holds one record per id, so a
// repeated id would leave which record wins to chance). The bound on the list's length
// is Limits.MaxWhitelist, checked by Parse.
func (t *Task) validatePersons() error {
	if t.Person != (face.Person{}) {
		return fmt.Errorf("person: %s takes the list in persons, not a person", SetWhitelist)
	}
	if t.Persons == nil {
		return errors.New(`persons: missing (an empty whitelist is "persons":[])`)
	}
	seen := make(map[string]int, len(t.Persons))
	for i := range t.Persons {
		p := &t.Persons[i]
		where := "persons[" + strconv.Itoa(i) + "]"
		if p.ID != "" && len(p.ID) <= MaxPersonIDLen {
			where += fmt.Sprintf(" (id %q)", p.ID)
		}
		if err := checkPerson("", p); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if first, dup := seen[p.ID]; dup {
			return fmt.Errorf("persons: duplicate person id %q (persons[%d] and persons[%d])", p.ID, first, i)
		}
		seen[p.ID] = i
	}
	return nil
}

// checkPerson checks a person's fields, each error naming the field with prefix before it.
func checkPerson(prefix string, p *face.Person) error {
	if err := checkID(prefix+"id", p.ID, MaxPersonIDLen); err != nil {
		return err
	}
	if len(p.Name) > MaxNameLen {
		return fmt.Errorf("%sname: longer than %d bytes", prefix, MaxNameLen)
	}
	from, err := checkTime(prefix+"validFrom", p.ValidFrom)
	if err != nil {
		return err
	}
	to, err := checkTime(prefix+"validTo", p.ValidTo)
	if err != nil {
		return err
	}
	if !from.IsZero() && !to.IsZero() && to.Before(from) {
		return fmt.Errorf("%svalidTo: %s is before validFrom %s", prefix, p.ValidTo, p.ValidFrom)
	}
	return nil
}

func checkID(field, v string, max int) error {
	switch {
	case v == "":
		return fmt.Errorf("%s: missing", field)
	case len(v) > max:
		return fmt.Errorf("%s: longer than %d bytes", field, max)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s: not UTF-8", field)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s: %.64q contains a control character", field, v)
		}
	}
	return nil
}

func checkTime(field, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if len(v) > 64 {
		return time.Time{}, fmt.Errorf("%s: longer than 64 bytes", field)
	}
	ts, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q is not an RFC 3339 time", field, v)
	}
	return ts, nil
}

// Limits are the bounds Parse enforces. Zero values mean: no bound (MaxBatch,
// MaxMessageSize), every device known (KnownDevice nil), and SetWhitelist tasks refused
// (MaxWhitelist).
type Limits struct {
	MaxBatch       int
	MaxMessageSize int
	// MaxWhitelist is the most persons one SetWhitelist task may carry
	// (DefaultMaxWhitelist is the usual value). 0 refuses SetWhitelist tasks: a gateway
	// takes them only where something keeps the desired lists they set.
	MaxWhitelist int
	// KnownDevice reports whether a device id is configured on this gateway.
	KnownDevice func(id string) bool
}

// Batch is the outcome of parsing one upstream message: the accepted tasks, in the order
// received, and the refused parts, each with its reason.
type Batch struct {
	Tasks   []Task
	Rejects []Reject
	// ids[i] is Tasks[i].MessageID(), computed by Parse while validating.
	ids []string
}

// Command is the terminal command for Tasks[i]: Tasks[i].Command() without hashing the
// task a second time when Parse already did.
func (b *Batch) Command(i int) face.Command {
	if i < len(b.ids) {
		return b.Tasks[i].commandWithID(b.ids[i])
	}
	return b.Tasks[i].Command()
}

// Filter keeps, in order, the tasks for which keep is true (i is the task's index before
// the call), with the ids Parse computed for them.
func (b *Batch) Filter(keep func(i int, t *Task) bool) {
	n := 0
	for i := range b.Tasks {
		if !keep(i, &b.Tasks[i]) {
			continue
		}
		b.Tasks[n] = b.Tasks[i]
		if i < len(b.ids) && n < len(b.ids) {
			b.ids[n] = b.ids[i]
		}
		n++
	}
	clear(b.Tasks[n:]) // the refused tasks' faces are not kept alive by the slice
	b.Tasks = b.Tasks[:n]
	if len(b.ids) > n {
		b.ids = b.ids[:n]
	}
}

// Parse reads one upstream task message: a task object or a JSON array of them. It never
// fails as a whole: what cannot be accepted comes back as Rejects, so the caller can
// acknowledge the message (it is not redelivered forever) and dead-letter the rejects. In a
// batch, good tasks are accepted even when others are refused. A second task with a taskId
// already seen in the same batch is refused.
func Parse(payload []byte, lim Limits) Batch {
	var b Batch
	if lim.MaxMessageSize > 0 && len(payload) > lim.MaxMessageSize {
		b.reject(payload, fmt.Sprintf("message too large: %d bytes (max_message_size %d)", len(payload), lim.MaxMessageSize))
		return b
	}
	trimmed := bytes.TrimSpace(payload)
	clean, ok := parseClean(trimmed, lim)
	if ok {
		return clean
	}
	return parseElementwise(payload, trimmed, lim, clean.Tasks)
}

// parseElementwise is Parse taking a batch apart element by element, so that each bad
// task is refused on its own with the reason; trimmed is payload without surrounding
// space. decoded, when not nil, is parseClean's decode of the whole message, one task per
// element: each element's task is taken from it instead of decoding the element again
// (a task's face would be decoded twice).
func parseElementwise(payload, trimmed []byte, lim Limits, decoded []Task) Batch {
	var b Batch
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var elems []rawElement
		if err := json.Unmarshal(trimmed, &elems); err != nil {
			b.reject(payload, "malformed JSON: "+jsonProblem(err))
			return b
		}
		if lim.MaxBatch > 0 && len(elems) > lim.MaxBatch {
			b.reject(payload, fmt.Sprintf("batch too large: %d tasks (max_batch %d)", len(elems), lim.MaxBatch))
			return b
		}
		if len(decoded) != len(elems) {
			decoded = nil
		}
		seen := make(map[string]struct{}, len(elems))
		b.Tasks = make([]Task, 0, len(elems))
		for i, e := range elems {
			var t *Task
			if decoded != nil {
				t = &decoded[i]
			}
			b.one(e, t, lim, i, seen)
		}
		return b
	}
	if !json.Valid(trimmed) {
		var v any
		err := json.Unmarshal(trimmed, &v)
		b.reject(payload, "malformed JSON: "+jsonProblem(err))
		return b
	}
	var t *Task
	if len(decoded) == 1 {
		t = &decoded[0]
	}
	b.one(trimmed, t, lim, -1, nil)
	return b
}

// rawElement is one element of a batch: the bytes of the message it came from, not a copy
// (json.RawMessage copies), so that a batch carrying faces is not held twice. It lives
// only while Parse runs: a task decodes into values of its own and a Reject copies
// what it keeps.
type rawElement []byte

// UnmarshalJSON keeps b, a slice of the message being parsed.
func (r *rawElement) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

// one parses the task at index i of a batch (-1: the message is a single task), raw as
// received; decoded, if not nil, is raw already decoded. The "task i: " prefix of a
// reason is only built for a reject.
func (b *Batch) one(raw []byte, decoded *Task, lim Limits, i int, seen map[string]struct{}) {
	where := func() string {
		if i < 0 {
			return ""
		}
		return "task " + strconv.Itoa(i) + ": "
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		b.reject(raw, where()+"not a task: want a JSON object or an array of objects")
		return
	}
	var t Task
	if decoded != nil {
		t = *decoded
	} else if err := json.Unmarshal(raw, &t); err != nil {
		b.reject(raw, where()+"invalid task: "+jsonProblem(err))
		return
	}
	if err := lim.checkWhitelist(&t); err != nil {
		b.reject(raw, where()+err.Error())
		return
	}
	id, err := t.validate()
	if err != nil {
		b.reject(raw, where()+"invalid task: "+err.Error())
		return
	}
	if lim.KnownDevice != nil && !lim.KnownDevice(t.DeviceID) {
		b.reject(raw, fmt.Sprintf("%sunknown device %q", where(), t.DeviceID))
		return
	}
	if seen != nil {
		if _, dup := seen[t.TaskID]; dup {
			b.reject(raw, fmt.Sprintf("%sduplicate taskId %q in batch", where(), t.TaskID))
			return
		}
		seen[t.TaskID] = struct{}{}
	}
	b.Tasks = append(b.Tasks, t)
	b.ids = append(b.ids, id)
}

// parseClean is Parse for a message with nothing to refuse, the usual case: one decode
// straight into the tasks (parsePlainTasks for the plain JSON back offices write, else
// one json.Unmarshal) instead of splitting a batch into raw elements and decoding each
// again, and each task hashed once. ok is false as soon as anything would be refused
// (malformed JSON, a wrong type, a null element, an invalid or duplicate task, an unknown
// device, a batch over MaxBatch): Parse then starts over on the path that finds and words
// each reject. Both paths decode with the same encoding/json rules into the same Task, so
// an accepted message gives the same tasks either way (FuzzParseCleanSameAsElementwise,
// FuzzParsePlainTasks).
func parseClean(msg []byte, lim Limits) (b Batch, ok bool) {
	if len(msg) == 0 {
		return b, false
	}
	switch msg[0] {
	case '{', '[':
		if tasks, ok := parsePlainTasks(msg); ok {
			b.Tasks = tasks
			break
		}
		if msg[0] == '{' {
			var t Task
			if json.Unmarshal(msg, &t) != nil {
				return Batch{}, false
			}
			b.Tasks = []Task{t}
		} else if json.Unmarshal(msg, &b.Tasks) != nil {
			return Batch{}, false // what decoded may be partial
		}
	default:
		return b, false
	}
	if lim.MaxBatch > 0 && len(b.Tasks) > lim.MaxBatch {
		return Batch{}, false
	}
	// From here the whole message decoded: a refusal returns the decoded tasks, which the
	// element-wise path takes instead of decoding each element again.
	decoded := Batch{Tasks: b.Tasks}
	b.ids = make([]string, len(b.Tasks))
	var seen map[string]struct{}
	if len(b.Tasks) > 1 {
		seen = make(map[string]struct{}, len(b.Tasks))
	}
	for i := range b.Tasks {
		t := &b.Tasks[i]
		if lim.checkWhitelist(t) != nil {
			return decoded, false
		}
		id, err := t.validate()
		if err != nil || (lim.KnownDevice != nil && !lim.KnownDevice(t.DeviceID)) {
			return decoded, false
		}
		if seen != nil {
			if _, dup := seen[t.TaskID]; dup {
				return decoded, false
			}
			seen[t.TaskID] = struct{}{}
		}
		b.ids[i] = id
	}
	if b.Tasks == nil {
		b.Tasks = []Task{} // "[]": as the element-wise path returns it
	}
	return b, true
}

// checkWhitelist refuses a SetWhitelist task this gateway does not take or whose list is
// over MaxWhitelist, before its persons are validated one by one.
func (lim *Limits) checkWhitelist(t *Task) error {
	if t.Op != SetWhitelist {
		return nil
	}
	switch {
	case lim.MaxWhitelist <= 0:
		return fmt.Errorf("%s: not taken by this gateway", SetWhitelist)
	case len(t.Persons) > lim.MaxWhitelist:
		return fmt.Errorf("whitelist too large: %d persons (intake.max_whitelist %d)", len(t.Persons), lim.MaxWhitelist)
	}
	return nil
}

func (b *Batch) reject(payload []byte, reason string) {
	b.Rejects = append(b.Rejects, NewReject(reason, payload))
}

// jsonProblem shortens encoding/json's messages ("json: cannot unmarshal string into Go
// struct field Task.person of type face.Person") to what a back office developer needs.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case err == nil:
		return "invalid"
	case asType(err, &te):
		return fmt.Sprintf("%s: want %s, got JSON %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
	case asType(err, &se):
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	}
	return err.Error()
}

func jsonKind(goKind string) string {
	switch goKind {
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "string":
		return "a string"
	case "int", "int64", "uint64", "float64":
		return "a number"
	case "bool":
		return "a boolean"
	}
	return goKind
}
