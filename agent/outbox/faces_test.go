package outbox

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// memFaces is a FaceSource over faces in memory (the agent passes its face store).
type memFaces map[string][]byte

func (m memFaces) FaceSize(sha string) (int64, error) {
	b, ok := m[sha]
	if !ok {
		return 0, fmt.Errorf("not found")
	}
	return int64(len(b)), nil
}

func (m memFaces) ReadFace(sha string, p []byte, off int64) (int, error) {
	return copy(p, m[sha][off:]), nil
}

func testFace(n int, seed uint64) (string, []byte) {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return face.FaceSHA256(b), b
}

// faceTerm is a scripted v2 terminal for the face step's unit tests: it keeps faces by
// PutFace's resume rule, answers 21 for a person whose face it lacks, remembers answered
// message ids, and checks the one-in-flight rule. The end-to-end tests use device/sim.
type faceTerm struct {
	t        *testing.T
	faces    map[string][]byte
	recvSHA  string
	recvSize int
	recv     []byte
	answered map[string]face.Ack
	persons  map[string]face.Person

	cutAt       int            // cut the transfer once (no ack) when a chunk passes this many bytes
	hashBad     int            // answer 22 to this many completed faces
	missAlways  bool           // answer 21 to every AddPerson
	full        bool           // answer 23 to every AddPerson
	v1          bool           // protocol v1: faces unknown, persons taken without them
	refuse      map[string]int // person id -> the code it is refused with
	batchRefuse int            // the code the next AddPersons is refused with as a whole
	batches     int            // AddPersons commands received (repeats answered from memory not counted)
	chunks      int            // PutFace commands received
	dataBytes   int            // face bytes received in them
	received    []face.Command
	unacked     string
	unackedCmd  face.Command
	violations  int
	lastAddedID string
}

func newFaceTerm(t *testing.T) *faceTerm {
	return &faceTerm{t: t, faces: map[string][]byte{}, answered: map[string]face.Ack{}, persons: map[string]face.Person{}}
}

// handle takes one command the outbox sent and returns its ack, or false when the
// terminal "crashed" before acking.
func (ft *faceTerm) handle(c Command) (face.Ack, bool) {
	ft.t.Helper()
	var cmd face.Command
	if _, err := cmd.UnmarshalMsg(c.Payload); err != nil {
		ft.t.Fatalf("payload of %s: %v", c.MessageID, err)
	}
	cmd.MessageID = c.MessageID // as links.Send does
	ft.received = append(ft.received, cmd)
	// After the chunk's ack timeout the agent may give it up for a probe of the same face.
	probe := cmd.Op == face.PutFace && len(cmd.Face.Data) == 0 && cmd.Face.SHA256 == ft.unackedCmd.Face.SHA256
	if ft.unacked != "" && !cmd.Equal(&ft.unackedCmd) && !probe {
		ft.violations++
		ft.t.Errorf("%s (%s) received while %s is unacked", cmd.MessageID, cmd.Op, ft.unacked)
	}
	if a, ok := ft.answered[cmd.MessageID]; ok {
		if cmd.Op == face.PutFace && a.Code == 0 {
			a.Have = ft.have(cmd.Face.SHA256)
		}
		ft.unacked = ""
		return a, true
	}
	a := face.Ack{MessageID: cmd.MessageID}
	switch cmd.Op {
	case face.PutFace:
		ft.chunks++
		ft.dataBytes += len(cmd.Face.Data)
		code, have, cut := ft.put(&cmd.Face)
		if cut {
			ft.unacked, ft.unackedCmd = cmd.MessageID, cmd
			return a, false
		}
		a.Code, a.Have = code, have
	case face.AddPerson:
		a.Code = ft.add(cmd.Person)
	case face.AddPersons:
		ft.batches++
		if ft.batchRefuse != 0 {
			a.Code, a.Message, ft.batchRefuse = ft.batchRefuse, "batch refused", 0
			break
		}
		for _, p := range cmd.Persons {
			a.Results = append(a.Results, face.Result{ID: p.ID, Code: ft.add(p)})
		}
	}
	ft.answered[cmd.MessageID] = a
	ft.unacked = ""
	return a, true
}

