package outbox

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// batchEnv is a faceEnv whose terminal takes batches: the tests queue tasks while the
// device is offline (before its first heartbeat), then bring it online with hello, so
// that pump finds them all queued.
type batchEnv struct {
	*faceEnv
	batch int // announced in hello's heartbeat
}

func newBatchEnv(t *testing.T, s Settings, batch int, dc DeviceConfig, extra func(*Options)) *batchEnv {
	if dc.FaceChunk == 0 {
		dc.FaceChunk = 4096
	}
	fe := &faceEnv{term: newFaceTerm(t), faces: memFaces{}}
	opts := Options{Journal: fastJournal(), Faces: fe.faces, Settings: s, Devices: map[string]DeviceConfig{"d": dc}}
	if extra != nil {
		extra(&opts)
	}
	fe.env = newEnvSender(t, opts, true)
	fe.term.refuse = map[string]int{}
	return &batchEnv{faceEnv: fe, batch: batch}
}

func (be *batchEnv) hello() {
	be.o.TerminalHeartbeat("d", face.Heartbeat{DeviceID: "d", Protocol: 2, Serial: "S1", Digest: "0000000000000000",
		Batch: be.batch, Persons: len(be.term.persons)})
}

// add queues an AddPerson for person (with face sha when not ""), or a DeletePerson when
// op says so.
func (be *batchEnv) add(id, op, person, sha string) {
	be.t.Helper()
	be.addTask(Task{MessageID: id, TaskID: "t-" + id, DeviceID: "d", Op: op, PersonID: person}, sha)
}

func (be *batchEnv) addTask(tk Task, sha string) {
	be.t.Helper()
	cmd := face.Command{MessageID: tk.MessageID, Op: face.Op(tk.Op), Person: face.Person{ID: tk.PersonID, Name: "N " + tk.PersonID}}
	if sha != "" {
		cmd.Person.Face = face.FaceRef{SHA256: sha, Size: len(be.faces[sha]), Kind: face.FaceTemplate}
	}
	p, err := cmd.AppendMsg(nil)
	if err != nil {
		be.t.Fatal(err)
	}
	tk.Payload = p
	if err := be.o.Enqueue(tk); err != nil {
		be.t.Fatal(err)
	}
}

// shape renders sent commands as "AddPersons(p1,p2) DeletePerson(p3) PutFace ...".
func shape(t *testing.T, cmds []Command) string {
	var b strings.Builder
	for i, c := range cmds {
		if i > 0 {
			b.WriteByte(' ')
		}
		var cmd face.Command
		if _, err := cmd.UnmarshalMsg(c.Payload); err != nil {
			t.Fatal(err)
		}
		b.WriteString(string(cmd.Op))
		switch cmd.Op {
		case face.AddPersons:
			ids := make([]string, len(cmd.Persons))
			for i, p := range cmd.Persons {
				ids[i] = p.ID
			}
			fmt.Fprintf(&b, "(%s)", strings.Join(ids, ","))
		case face.AddPerson, face.DeletePerson:
			fmt.Fprintf(&b, "(%s)", cmd.Person.ID)
		}
	}
	return b.String()
}

func (be *batchEnv) resultsByID() map[string]Result {
	be.t.Helper()
	m := map[string]Result{}
	for _, r := range be.results() {
		if _, dup := m[r.MessageID]; dup {
			be.t.Fatalf("two results for %s", r.MessageID)
		}
		m[r.MessageID] = r
	}
	return m
}

