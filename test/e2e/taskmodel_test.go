package e2e

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// taskModel is what the tasks a randomized run took make of each terminal's desired list,
// computed from the tasks (not read from the agent), and the drawing of new tasks over a
// pool of person ids (p0, p1, …) and a pool of shared faces, so that terminals and persons
// share faces and the gateway's sweep has faces to keep and to remove. The property test
// and the soak both drive the whole daemon with it.
type taskModel struct {
	rand    *rand.Rand // the run's random source
	persons int        // the pool of person ids: p0 … p<persons-1>
	faces   []testFace
	// faceWeights are the odds of each face in a draw, then of none.
	faceWeights []int
	model       map[string]map[string]desiredPerson // device → person id → what the tasks desire
	brought     map[string]bool                     // the faces a task brought the data of
	tasks, name int                                 // task ids and names drawn so far: each is new
}

// newTaskModel makes a model of devs with empty lists, and the faces of the given sizes
// (templates and photos in turn, contents from seed).
func newTaskModel(r *rand.Rand, seed uint64, devs []string, persons int, faceSizes, faceWeights []int) taskModel {
	m := taskModel{rand: r, persons: persons, faceWeights: faceWeights,
		model: map[string]map[string]desiredPerson{}, brought: map[string]bool{}}
	for i, n := range faceSizes {
		m.faces = append(m.faces, newTestFace(int(seed%1000)+i, n, []string{"template", "photo"}[i%2]))
	}
	for _, dev := range devs {
		m.model[dev] = map[string]desiredPerson{}
	}
	return m
}

func (m *taskModel) nextTaskID() string {
	m.tasks++
	return fmt.Sprint("task-", m.tasks)
}

// drawFace draws a person's face from the pool, or none.
func (m *taskModel) drawFace() *testFace {
	total := 0
	for _, w := range m.faceWeights {
		total += w
	}
	n := m.rand.IntN(total)
	for i := range m.faces {
		if n -= m.faceWeights[i]; n < 0 {
			return &m.faces[i]
		}
	}
	return nil
}

// newPerson is person id with a name never drawn before and a face drawn from the pool.
func (m *taskModel) newPerson(id string) face.Person {
	m.name++
	return m.person(id, desiredPerson{name: fmt.Sprint("name ", m.name), face: m.drawFace()})
}

// person is q as a task's person with id.
func (m *taskModel) person(id string, q desiredPerson) face.Person {
	out := face.Person{ID: id, Name: q.name}
	if q.face != nil {
		out.Face = face.FaceRef{SHA256: q.face.sum, Kind: face.FaceKind(q.face.kind)}
	}
	return out
}

// modelPerson is a task's person as the model keeps it.
func (m *taskModel) modelPerson(q face.Person) desiredPerson {
	out := desiredPerson{name: q.Name}
	for i := range m.faces {
		if m.faces[i].sum == q.Face.SHA256 {
			out.face = &m.faces[i]
		}
	}
	return out
}

// taskFor draws a task of op (AddPerson or DeletePerson) for dev over the pool of ids.
func (m *taskModel) taskFor(dev string, op face.Op) wire.Task {
	p := face.Person{ID: fmt.Sprint("p", m.rand.IntN(m.persons))}
	if op == face.AddPerson {
		p = m.newPerson(p.ID)
	}
	return wire.Task{TaskID: m.nextTaskID(), DeviceID: dev, Op: op, Person: p}
}

// setWhitelistFor draws a SetWhitelist for dev over the pool: of each id, kept as the
// model has it, renamed, or left out, so that the task adds, changes, keeps and deletes.
func (m *taskModel) setWhitelistFor(dev string) wire.Task {
	persons := []face.Person{}
	for i := range m.persons {
		id := fmt.Sprint("p", i)
		q, held := m.model[dev][id]
		switch k := m.rand.IntN(3); {
		case k == 0:
			continue
		case k == 1 && held:
			persons = append(persons, m.person(id, q))
		default:
			persons = append(persons, m.newPerson(id))
		}
	}
	return wire.Task{TaskID: m.nextTaskID(), DeviceID: dev, Op: wire.SetWhitelist, Persons: persons}
}

// heldFaces are the faces the gateway holds for sure: those a desired person refers to
// (a face only an earlier, replaced record used may be swept any time).
func (m *taskModel) heldFaces() map[string]bool {
	held := map[string]bool{}
	for _, persons := range m.model {
		for _, q := range persons {
			if q.face != nil {
				held[q.face.sum] = true
			}
		}
	}
	return held
}