// add stores p as AddPerson (or one person of AddPersons) does, and returns its code.
func (ft *faceTerm) add(p face.Person) int {
	switch {
	case ft.refuse[p.ID] != 0:
		return ft.refuse[p.ID]
	case ft.full:
		return face.CodeCapacity
	case ft.missAlways:
		return face.CodeFaceMissing
	case !ft.v1 && p.Face.SHA256 != "" && ft.faces[p.Face.SHA256] == nil:
		return face.CodeFaceMissing
	}
	ft.persons[p.ID] = p
	ft.lastAddedID = p.ID
	return 0
}

func (ft *faceTerm) have(sha string) int {
	if b, ok := ft.faces[sha]; ok {
		return len(b)
	}
	if ft.recvSHA == sha {
		return len(ft.recv)
	}
	return 0
}

func (ft *faceTerm) put(c *face.FaceChunk) (code, have int, cut bool) {
	if b, ok := ft.faces[c.SHA256]; ok {
		return 0, len(b), false
	}
	if ft.recvSHA != c.SHA256 || ft.recvSize != c.Size {
		if c.Offset != 0 {
			return 0, 0, false
		}
		ft.recvSHA, ft.recvSize, ft.recv = c.SHA256, c.Size, nil
	}
	if c.Offset != len(ft.recv) {
		return 0, len(ft.recv), false
	}
	if c.Offset+len(c.Data) > c.Size {
		ft.recvSHA, ft.recv = "", nil
		return face.CodeFaceHash, 0, false
	}
	if ft.cutAt > 0 && len(ft.recv) < ft.cutAt && len(ft.recv)+len(c.Data) > ft.cutAt {
		ft.recv = append(ft.recv, c.Data[:ft.cutAt-len(ft.recv)]...)
		ft.cutAt = 0
		return 0, 0, true
	}
	ft.recv = append(ft.recv, c.Data...)
	if len(ft.recv) < ft.recvSize {
		return 0, len(ft.recv), false
	}
	data := ft.recv
	ft.recvSHA, ft.recv = "", nil
	if ft.hashBad > 0 || face.FaceSHA256(data) != c.SHA256 {
		ft.hashBad--
		return face.CodeFaceHash, 0, false
	}
	ft.faces[c.SHA256] = data
	return 0, len(data), false
}

// faceEnv is an outbox with the face step over memFaces, a non-blocking recording
// sender, and a faceTerm answering device "d".
type faceEnv struct {
	*env
	term  *faceTerm
	faces memFaces
}

func newFaceEnv(t *testing.T, chunk int, s Settings) *faceEnv {
	fe := &faceEnv{term: newFaceTerm(t), faces: memFaces{}}
	fe.env = newEnvSender(t, Options{Journal: fastJournal(), Faces: fe.faces, Settings: s,
		Devices: map[string]DeviceConfig{"d": {FaceChunk: chunk}}}, true)
	fe.o.TerminalHeartbeat("d", face.Heartbeat{DeviceID: "d", Protocol: 2, Serial: "S1", Digest: "0000000000000000"})
	return fe
}

// addPerson queues an AddPerson for person whose face is sha.
func (fe *faceEnv) addPerson(id, person, sha string, size int) {
	fe.t.Helper()
	cmd := face.Command{MessageID: id, Op: face.AddPerson, Person: face.Person{ID: person, Name: "N " + person,
		Face: face.FaceRef{SHA256: sha, Size: size, Kind: face.FaceTemplate}}}
	p, err := cmd.AppendMsg(nil)
	if err != nil {
		fe.t.Fatal(err)
	}
	if err := fe.o.Enqueue(Task{MessageID: id, TaskID: "t-" + id, DeviceID: "d", Op: "AddPerson", PersonID: person, Payload: p}); err != nil {
		fe.t.Fatal(err)
	}
}