// A batch gathers the AddPersons at the head of the queue, in queue order, and ends at
// another op, at the terminal's batch size and at MaxBatch; without a batch size (or
// with MaxBatch 1) nothing is gathered.
func TestBatchGathering(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBatch int
		announce int
		want     string
	}{
		{"other ops end a batch", 30, 30, "AddPersons(p1,p2,p3) DeletePerson(p4) AddPersons(p5,p6) DeletePerson(p7) AddPerson(p8)"},
		{"the terminal's batch size", 30, 2, "AddPersons(p1,p2) AddPerson(p3) DeletePerson(p4) AddPersons(p5,p6) DeletePerson(p7) AddPerson(p8)"},
		{"max_batch", 2, 30, "AddPersons(p1,p2) AddPerson(p3) DeletePerson(p4) AddPersons(p5,p6) DeletePerson(p7) AddPerson(p8)"},
		{"batches off", 1, 30, "AddPerson(p1) AddPerson(p2) AddPerson(p3) DeletePerson(p4) AddPerson(p5) AddPerson(p6) DeletePerson(p7) AddPerson(p8)"},
		{"no batch announced", 30, 0, "AddPerson(p1) AddPerson(p2) AddPerson(p3) DeletePerson(p4) AddPerson(p5) AddPerson(p6) DeletePerson(p7) AddPerson(p8)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := newBatchEnv(t, Settings{MaxBatch: tc.maxBatch}, tc.announce, DeviceConfig{}, nil)
			for i, op := range []string{"AddPerson", "AddPerson", "AddPerson", "DeletePerson", "AddPerson", "AddPerson", "DeletePerson", "AddPerson"} {
				be.add(fmt.Sprintf("m%d", i+1), op, fmt.Sprintf("p%d", i+1), "")
			}
			be.hello()
			sent := be.serve()
			if got := shape(t, sent); got != tc.want {
				t.Fatalf("sent %s\nwant %s", got, tc.want)
			}
			res := be.resultsByID()
			for i := 1; i <= 8; i++ {
				if r := res[fmt.Sprintf("m%d", i)]; r.Status != Succeeded || r.Tries != 1 {
					t.Fatalf("m%d: %+v", i, r)
				}
			}
			if be.term.violations != 0 {
				t.Fatal("two commands in flight")
			}
		})
	}
}

