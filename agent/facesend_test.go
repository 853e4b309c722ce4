package agent

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/faces"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/links"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// faceRig is the sending side of faces end to end: the face store with the test's faces,
// the outbox with its face step, the links (the embedded broker, or serial lines over
// pseudo-terminals), and simulated v2 terminals in strict mode.
type faceRig struct {
	t     testing.TB
	ob    *outbox.Outbox
	st    *faces.Store
	fleet *sim.Fleet
	mu    sync.Mutex
	data  map[string]int // face bytes each terminal was sent
}

type nopFwd struct{}

func (nopFwd) Ack(string, face.Ack)             {}
func (nopFwd) Heartbeat(string, face.Heartbeat) {}

type nopState struct{}

func (nopState) Touch(string)                     {}
func (nopState) Heartbeat(string, face.Heartbeat) {}

func newFaceRig(t testing.TB, transport string, ids []string, opts sim.Options, settings outbox.Settings, chunk int) *faceRig {
	t.Helper()
	r := &faceRig{t: t, data: map[string]int{}}
	st, err := faces.Open(t.TempDir(), faces.Options{MaxBytes: 1 << 30, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r.st = st
	opts.Protocol, opts.Strict = 2, true
	opts.OnViolation = func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }
	also := opts.OnCommand
	opts.OnCommand = func(id string, c face.Command) {
		if also != nil {
			also(id, c)
		}
		r.mu.Lock()
		r.data[id] += len(c.Face.Data)
		r.mu.Unlock()
	}
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 50 * time.Millisecond
	}
	var lo links.Options
	var start func() (*sim.Fleet, error)
	switch transport {
	case "mqtt":
		br, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := br.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { br.Close() })
		lo = links.Options{MQTT: ids, Bus: br}
		start = func() (*sim.Fleet, error) { return sim.StartMQTT("mqtt://"+br.Addr(), ids, opts) }
	case "serial":
		var ports []sim.SerialPort
		for _, id := range ids {
			p, err := serial.OpenPTY()
			if err != nil {
				t.Skipf("no pseudo-terminals here: %v", err)
			}
			t.Cleanup(func() { p.Close() })
			lo.Serial = append(lo.Serial, links.Serial{DeviceID: id, Port: p.Path, Baud: 115200})
			ports = append(ports, sim.SerialPort{DeviceID: id, Port: p.Master})
		}
		start = func() (*sim.Fleet, error) { return sim.StartSerial(ports, opts) }
	}
	l, err := links.Open(lo)
	if err != nil {
		t.Fatal(err)
	}
	devs := map[string]outbox.DeviceConfig{}
	for _, id := range ids {
		devs[id] = outbox.DeviceConfig{FaceChunk: chunk}
		if transport == "serial" { // as deviceConfig sets it: a batch fits one frame
			devs[id] = outbox.DeviceConfig{FaceChunk: chunk, MaxCommandBytes: serial.DefaultMaxPayload}
		}
	}
	ob, err := outbox.Open(t.TempDir(), l, &outbox.Options{Journal: journal.Options{Sync: journal.SyncNone},
		Settings: settings, Devices: devs, Faces: st})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	r.ob = ob
	l.Start(links.Sinks{Outbox: ob, Forwarder: nopFwd{}, State: nopState{}})
	f, err := start()
	if err != nil {
		t.Fatal(err)
	}
	r.fleet = f
	t.Cleanup(func() {
		f.Close() // first: a terminal's last ack must find the links open
		ob.Close()
		l.Close()
		l.Wait()
	})
	return r
}

// putFace stores n random bytes in the face store and returns their sha256.
func (r *faceRig) putFace(n int, seed uint64) (string, []byte) {
	r.t.Helper()
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	sha := face.FaceSHA256(b)
	sum, _ := faces.ParseSum(sha)
	if err := r.st.Put(sum, int64(n), bytes.NewReader(b)); err != nil {
		r.t.Fatal(err)
	}
	return sha, b
}