// serve answers what the outbox sends until nothing more is sent, and returns the
// commands in the order they were sent; a command the terminal does not ack ends it.
func (fe *faceEnv) serve() []Command {
	fe.t.Helper()
	var sent []Command
	for range 1000 {
		var c Command
		select {
		case c = <-fe.snd.sent:
		default:
			return sent
		}
		sent = append(sent, c)
		a, ok := fe.term.handle(c)
		if !ok {
			return sent
		}
		fe.o.AckMessage("d", a)
	}
	fe.t.Fatal("more than 1000 commands: a loop")
	return nil
}

func ops(cmds []Command) string {
	var b strings.Builder
	for i, c := range cmds {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(c.Op)
	}
	return b.String()
}

func (fe *faceEnv) result(id string) Result {
	fe.t.Helper()
	for _, r := range fe.results() {
		if r.MessageID == id {
			return r
		}
	}
	fe.t.Fatalf("no result for %s", id)
	return Result{}
}

// A face goes before the first person that needs it, in chunks of the device's size, each
// from the have of the ack before; the next person with the same face goes without it.
func TestFaceSentOnceBeforeItsPersons(t *testing.T) {
	fe := newFaceEnv(t, 4096, Settings{})
	sha, data := testFace(10_000, 1)
	fe.faces[sha] = data
	fe.addPerson("m1", "p1", sha, len(data))
	sent := fe.serve()
	if got := ops(sent); got != "PutFace PutFace PutFace AddPerson" {
		t.Fatalf("sent %s", got)
	}
	for i, want := range []int{0, 4096, 8192} {
		if c := fe.term.received[i]; c.Face.Offset != want || c.Face.Size != len(data) || c.Face.SHA256 != sha {
			t.Fatalf("chunk %d: offset %d size %d", i, c.Face.Offset, c.Face.Size)
		}
	}
	if !bytes.Equal(fe.term.faces[sha], data) || fe.term.dataBytes != len(data) {
		t.Fatalf("terminal holds %d bytes (equal %v), was sent %d", len(fe.term.faces[sha]), bytes.Equal(fe.term.faces[sha], data), fe.term.dataBytes)
	}
	if sent[3].MessageID != "m1" || fe.o.FacesKnown("d") != 1 {
		t.Fatalf("person sent as %s; faces known %d", sent[3].MessageID, fe.o.FacesKnown("d"))
	}
	fe.addPerson("m2", "p2", sha, len(data))
	if got := ops(fe.serve()); got != "AddPerson" {
		t.Fatalf("second person with the face: sent %s", got)
	}
	if r := fe.result("m1"); r.Status != Succeeded || r.Tries != 1 {
		t.Fatalf("m1: %+v", r)
	}
	// A person without a face, and a v1 terminal, get no face step.
	other, odata := testFace(100, 2)
	fe.faces[other] = odata
	fe.o.TerminalHeartbeat("d", face.Heartbeat{DeviceID: "d", Persons: 2})
	fe.term.v1 = true
	fe.addPerson("m3", "p3", other, len(odata))
	if got := ops(fe.serve()); got != "AddPerson" {
		t.Fatalf("v1 terminal: sent %s", got)
	}
}