// Each person's code goes to its own task: a refusal fails that task only (with its own
// reason), 23 fails it with "capacity", the others succeed.
func TestBatchResultsPerTask(t *testing.T) {
	var acked ackLog
	be := newBatchEnv(t, Settings{MaxBatch: 30}, 30, DeviceConfig{}, func(o *Options) { o.Acked = acked.acked })
	for i := 1; i <= 5; i++ {
		be.add(fmt.Sprintf("m%d", i), "AddPerson", fmt.Sprintf("p%d", i), "")
	}
	be.term.refuse["p2"] = 7
	be.term.refuse["p4"] = face.CodeCapacity
	be.hello()
	if got := shape(t, be.serve()); got != "AddPersons(p1,p2,p3,p4,p5)" {
		t.Fatalf("sent %s", got)
	}
	res := be.resultsByID()
	for _, id := range []string{"m1", "m3", "m5"} {
		if r := res[id]; r.Status != Succeeded || r.Tries != 1 {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	if r := res["m2"]; r.Status != Failed || !strings.Contains(r.Err, "refused by the device: code 7") || r.Tries != 1 {
		t.Fatalf("m2: %+v", r)
	}
	if r := res["m4"]; r.Status != Failed || r.Err != "capacity" {
		t.Fatalf("m4: %+v", r)
	}
	if _, ok := be.term.persons["p2"]; ok {
		t.Fatal("the refused person is on the terminal")
	}
	if st := be.status("d"); st.Succeeded != 3 || st.Failed != 2 || st.Sent != 5 {
		t.Fatalf("counters %+v", st)
	}
	// Acked hears of each task of the batch as of a task acked alone, with its own code
	// (a refused record leaves the desired list by it).
	var codes []string
	for _, c := range acked.calls() {
		f := strings.Fields(c)
		codes = append(codes, f[0]+" "+f[len(f)-1])
	}
	if want := []string{"d/m1 0", "d/m2 7", "d/m3 0", "d/m4 23", "d/m5 0"}; !slices.Equal(codes, want) {
		t.Fatalf("Acked told %q, want %q", codes, want)
	}
}

// The face step runs first for every face the batch needs, each face once; a person whose
// face the terminal lost (21) gets its face sent again and goes again without spending a
// try, under a new batch id, while the others of its batch are done.
func TestBatchFacesAndMissing(t *testing.T) {
	be := newBatchEnv(t, Settings{MaxBatch: 30}, 30, DeviceConfig{}, nil)
	shaA, dataA := testFace(5000, 11)
	shaB, dataB := testFace(3000, 12)
	be.faces[shaA], be.faces[shaB] = dataA, dataB
	be.add("m1", "AddPerson", "p1", shaA)
	be.add("m2", "AddPerson", "p2", shaB)
	be.add("m3", "AddPerson", "p3", shaA)
	be.add("m4", "AddPerson", "p4", "")
	be.hello()
	sent := be.serve()
	if got := shape(t, sent); got != "PutFace PutFace PutFace AddPersons(p1,p2,p3,p4)" {
		t.Fatalf("sent %s", got)
	}
	if !bytes.Equal(be.term.faces[shaA], dataA) || !bytes.Equal(be.term.faces[shaB], dataB) || be.term.dataBytes != 8000 {
		t.Fatalf("faces on the terminal: %d bytes sent", be.term.dataBytes)
	}
	first := sent[3].MessageID

	// The terminal loses face B; the next batch has p5 (B) and p6 (A): p5 gets 21.
	delete(be.term.faces, shaB)
	be.add("m5", "AddPerson", "p5", shaB)
	be.add("m6", "AddPerson", "p6", shaA)
	be.add("m7", "AddPerson", "p7", "")
	// m5 was sent alone as it came (the device was idle): queue the rest behind a pause.
	sent = be.serve()
	got := shape(t, sent)
	want := "AddPerson(p5) PutFace AddPersons(p5,p6,p7)"
	if got != want {
		t.Fatalf("sent %s\nwant %s", got, want)
	}

	// Now within one batch: the terminal loses face A, and p8 (A), p9, p10 (A) go together.
	be.o.Pause("d")
	delete(be.term.faces, shaA)
	be.add("m8", "AddPerson", "p8", shaA)
	be.add("m9", "AddPerson", "p9", "")
	be.add("m10", "AddPerson", "p10", shaA)
	be.o.Resume("d")
	sent = be.serve()
	got = shape(t, sent)
	want = "AddPersons(p8,p9,p10) PutFace PutFace AddPersons(p8,p10)"
	if got != want {
		t.Fatalf("sent %s\nwant %s", got, want)
	}
	if sent[0].MessageID == sent[3].MessageID || sent[0].MessageID == first {
		t.Fatalf("batch ids repeat: %s %s %s", first, sent[0].MessageID, sent[3].MessageID)
	}
	res := be.resultsByID()
	for i := 1; i <= 10; i++ {
		if r := res[fmt.Sprintf("m%d", i)]; r.Status != Succeeded || r.Tries != 1 {
			t.Fatalf("m%d: %+v", i, r)
		}
	}
	for _, p := range []string{"p1", "p3", "p6", "p8", "p10"} {
		if be.term.persons[p].Face.SHA256 != shaA {
			t.Fatalf("%s has face %q", p, be.term.persons[p].Face.SHA256)
		}
	}
	if be.term.violations != 0 {
		t.Fatal("two commands in flight")
	}
}

// A person answered 21 however often its face is sent fails after maxFaceMissing rounds;
// its batch's other tasks are not held up.
func TestBatchMissingBounded(t *testing.T) {
	be := newBatchEnv(t, Settings{MaxBatch: 30}, 30, DeviceConfig{}, nil)
	sha, data := testFace(100, 13)
	be.faces[sha] = data
	be.add("m1", "AddPerson", "p1", sha)
	be.add("m2", "AddPerson", "p2", "")
	be.term.refuse["p1"] = face.CodeFaceMissing
	be.hello()
	sent := be.serve()
	if n := len(sent); n > 20 {
		t.Fatalf("%d commands: %s", n, shape(t, sent))
	}
	res := be.resultsByID()
	if r := res["m1"]; r.Status != Failed || !strings.Contains(r.Err, "still missing") || r.Tries != 1 {
		t.Fatalf("m1: %+v", r)
	}
	if r := res["m2"]; r.Status != Succeeded {
		t.Fatalf("m2: %+v", r)
	}
}

// A batch not acked in time is sent again with the same message id and the same bytes,
// each task's try counted; its late ack still answers it; a batch refused as a whole is a
// failed try for each task, sent again singly until the terminal's next heartbeat.
func TestBatchRetries(t *testing.T) {
	be := newBatchEnv(t, Settings{MaxBatch: 30, RetryInterval: time.Second, MaxTries: 5}, 30, DeviceConfig{}, nil)
	for i := 1; i <= 3; i++ {
		be.add(fmt.Sprintf("m%d", i), "AddPerson", fmt.Sprintf("p%d", i), "")
	}
	be.hello()
	first := be.snd.next(t) // not answered: the ack is lost
	if first.Op != "AddPersons" || first.Try != 1 {
		t.Fatalf("sent %+v", first)
	}
	if st := be.status("d"); st.InFlightTasks != 3 || st.InFlight != "m1" || st.Queued != 0 {
		t.Fatalf("status %+v", st)
	}
	again := be.advanceUntilSent(10 * time.Second)
	if again.MessageID != first.MessageID || !bytes.Equal(again.Payload, first.Payload) || again.Try != 2 {
		t.Fatalf("resent %s try %d (same bytes %v), want %s", again.MessageID, again.Try, bytes.Equal(again.Payload, first.Payload), first.MessageID)
	}
	if a, ok := be.term.handle(again); !ok || len(a.Results) != 3 {
		t.Fatalf("ack %+v", a)
	} else {
		be.o.AckMessage("d", a)
		be.o.AckMessage("d", a) // a second ack is ignored
	}
	for id, r := range be.resultsByID() {
		if r.Status != Succeeded || r.Tries != 2 {
			t.Fatalf("%s: %+v", id, r)
		}
	}

	// Refused as a whole: every task spends a try and goes again alone after its backoff.
	for i := 4; i <= 6; i++ {
		be.add(fmt.Sprintf("m%d", i), "AddPerson", fmt.Sprintf("p%d", i), "")
	}
	// m4 went alone at once (the device was idle); m5 and m6 wait behind it.
	be.term.batchRefuse = 2
	sent := be.serve()
	if got := shape(t, sent); got != "AddPerson(p4) AddPersons(p5,p6)" {
		t.Fatalf("sent %s", got)
	}
	var later []Command
	for len(later) < 2 {
		c := be.advanceUntilSent(time.Minute)
		later = append(later, c)
		a, _ := be.term.handle(c)
		be.o.AckMessage("d", a)
	}
	if got := shape(t, later); got != "AddPerson(p5) AddPerson(p6)" {
		t.Fatalf("after the refusal: %s", got)
	}
	res := be.resultsByID()
	for _, id := range []string{"m5", "m6"} {
		if r := res[id]; r.Status != Succeeded || r.Tries != 2 {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	// Batch-level failures up to MaxTries fail every task of the batch.
	be.o.Pause("d")
	be.add("m7", "AddPerson", "p7", "")
	be.add("m8", "AddPerson", "p8", "")
	be.hello()
	be.o.Resume("d")
	for range 5 {
		c := be.advanceUntilSent(5 * time.Minute)
		if c.Op != "AddPersons" {
			t.Fatalf("sent %s", shape(t, []Command{c}))
		}
	}
	for range 100 {
		be.clock.Advance(time.Second)
	}
	res = be.resultsByID()
	for _, id := range []string{"m7", "m8"} {
		if r := res[id]; r.Status != Failed || r.Tries != 5 || !strings.Contains(r.Err, "no ack") {
			t.Fatalf("%s: %+v", id, r)
		}
	}
}

// A batch in flight when the device goes offline goes back without spending tries, and
// is sent again as it was; one in flight at a restart is sent again after it: every task
// has one result, none is lost.
func TestBatchOfflineAndRestart(t *testing.T) {
	be := newBatchEnv(t, Settings{MaxBatch: 30, RetryInterval: time.Second}, 30, DeviceConfig{}, nil)
	for i := 1; i <= 4; i++ {
		be.add(fmt.Sprintf("m%d", i), "AddPerson", fmt.Sprintf("p%d", i), "")
	}
	be.hello()
	first := be.snd.next(t)
	be.o.LinkDown("d")
	if st := be.status("d"); st.InFlightTasks != 0 || st.Queued != 4 {
		t.Fatalf("after LinkDown: %+v", st)
	}
	be.o.LinkUp("d")
	be.hello()
	again := be.snd.next(t)
	if again.MessageID != first.MessageID || !bytes.Equal(again.Payload, first.Payload) {
		t.Fatalf("after the outage: %s, want %s", again.MessageID, first.MessageID)
	}
	// The terminal applies it and its ack is lost; the process restarts.
	if _, ok := be.term.handle(again); !ok {
		t.Fatal("not handled")
	}
	checkReplay(t, be.env, 0, 0) // the journal rebuilds the batch in flight; closes the outbox
	be.open()
	be.hello()
	resent := be.snd.next(t)
	if resent.MessageID != first.MessageID || !bytes.Equal(resent.Payload, first.Payload) {
		t.Fatalf("after the restart: %s, want %s", resent.MessageID, first.MessageID)
	}
	a, _ := be.term.handle(resent)
	be.o.AckMessage("d", a)
	if be.term.batches != 1 {
		t.Fatalf("the terminal applied %d batches", be.term.batches)
	}
	res := be.resultsByID()
	if len(res) != 4 {
		t.Fatalf("%d results", len(res))
	}
	for id, r := range res { // the outage refunded its try, the restart kept it
		if r.Status != Succeeded || r.Tries != 2 {
			t.Fatalf("%s: %+v", id, r)
		}
	}

	// A batch in flight at a restart that gathers more tasks afterwards goes under a new
	// id: the terminal applies its persons again (idempotent), and each task has one result.
	be.o.Pause("d")
	for i := 5; i <= 6; i++ {
		be.add(fmt.Sprintf("m%d", i), "AddPerson", fmt.Sprintf("p%d", i), "")
	}
	be.o.Resume("d")
	c := be.snd.next(t)
	be.term.handle(c) // applied, ack lost
	be.o.Close()
	be.snd.drain()
	be.open()
	be.add("m7", "AddPerson", "p7", "")
	be.hello()
	sent := be.serve()
	if got := shape(t, sent); got != "AddPersons(p5,p6,p7)" || sent[0].MessageID == c.MessageID {
		t.Fatalf("after the restart: %s (%s, before %s)", got, sent[0].MessageID, c.MessageID)
	}
	res = be.resultsByID()
	for _, id := range []string{"m5", "m6", "m7"} {
		if r := res[id]; r.Status != Succeeded {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	for _, p := range []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7"} {
		if _, ok := be.term.persons[p]; !ok {
			t.Fatalf("%s missing on the terminal", p)
		}
	}
}

// Commands without a result (a whitelist sync's corrections) go in batches too; each
// task's outcome goes to NoResultDone under its own message id, with its own code.
func TestBatchNoResultOutcomes(t *testing.T) {
	type outcome struct {
		id   string
		code int
		err  error
	}
	var mu sync.Mutex
	var got []outcome
	be := newBatchEnv(t, Settings{MaxBatch: 30}, 30, DeviceConfig{}, func(o *Options) {
		o.NoResultDone = func(dev, id string, a face.Ack, err error) {
			mu.Lock()
			got = append(got, outcome{id, a.Code, err})
			mu.Unlock()
		}
	})
	be.term.refuse["p2"] = 9
	for i := 1; i <= 3; i++ {
		id, p := fmt.Sprintf("c%d", i), fmt.Sprintf("p%d", i)
		be.addTask(Task{MessageID: id, DeviceID: "d", Op: "AddPerson", PersonID: p, NoResult: true}, "")
	}
	be.hello()
	if s := shape(t, be.serve()); s != "AddPersons(p1,p2,p3)" {
		t.Fatalf("sent %s", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || got[0].id != "c1" || got[0].err != nil || got[1].id != "c2" || got[1].code != 9 ||
		!errors.Is(got[1].err, ErrRefused) || got[2].id != "c3" || got[2].err != nil {
		t.Fatalf("outcomes %+v", got)
	}
	if len(be.results()) != 0 {
		t.Fatal("results reported for corrections")
	}
}

// A device with a command bound (a serial frame) gets batches that fit it: cut where the
// next person would pass it, the rest in the next batch.
func TestBatchFitsTheFrame(t *testing.T) {
	const frame = 600
	be := newBatchEnv(t, Settings{MaxBatch: 30}, 30, DeviceConfig{MaxCommandBytes: frame}, nil)
	for i := 1; i <= 20; i++ {
		be.add(fmt.Sprintf("m%02d", i), "AddPerson", fmt.Sprintf("person-%02d-%s", i, strings.Repeat("x", 20)), "")
	}
	be.hello()
	sent := be.serve()
	n := 0
	for _, c := range sent {
		var cmd face.Command
		if _, err := cmd.UnmarshalMsg(c.Payload); err != nil {
			t.Fatal(err)
		}
		cmd.MessageID = c.MessageID
		enc, _ := cmd.AppendMsg(nil)
		if len(enc) > frame {
			t.Fatalf("a %d-byte command for a %d-byte frame", len(enc), frame)
		}
		if len(cmd.Persons) > 0 {
			n += len(cmd.Persons)
		} else {
			n++
		}
	}
	if n != 20 || len(sent) < 3 || len(sent) > 6 {
		t.Fatalf("%d persons in %d commands: %s", n, len(sent), shape(t, sent))
	}
	// Full batches: the next person would not have fitted.
	var one face.Command
	_, _ = one.UnmarshalMsg(sent[0].Payload)
	one.MessageID = sent[0].MessageID
	one.Persons = append(one.Persons, one.Persons[0])
	if enc, _ := one.AppendMsg(nil); len(enc) <= frame {
		t.Fatalf("the first batch (%d persons) had room for another", len(one.Persons)-1)
	}
}

// A head that corrections never sent let go before them (see Task.NoResult) gathers the
// tasks right behind it, in queue order: not a correction it passed over, which goes
// after it with the others, in their order. One command is in flight: the batch's first
// task holds the slot, so a failed Send of the batch is a failed try of each of its tasks.
func TestBatchGathersBehindAHeadCorrectionsLetGo(t *testing.T) {
	be := newBatchEnv(t, Settings{MaxBatch: 30, RetryInterval: time.Second, MaxTries: 5}, 30, DeviceConfig{}, nil)
	be.addTask(Task{MessageID: "c1", DeviceID: "d", Op: "AddPerson", PersonID: "p1", NoResult: true}, "")
	be.addTask(Task{MessageID: "c2", DeviceID: "d", Op: "AddPerson", PersonID: "p2", NoResult: true}, "")
	be.add("t3", "AddPerson", "p3", "")
	be.add("t4", "AddPerson", "p4", "")
	be.snd.mu.Lock()
	be.snd.fail = errors.New("link reset")
	be.snd.mu.Unlock()
	be.hello()
	first := be.snd.next(t)
	if s := shape(t, []Command{first}); s != "AddPersons(p3,p4)" {
		t.Fatalf("first sent %s, want AddPersons(p3,p4)", s)
	}
	// The failed Send counted a try of t3 and t4, which wait for their retry.
	for _, id := range []string{"t3", "t4"} {
		if st := be.status("d"); st.InFlightTasks != 0 {
			t.Fatalf("after the failed send: %d tasks in flight", st.InFlightTasks)
		}
		be.o.mu.Lock()
		it := be.o.t.items.get(id)
		status, tries := it.status, it.tries
		be.o.mu.Unlock()
		if status != Scheduled || tries != 1 {
			t.Fatalf("%s after the failed send: %s, %d tries", id, status, tries)
		}
	}
	be.snd.mu.Lock()
	be.snd.fail = nil
	be.snd.mu.Unlock()
	be.clock.Advance(time.Second) // the backoff after one try: at most RetryInterval
	retry := be.snd.next(t)
	if retry.MessageID != first.MessageID || !bytes.Equal(retry.Payload, first.Payload) || retry.Try != 2 {
		t.Fatalf("retry %s try %d, want %s try 2, same bytes", retry.MessageID, retry.Try, first.MessageID)
	}
	a, _ := be.term.handle(retry)
	be.o.AckMessage("d", a)
	if s := shape(t, be.serve()); s != "AddPersons(p1,p2)" {
		t.Fatalf("then sent %s, want AddPersons(p1,p2)", s)
	}
}