// apply makes the model what a taken task t desires; for a SetWhitelist it returns the
// counts of t against the list it replaced.
func (m *taskModel) apply(t wire.Task) wire.WhitelistCounts {
	var c wire.WhitelistCounts
	switch t.Op {
	case face.AddPerson:
		m.model[t.DeviceID][t.Person.ID] = m.modelPerson(t.Person)
	case face.DeletePerson:
		delete(m.model[t.DeviceID], t.Person.ID)
	case wire.SetWhitelist:
		old, list := m.model[t.DeviceID], map[string]desiredPerson{}
		for _, q := range t.Persons {
			list[q.ID] = m.modelPerson(q)
			if was, ok := old[q.ID]; ok && was == list[q.ID] {
				c.Unchanged++
			} else {
				c.Added++
			}
		}
		for id := range old {
			if _, ok := list[id]; !ok {
				c.Deleted++
			}
		}
		m.model[t.DeviceID] = list
	}
	return c
}

// taskJSON is t as the back office writes it, each face with its data unless held has
// it and a draw leaves the data out, and a line for a trace.
func (m *taskModel) taskJSON(t wire.Task, held map[string]bool) (js, note string) {
	personJSONOf := func(q face.Person) (string, string) {
		d := m.modelPerson(q)
		if d.face == nil {
			return personJSON(q.ID, q.Name, nil, false), fmt.Sprintf("%s=%q", q.ID, q.Name)
		}
		withData := !held[d.face.sum] || m.rand.IntN(2) == 0
		note := fmt.Sprintf("%s=%q+%.8s", q.ID, q.Name, d.face.sum)
		if !withData {
			note += "(no data)"
		}
		m.brought[d.face.sum] = m.brought[d.face.sum] || withData
		return personJSON(q.ID, q.Name, d.face, withData), note
	}
	head := fmt.Sprintf(`{"taskId":%q,"deviceId":%q,"op":%q`, t.TaskID, t.DeviceID, t.Op)
	switch t.Op {
	case wire.SetWhitelist:
		var js, notes []string
		for _, q := range t.Persons {
			j, n := personJSONOf(q)
			js, notes = append(js, j), append(notes, n)
		}
		return head + `,"persons":[` + strings.Join(js, ",") + "]}",
			fmt.Sprintf("  %s %s %s [%s]", t.TaskID, t.DeviceID, t.Op, strings.Join(notes, " "))
	case face.DeletePerson:
		return head + fmt.Sprintf(`,"person":{"id":%q}}`, t.Person.ID),
			fmt.Sprintf("  %s %s %s %s", t.TaskID, t.DeviceID, t.Op, t.Person.ID)
	default:
		j, n := personJSONOf(t.Person)
		return head + `,"person":` + j + "}", fmt.Sprintf("  %s %s %s %s", t.TaskID, t.DeviceID, t.Op, n)
	}
}

// messageJSON is ts as one message (an array when more than one), and its trace lines.
func (m *taskModel) messageJSON(ts []wire.Task) ([]byte, []string) {
	held := m.heldFaces()
	var parts, notes []string
	for _, t := range ts {
		j, n := m.taskJSON(t, held)
		parts, notes = append(parts, j), append(notes, n)
	}
	if len(ts) == 1 {
		return []byte(parts[0]), notes
	}
	return []byte("[" + strings.Join(parts, ",") + "]"), notes
}

// wrongFaces lists the faces of the persons term holds that it does not hold byte for
// byte as the pool has them.
func (m *taskModel) wrongFaces(dev string, term *sim.Terminal) []string {
	var wrong []string
	for _, q := range term.Persons() {
		d := m.modelPerson(q)
		if q.Face.SHA256 == "" || d.face == nil {
			continue // no face, or one not of the pool (the lists say which is wrong)
		}
		if got, ok := term.Face(q.Face.SHA256); !ok || !bytes.Equal(got, d.face.data) {
			wrong = append(wrong, fmt.Sprintf("%s: %s's face %.8s held %v, byte-exact %v", dev, q.ID, q.Face.SHA256, ok, bytes.Equal(got, d.face.data)))
		}
	}
	return wrong
}

// fleetTerminal is terminal dev of one of fleets.
func fleetTerminal(t testing.TB, fleets []*sim.Fleet, dev string) *sim.Terminal {
	for _, f := range fleets {
		if term := f.Terminal(dev); term != nil {
			return term
		}
	}
	t.Fatalf("no terminal %s", dev)
	return nil
}