// A transfer cut short (no ack) resumes from the have the resent chunk's ack reports;
// one cut while the device went offline resumes with a probe, not with the chunk again.
func TestFaceResumesFromHave(t *testing.T) {
	fe := newFaceEnv(t, 4096, Settings{RetryInterval: time.Second, MaxTries: 5})
	sha, data := testFace(20_000, 3)
	fe.faces[sha] = data
	fe.term.cutAt = 6000
	fe.addPerson("m1", "p1", sha, len(data))
	sent := fe.serve() // chunk 0, then the cut chunk at 4096
	if len(sent) != 2 || fe.term.have(sha) != 6000 {
		t.Fatalf("before the retry: %s, have %d", ops(sent), fe.term.have(sha))
	}
	c := fe.advanceUntilSent(10 * time.Second) // the same chunk again, same id
	if c.MessageID != sent[1].MessageID || c.Try != 2 {
		t.Fatalf("resent %s try %d, want %s try 2", c.MessageID, c.Try, sent[1].MessageID)
	}
	a, _ := fe.term.handle(c)
	if a.Have != 6000 {
		t.Fatalf("resend acked with have %d", a.Have)
	}
	fe.o.AckMessage("d", a)
	rest := fe.serve()
	if got := ops(rest); got != "PutFace PutFace PutFace PutFace AddPerson" {
		t.Fatalf("after the resend: %s", got)
	}
	if fe.term.received[3].Face.Offset != 6000 {
		t.Fatalf("resumed at %d", fe.term.received[3].Face.Offset)
	}
	if !bytes.Equal(fe.term.faces[sha], data) {
		t.Fatal("face not byte-exact on the terminal")
	}
	if r := fe.result("m1"); r.Status != Succeeded || r.Tries != 1 {
		t.Fatalf("m1: %+v", r)
	}
	if fe.term.violations != 0 {
		t.Fatal("two commands in flight")
	}

	// The device goes offline with a chunk cut in flight: once back, a probe learns the
	// have, and the transfer goes on from there.
	sha2, data2 := testFace(20_000, 4)
	fe.faces[sha2] = data2
	fe.term.cutAt = 10_000
	fe.addPerson("m2", "p2", sha2, len(data2))
	sent = fe.serve()
	if len(sent) != 3 {
		t.Fatalf("before the outage: %s", ops(sent))
	}
	fe.o.LinkDown("d")
	fe.term.unacked = "" // it crashed: it forgot the command
	before := fe.term.dataBytes
	fe.o.LinkUp("d")
	fe.o.TerminalHeartbeat("d", face.Heartbeat{DeviceID: "d", Protocol: 2, Serial: "S1", Persons: 1})
	rest = fe.serve()
	if got := ops(rest); got != "PutFace PutFace PutFace PutFace AddPerson" {
		t.Fatalf("after the outage: %s", got)
	}
	probe := fe.term.received[len(fe.term.received)-len(rest)].Face
	if len(probe.Data) != 0 || probe.Offset != 8192 {
		t.Fatalf("first chunk after the outage: offset %d, %d bytes; want a probe at 8192", probe.Offset, len(probe.Data))
	}
	if n := fe.term.dataBytes - before; n != len(data2)-10_000 {
		t.Fatalf("after the outage %d bytes sent, want %d", n, len(data2)-10_000)
	}
	if !bytes.Equal(fe.term.faces[sha2], data2) {
		t.Fatal("second face not byte-exact")
	}
}

// Code 22 sends the face again from 0, once; a second 22 fails the command with a reason
// naming the face, and the next command goes on.
func TestFaceHashMismatchOnceThenFails(t *testing.T) {
	fe := newFaceEnv(t, 4096, Settings{})
	sha, data := testFace(5000, 5)
	fe.faces[sha] = data
	fe.term.hashBad = 1
	fe.addPerson("m1", "p1", sha, len(data))
	if got := ops(fe.serve()); got != "PutFace PutFace PutFace PutFace AddPerson" {
		t.Fatalf("one 22: sent %s", got)
	}
	if fe.term.received[2].Face.Offset != 0 {
		t.Fatalf("after 22 the face started at %d", fe.term.received[2].Face.Offset)
	}
	if r := fe.result("m1"); r.Status != Succeeded || r.Tries != 1 {
		t.Fatalf("m1: %+v", r)
	}
	sha2, data2 := testFace(5000, 6)
	fe.faces[sha2] = data2
	fe.term.hashBad = 2
	fe.addPerson("m2", "p2", sha2, len(data2))
	fe.addPerson("m3", "p3", sha, len(data))
	if got := ops(fe.serve()); got != "PutFace PutFace PutFace PutFace AddPerson" {
		t.Fatalf("two 22s: sent %s", got)
	}
	r := fe.result("m2")
	if r.Status != Failed || !strings.Contains(r.Err, sha2[:16]) || !strings.Contains(r.Err, "hash") {
		t.Fatalf("m2: %+v", r)
	}
	if r := fe.result("m3"); r.Status != Succeeded {
		t.Fatalf("m3 after m2 failed: %+v", r)
	}
}

