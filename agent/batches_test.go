package agent

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

func (r *faceRig) deletePerson(dev, id, person string) {
	r.t.Helper()
	payload, err := (&face.Command{MessageID: id, Op: face.DeletePerson, Person: face.Person{ID: person}}).AppendMsg(nil)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.ob.Enqueue(outbox.Task{MessageID: id, TaskID: "task-" + id, DeviceID: dev, Op: string(face.DeletePerson),
		PersonID: person, Payload: payload}); err != nil {
		r.t.Fatal(err)
	}
}

// A mixed run to a terminal taking batches of 8, over MQTT and serial, strict mode:
// AddPersons with and without faces, DeletePersons between them, a face the terminal
// loses mid-run (21 inside a batch), and a person refused for capacity inside a batch.
// Every person ends on the terminal byte for byte as sent, the refused one alone fails,
// and the terminal never sees two commands in flight.
func TestBatchesEndToEnd(t *testing.T) {
	eachFaceTransport(t, func(t *testing.T, transport string, chunk int) {
		r := newFaceRig(t, transport, []string{"t1"}, sim.Options{Seed: 3, Batch: 8, PersonTime: time.Millisecond},
			outbox.Settings{RetryInterval: 2 * time.Second, MaxBatch: 30}, chunk)
		term := r.fleet.Terminal("t1")
		shaA, dataA := r.putFace(6<<10, 21)
		shaB, dataB := r.putFace(3<<10, 22)
		want := map[string]face.Person{}
		var ids []string
		add := func(i int, sha string, size int) {
			id, person := fmt.Sprintf("m%03d", i), fmt.Sprintf("p%03d", i)
			if sha == "" {
				want[person] = r.addPersonNoFace("t1", id, person)
			} else {
				want[person] = r.addPerson("t1", id, person, sha, size)
			}
			ids = append(ids, id)
		}
		superseded := map[string]bool{}
		r.ob.Pause("t1") // the first round queues whole: batches from the start
		for i := range 40 {
			switch {
			case i%3 == 0:
				add(i, shaA, len(dataA))
			case i%5 == 0:
				add(i, shaB, len(dataB))
			default:
				add(i, "", 0)
			}
			if i == 12 || i == 27 {
				del := fmt.Sprintf("p%03d", i-7)
				id := fmt.Sprintf("d%03d", i)
				r.deletePerson("t1", id, del)
				delete(want, del)
				ids = append(ids, id)
				superseded[fmt.Sprintf("m%03d", i-7)] = true // never sent: coalesced
			}
		}
		r.ob.Resume("t1")
		for id, x := range r.results(ids...) {
			if superseded[id] && x.Status == outbox.Superseded {
				continue
			}
			if x.Status != outbox.Succeeded || x.Tries != 1 {
				t.Errorf("%s: %+v", id, x)
			}
		}
		if st := term.Stats(); st.Batches < 4 {
			t.Errorf("%d batches for 40 persons", st.Batches)
		}

		// The terminal loses face A; a batch with two of its persons gets 21 for them.
		if !term.DeleteFace(shaA) {
			t.Fatal("face A not held")
		}
		r.ob.Pause("t1")
		ids = ids[:0]
		add(100, shaA, len(dataA))
		add(101, "", 0)
		add(102, shaA, len(dataA))
		r.ob.Resume("t1")
		for id, x := range r.results(ids...) {
			if x.Status != outbox.Succeeded || x.Tries != 1 {
				t.Errorf("%s: %+v", id, x)
			}
		}

		// A full terminal refuses the second new person of a batch: that task alone fails.
		if err := term.SetCapacity(len(term.Persons()) + 1); err != nil {
			t.Fatal(err)
		}
		r.ob.Pause("t1")
		ids = ids[:0]
		add(200, shaB, len(dataB))
		add(201, "", 0)
		delete(want, "p201")
		r.ob.Resume("t1")
		res := r.results(ids...)
		if x := res["m200"]; x.Status != outbox.Succeeded {
			t.Errorf("m200: %+v", x)
		}
		if x := res["m201"]; x.Status != outbox.Failed || x.Err != "capacity" {
			t.Errorf("m201: %+v", x)
		}

		if n, w := r.sent("t1"), 2*len(dataA)+len(dataB); n != w {
			t.Errorf("%d face bytes sent, want %d (A twice: once more after the 21, B once)", n, w)
		}
		got := map[string]face.Person{}
		for _, p := range term.Persons() {
			got[p.ID] = p
		}
		if !maps.Equal(got, want) {
			t.Errorf("terminal holds %d persons, want %d; differ: %v", len(got), len(want), diffPersons(got, want))
		}
		for sha, data := range map[string][]byte{shaA: dataA, shaB: dataB} {
			if b, ok := term.Face(sha); !ok || !bytes.Equal(b, data) {
				t.Errorf("face %s: held %v, byte-exact %v", sha[:8], ok, bytes.Equal(b, data))
			}
		}
		if err := r.fleet.Violations(); err != nil {
			t.Error(err)
		}
	})
}

// addPersonNoFace queues an AddPerson for a person without a face.
func (r *faceRig) addPersonNoFace(dev, id, person string) face.Person {
	r.t.Helper()
	p := face.Person{ID: person, Name: "N " + person}
	p.Rev = face.RecordRev(p.ID, p.Name, p.ValidFrom, p.ValidTo, "").String()
	payload, err := (&face.Command{MessageID: id, Op: face.AddPerson, Person: p}).AppendMsg(nil)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.ob.Enqueue(outbox.Task{MessageID: id, TaskID: "task-" + id, DeviceID: dev, Op: string(face.AddPerson),
		PersonID: person, Payload: payload}); err != nil {
		r.t.Fatal(err)
	}
	return p
}

func diffPersons(got, want map[string]face.Person) []string {
	var d []string
	for id, p := range want {
		if g, ok := got[id]; !ok || g != p {
			d = append(d, id)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			d = append(d, id)
		}
	}
	slices.Sort(d)
	return d
}

// deviceConfig carries a device's face chunk and, for a serial terminal, its frame bound,
// in both places that use it: opening the outbox and a remote override's SetDevice (which
// used to drop the face chunk, sending a serial terminal 64 KiB chunks after an override).
func TestDeviceConfigKeepsFaceChunkAndFrame(t *testing.T) {
	cfg, err := config.Parse("f.toml", []byte(`[agent]
gateway_id = "g"
[broker]
[[devices]]
id = "s"
transport = "serial"
port = "/dev/ttyS1"
[[devices]]
id = "m"
face_chunk = "16KiB"
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := deviceConfig(cfg, cfg.Device("s"))
	if s.FaceChunk != 4<<10 || s.MaxCommandBytes != serial.DefaultMaxPayload {
		t.Errorf("serial: %+v", s)
	}
	m := deviceConfig(cfg, cfg.Device("m"))
	if m.FaceChunk != 16<<10 || m.MaxCommandBytes != 0 {
		t.Errorf("mqtt: %+v", m)
	}
	if st := settings(cfg.Dispatch); st.MaxBatch != 30 {
		t.Errorf("max_batch %d", st.MaxBatch)
	}
}