func (r *faceRig) addPerson(dev, id, person, sha string, size int) face.Person {
	r.t.Helper()
	p := face.Person{ID: person, Name: "N " + person, Face: face.FaceRef{SHA256: sha, Size: size, Kind: face.FacePhoto}}
	p.Rev = face.RecordRev(p.ID, p.Name, p.ValidFrom, p.ValidTo, sha).String()
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

// results waits for the results of ids and returns them by message id.
func (r *faceRig) results(ids ...string) map[string]outbox.Result {
	r.t.Helper()
	got := map[string]outbox.Result{}
	deadline := time.After(10 * time.Minute)
	for {
		res, err := r.ob.Results(1000)
		if err != nil {
			r.t.Fatal(err)
		}
		var done []string
		for _, x := range res {
			got[x.MessageID] = x
			done = append(done, x.MessageID)
		}
		r.ob.MarkReported(done...)
		missing := 0
		for _, id := range ids {
			if _, ok := got[id]; !ok {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		select {
		case <-r.ob.ResultsReady():
		case <-deadline:
			r.t.Fatalf("%d of %d results missing after 10 minutes: %v", missing, len(ids), got)
		}
	}
}

func (r *faceRig) sent(dev string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.data[dev]
}

func eachFaceTransport(t *testing.T, f func(t *testing.T, transport string, chunk int)) {
	t.Run("mqtt", func(t *testing.T) { f(t, "mqtt", 64<<10) })
	t.Run("serial", func(t *testing.T) { f(t, "serial", 4<<10) })
}

// Two terminals each get the face once, byte for byte, before the first person that needs
// it; the second person with it goes alone; never two commands in flight.
func TestFacesReachTerminalsOnce(t *testing.T) {
	eachFaceTransport(t, func(t *testing.T, transport string, chunk int) {
		ids := []string{"t1", "t2"}
		r := newFaceRig(t, transport, ids, sim.Options{Seed: 1}, outbox.Settings{RetryInterval: time.Second}, chunk)
		sha, data := r.putFace(100<<10, 1)
		var msgs []string
		for _, dev := range ids {
			for _, p := range []string{"p1", "p2"} {
				id := dev + "-" + p
				r.addPerson(dev, id, p, sha, len(data))
				msgs = append(msgs, id)
			}
		}
		for id, res := range r.results(msgs...) {
			if res.Status != outbox.Succeeded || res.Tries != 1 {
				t.Errorf("%s: %+v", id, res)
			}
		}
		chunks := (len(data) + chunk - 1) / chunk
		for _, dev := range ids {
			term := r.fleet.Terminal(dev)
			got, ok := term.Face(sha)
			if !ok || !bytes.Equal(got, data) {
				t.Errorf("%s: face held %v, byte-exact %v", dev, ok, bytes.Equal(got, data))
			}
			if st := term.Stats(); st.FaceChunks != chunks || r.sent(dev) != len(data) {
				t.Errorf("%s: %d chunks, %d bytes; want %d chunks, %d bytes (the face once)", dev, st.FaceChunks, r.sent(dev), chunks, len(data))
			}
			if n := len(term.Persons()); n != 2 {
				t.Errorf("%s holds %d persons", dev, n)
			}
		}
		if err := r.fleet.Violations(); err != nil {
			t.Error(err)
		}
	})
}

// A transfer the terminal cuts (it keeps part of a chunk and crashes before acking)
// resumes from the have the terminal reports: the face arrives byte for byte, and what was
// sent twice is at most a chunk and the part the cut lost.
func TestFaceTransferResumesAfterACut(t *testing.T) {
	eachFaceTransport(t, func(t *testing.T, transport string, chunk int) {
		const size, cut = 100 << 10, 30_000
		r := newFaceRig(t, transport, []string{"t1"}, sim.Options{Seed: 2, CutFace: cut, CrashDowntime: 200 * time.Millisecond},
			outbox.Settings{RetryInterval: 500 * time.Millisecond, HeartbeatTimeout: 2 * time.Second}, chunk)
		sha, data := r.putFace(size, 2)
		r.addPerson("t1", "m1", "p1", sha, size)
		res := r.results("m1")["m1"]
		if res.Status != outbox.Succeeded {
			t.Fatalf("m1: %+v", res)
		}
		term := r.fleet.Terminal("t1")
		if got, ok := term.Face(sha); !ok || !bytes.Equal(got, data) {
			t.Fatalf("face held %v, byte-exact %v", ok, bytes.Equal(got, data))
		}
		if st := term.Stats(); st.FaceCuts != 1 {
			t.Fatalf("cuts: %d", st.FaceCuts)
		}
		if sent := r.sent("t1"); sent > size+2*chunk {
			t.Fatalf("%d face bytes sent for a %d-byte face cut once: more than a resend", sent, size)
		}
		if err := r.fleet.Violations(); err != nil {
			t.Error(err)
		}
	})
}

// A terminal that lost a face the agent thought it held answers 21: the face goes again,
// then the person, without spending a try.
func TestFaceMissingOnTheTerminal(t *testing.T) {
	eachFaceTransport(t, func(t *testing.T, transport string, chunk int) {
		r := newFaceRig(t, transport, []string{"t1"}, sim.Options{Seed: 3}, outbox.Settings{RetryInterval: time.Second, MaxTries: 1}, chunk)
		sha, data := r.putFace(10_000, 3)
		r.addPerson("t1", "m1", "p1", sha, len(data))
		r.results("m1")
		term := r.fleet.Terminal("t1")
		if !term.DeleteFace(sha) {
			t.Fatal("the terminal did not hold the face")
		}
		r.addPerson("t1", "m2", "p2", sha, len(data))
		if res := r.results("m2")["m2"]; res.Status != outbox.Succeeded || res.Tries != 1 {
			t.Fatalf("m2: %+v", res)
		}
		if got, ok := term.Face(sha); !ok || !bytes.Equal(got, data) || r.sent("t1") != 2*len(data) {
			t.Fatalf("face again: held %v, %d bytes sent", ok, r.sent("t1"))
		}
		if err := r.fleet.Violations(); err != nil {
			t.Error(err)
		}
	})
}