// A 21 (the terminal lost a face the agent thought it held) sends the face, then the
// command again under a new message id, without spending a try.
func TestFaceMissingSendsFaceAgainWithoutATry(t *testing.T) {
	fe := newFaceEnv(t, 4096, Settings{MaxTries: 1})
	sha, data := testFace(3000, 7)
	fe.faces[sha] = data
	fe.addPerson("m1", "p1", sha, len(data))
	fe.serve()
	delete(fe.term.faces, sha) // gone behind the agent's back
	fe.addPerson("m2", "p2", sha, len(data))
	sent := fe.serve()
	if got := ops(sent); got != "AddPerson PutFace AddPerson" {
		t.Fatalf("sent %s", got)
	}
	if sent[0].MessageID != "m2" || sent[2].MessageID != "m2~f1" || sent[2].Try != 1 {
		t.Fatalf("sent as %s then %s try %d", sent[0].MessageID, sent[2].MessageID, sent[2].Try)
	}
	if r := fe.result("m2"); r.Status != Succeeded || r.Tries != 1 {
		t.Fatalf("m2: %+v (MaxTries 1: a spent try would have failed it)", r)
	}
	if fe.term.lastAddedID != "p2" {
		t.Fatal("p2 not on the terminal")
	}
}

// A terminal that answers 21 however often it gets the face fails the command after a
// bounded number of rounds, with a reason; the next command goes on.
func TestFaceMissingForeverIsBounded(t *testing.T) {
	fe := newFaceEnv(t, 4096, Settings{})
	sha, data := testFace(3000, 8)
	fe.faces[sha] = data
	fe.term.missAlways = true
	fe.addPerson("m1", "p1", sha, len(data))
	sent := fe.serve()
	if n := strings.Count(ops(sent), "AddPerson"); n != maxFaceMissing+1 {
		t.Fatalf("AddPerson sent %d times: %s", n, ops(sent))
	}
	r := fe.result("m1")
	if r.Status != Failed || !strings.Contains(r.Err, "missing") || !strings.Contains(r.Err, sha[:16]) {
		t.Fatalf("m1: %+v", r)
	}
	fe.term.missAlways = false
	fe.addPerson("m2", "p2", sha, len(data))
	fe.serve()
	if r := fe.result("m2"); r.Status != Succeeded {
		t.Fatalf("m2: %+v", r)
	}
}

// Code 23 fails the command with reason "capacity".
func TestFaceCapacity(t *testing.T) {
	fe := newFaceEnv(t, 4096, Settings{})
	sha, data := testFace(100, 9)
	fe.faces[sha] = data
	fe.term.full = true
	fe.addPerson("m1", "p1", sha, len(data))
	fe.serve()
	if r := fe.result("m1"); r.Status != Failed || r.Err != "capacity" {
		t.Fatalf("m1: %+v", r)
	}
}

// A face the gateway does not hold fails its command with a reason naming it.
func TestFaceNotOnTheGateway(t *testing.T) {
	fe := newFaceEnv(t, 4096, Settings{})
	sha, _ := testFace(100, 10)
	fe.addPerson("m1", "p1", sha, 100)
	if got := ops(fe.serve()); got != "" {
		t.Fatalf("sent %s", got)
	}
	if r := fe.result("m1"); r.Status != Failed || !strings.Contains(r.Err, sha[:16]) {
		t.Fatalf("m1: %+v", r)
	}
}

// A factory reset (persons down to 0) or a replacement (serial changed) forgets the faces
// the terminal held: the next person that needs one gets it first.
func TestFaceSentAgainAfterAReset(t *testing.T) {
	fe := newFaceEnv(t, 4096, Settings{})
	sha, data := testFace(3000, 11)
	fe.faces[sha] = data
	fe.addPerson("m1", "p1", sha, len(data))
	fe.serve()
	fe.o.TerminalHeartbeat("d", face.Heartbeat{DeviceID: "d", Protocol: 2, Serial: "S1", Persons: 1})
	fe.term = newFaceTerm(t) // reset: no faces, no persons
	fe.o.TerminalHeartbeat("d", face.Heartbeat{DeviceID: "d", Protocol: 2, Serial: "S1", Persons: 0})
	if n := fe.o.FacesKnown("d"); n != 0 {
		t.Fatalf("after a reset %d faces known", n)
	}
	fe.addPerson("m2", "p1", sha, len(data))
	if got := ops(fe.serve()); got != "PutFace AddPerson" {
		t.Fatalf("after a reset: %s", got)
	}
	fe.o.TerminalHeartbeat("d", face.Heartbeat{DeviceID: "d", Protocol: 2, Serial: "S1", Persons: 1})
	fe.term = newFaceTerm(t)
	fe.o.TerminalHeartbeat("d", face.Heartbeat{DeviceID: "d", Protocol: 2, Serial: "S2", Persons: 1})
	fe.addPerson("m3", "p1", sha, len(data))
	if got := ops(fe.serve()); got != "PutFace AddPerson" {
		t.Fatalf("after a replacement: %s", got)
	}
}

// A chunk that never gets an ack fails the command after MaxTries, like a command.
func TestFaceChunkNoAnswerFails(t *testing.T) {
	fe := newFaceEnv(t, 4096, Settings{RetryInterval: time.Second, MaxTries: 2, MaxBackoff: time.Second})
	sha, data := testFace(3000, 12)
	fe.faces[sha] = data
	fe.addPerson("m1", "p1", sha, len(data))
	c := fe.snd.next(t)
	if c.Op != "PutFace" {
		t.Fatalf("sent %s", c.Op)
	}
	if c2 := fe.advanceUntilSent(5 * time.Second); c2.MessageID != c.MessageID || c2.Try != 2 {
		t.Fatalf("resent %s try %d", c2.MessageID, c2.Try)
	}
	for range 300 {
		fe.clock.Advance(10 * time.Millisecond)
	}
	r := fe.result("m1")
	if r.Status != Failed || !strings.Contains(r.Err, sha[:16]) || !strings.Contains(r.Err, "after 2 tries") {
		t.Fatalf("m1: %+v", r)
	}
}

// A large chunk cut short (no ack) is followed by a probe, not by itself again: the cut
// costs what the terminal lost, not the chunk twice. A small one is resent as it was
// (TestFaceResumesFromHave). A terminal that loses every large chunk still fails the
// command, after a bounded number of rounds.
func TestFaceLargeChunkCutProbes(t *testing.T) {
	fe := newFaceEnv(t, 64<<10, Settings{RetryInterval: time.Second, MaxTries: 5, MaxBackoff: time.Second})
	sha, data := testFace(100<<10, 13)
	fe.faces[sha] = data
	fe.term.cutAt = 10 << 10
	fe.addPerson("m1", "p1", sha, len(data))
	sent := fe.serve() // the first chunk, cut at 10 KiB
	if len(sent) != 1 || fe.term.have(sha) != 10<<10 {
		t.Fatalf("before the timeout: %s, have %d", ops(sent), fe.term.have(sha))
	}
	c := fe.advanceUntilSent(10 * time.Second)
	var probe face.Command
	if _, err := probe.UnmarshalMsg(c.Payload); err != nil {
		t.Fatal(err)
	}
	if c.Op != "PutFace" || len(probe.Face.Data) != 0 || c.MessageID == sent[0].MessageID || c.Try != 2 {
		t.Fatalf("after the timeout: %s %s try %d with %d bytes; want a probe under a new id, try 2", c.Op, c.MessageID, c.Try, len(probe.Face.Data))
	}
	a, _ := fe.term.handle(c)
	if a.Have != 10<<10 {
		t.Fatalf("probe acked with have %d", a.Have)
	}
	fe.o.AckMessage("d", a)
	if got := ops(fe.serve()); got != "PutFace PutFace AddPerson" {
		t.Fatalf("after the probe: %s", got)
	}
	if !bytes.Equal(fe.term.faces[sha], data) {
		t.Fatal("face not byte-exact on the terminal")
	}
	if extra := fe.term.dataBytes - len(data); extra > 64<<10 || fe.term.chunks != 4 {
		t.Fatalf("the cut cost %d bytes more than the face in %d chunks; want at most one chunk and a probe", extra, fe.term.chunks)
	}
	if r := fe.result("m1"); r.Status != Succeeded || fe.term.violations != 0 {
		t.Fatalf("m1: %+v, violations %d", r, fe.term.violations)
	}

	// A terminal that loses every large chunk: probe and chunk do not loop.
	sha2, data2 := testFace(100<<10, 14)
	fe.faces[sha2] = data2
	fe.addPerson("m2", "p2", sha2, len(data2))
	for range 20 {
		var c Command
		select {
		case c = <-fe.snd.sent:
		default:
			c = fe.advanceUntilSent(10 * time.Second)
		}
		var cmd face.Command
		if _, err := cmd.UnmarshalMsg(c.Payload); err != nil {
			t.Fatal(err)
		}
		if c.Op != "PutFace" {
			t.Fatalf("sent %s", c.Op)
		}
		if len(cmd.Face.Data) > 0 {
			continue // lost
		}
		fe.o.AckMessage("d", face.Ack{MessageID: c.MessageID, Have: cmd.Face.Offset})
		if r, ok := fe.resultOK("m2"); ok {
			if r.Status != Failed || !strings.Contains(r.Err, "does not take it") {
				t.Fatalf("m2: %+v", r)
			}
			return
		}
	}
	t.Fatal("a terminal that loses every large chunk: no failure after 20 sends")
}

// resultOK returns the result for id, if there is one yet.
func (fe *faceEnv) resultOK(id string) (Result, bool) {
	fe.t.Helper()
	for _, r := range fe.results() {
		if r.MessageID == id {
			return r, true
		}
	}
	return Result{}, false
}

// A chunk's message id and a batch's are short (each goes twice over the wire, in the
// command and its ack) and unique: "f", a 6-digit prefix and a base-62 sequence number;
// "B" and 16 base64 characters.
func TestChunkAndBatchIDsAreShort(t *testing.T) {
	fe := newFaceEnv(t, 4096, Settings{})
	seen := map[string]bool{}
	for i := range 5000 {
		id := fe.o.chunkID()
		if seen[id] || id[0] != 'f' || len(id) > 1+6+3 || i < 61 && len(id) != 1+6+1 {
			t.Fatalf("chunk id %d: %q (seen %v)", i, id, seen[id])
		}
		seen[id] = true
	}
	for _, r := range []uint64{0, 1, 62, 1<<64 - 1} {
		if p := faceIDPrefix(r); len(p) != 6 {
			t.Fatalf("prefix of %d: %q", r, p)
		}
	}
	if s := string(appendBase62(nil, 0)) + "," + string(appendBase62(nil, 61)) + "," + string(appendBase62(nil, 62)); s != "0,z,10" {
		t.Fatalf("base 62: %s", s)
	}
	sha, data := testFace(100, 15)
	fe.faces[sha] = data
	fe.addPerson("m1", "p1", sha, len(data)) // waits for its face: both queued
	fe.addPerson("m2", "p2", sha, len(data))
	fe.o.mu.Lock()
	d := fe.o.t.devices["d"]
	if len(d.queue) != 2 {
		fe.o.mu.Unlock()
		t.Fatalf("%d queued", len(d.queue))
	}
	id := fe.o.batchID(d, d.queue[:2])
	fe.o.mu.Unlock()
	if len(id) != batchIDLen || batchIDLen != 17 || id[0] != 'B' {
		t.Fatalf("batch id %q", id)
	}
}
