package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// testFace is a face of the tests: its bytes, sha256 and kind.
type testFace struct {
	data []byte
	sum  string
	kind string
}

func newTestFace(seed, n int, kind string) testFace {
	d, s := testFaceData(seed, n)
	return testFace{d, s, kind}
}

// personJSON is a person of a task; with f, its face, with its data when withData.
func personJSON(id, name string, f *testFace, withData bool) string {
	s := fmt.Sprintf(`{"id":%q,"name":%q`, id, name)
	if f != nil {
		s += fmt.Sprintf(`,"face":{"sha256":%q,"kind":%q`, f.sum, f.kind)
		if withData {
			s += fmt.Sprintf(`,"data":%q`, base64.StdEncoding.EncodeToString(f.data))
		}
		s += "}"
	}
	return s + "}"
}

// chunkLog counts, per terminal and face, the PutFace commands and the face bytes they
// carried; wake is poked on each.
type chunkLog struct {
	mu     sync.Mutex
	chunks map[string]map[string]int // device → sha256 → PutFace commands
	bytes  map[string]map[string]int // device → sha256 → face bytes sent
	cmds   map[string][]face.Command // device → every command but PutFace, in order
	wake   chan struct{}
}

func newChunkLog() *chunkLog {
	return &chunkLog{chunks: map[string]map[string]int{}, bytes: map[string]map[string]int{},
		cmds: map[string][]face.Command{}, wake: make(chan struct{}, 1)}
}

func (l *chunkLog) add(dev string, c face.Command) {
	l.mu.Lock()
	if c.Op == face.PutFace {
		if l.chunks[dev] == nil {
			l.chunks[dev], l.bytes[dev] = map[string]int{}, map[string]int{}
		}
		l.chunks[dev][c.Face.SHA256]++
		l.bytes[dev][c.Face.SHA256] += len(c.Face.Data)
	} else {
		l.cmds[dev] = append(l.cmds[dev], c)
	}
	l.mu.Unlock()
	poke(l.wake)
}

func (l *chunkLog) sent(dev, sum string) (chunks, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.chunks[dev][sum], l.bytes[dev][sum]
}

// desiredPerson is a person a terminal should hold: its name and face (nil: none).
type desiredPerson struct {
	name string
	face *testFace
}

// heldWithRevs is what terminal t holds as "id name rev face" lines in order.
func heldWithRevs(t *sim.Terminal) []string {
	var got []string
	for _, p := range t.Persons() {
		got = append(got, p.ID+" "+p.Name+" "+p.Rev+" "+p.Face.SHA256)
	}
	slices.Sort(got)
	return got
}

// wantWithRevs is desired as heldWithRevs says it, with the agent's rev of each record.
func wantWithRevs(desired map[string]desiredPerson) []string {
	var want []string
	for id, p := range desired {
		sum := ""
		if p.face != nil {
			sum = p.face.sum
		}
		want = append(want, id+" "+p.name+" "+face.RecordRev(id, p.name, "", "", sum).String()+" "+sum)
	}
	slices.Sort(want)
	return want
}

// Faces and batches through the whole daemon over MQTT: protocol 2 terminals announcing
// batches of 30, strict (never two commands in flight).
func TestFacesAndBatchesThroughTheDaemon(t *testing.T) { testFacesAndBatchesThroughTheDaemon(t, false) }

// The same over serial lines (pseudo-terminal pairs), in frame-sized chunks.
func TestFacesAndBatchesThroughTheDaemonSerial(t *testing.T) {
	testFacesAndBatchesThroughTheDaemon(t, true)
}

// Two terminals get persons with faces by AddPerson tasks (1 KiB templates and a 100 KiB
// photo, the same faces on both, one task naming a face without its data that an earlier
// task brought, one a face the gateway holds) and by a SetWhitelist with faces; a
// DeletePerson removes the last person of a face. Each face is stored once on the gateway
// and sent once to each terminal that needs it (PutFace commands counted per face and
// terminal); d1 cuts the photo's transfer, which resumes (at most two 4 KiB chunks more
// than the photo sent, within 1.1 times it); a face whose data does not hash to its sha256 and one over [faces] max_bytes are
// dead-lettered with their reasons; the face no person refers to any more is swept from
// the gateway. At the end each terminal holds exactly its desired persons with their revs,
// each face byte for byte, and the agent counts both terminals in sync.
func testFacesAndBatchesThroughTheDaemon(t *testing.T, overSerial bool) {
	ids := []string{"d1", "d2"}
	dataDir := t.TempDir()
	src := fmt.Sprintf(`[agent]
gateway_id = "gw-fb"
data_dir = %q
[broker]
listen = "127.0.0.1:0"
max_packet_size = "2MiB"
[intake]
max_message_size = "2MiB"
[dispatch]
retry_interval = "300ms"
heartbeat_timeout = "3s"
[faces]
max_bytes = "1MiB"
chunk_mqtt = "4KiB"
`, dataDir)
	chunk := 4 << 10
	devices, ports := deviceSections(t, ids, overSerial)
	src += devices
	cfg, err := config.Parse("e2e.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, a, stop := startAgentFull(t, cfg)
	defer stop()
	log := newChunkLog()
	opts := sim.Options{Seed: 21, Protocol: 2, Batch: 30, AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond},
		HeartbeatInterval: 100 * time.Millisecond, CrashDowntime: 200 * time.Millisecond, Strict: true, OnCommand: log.add,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }}
	var fleet *sim.Fleet
	if overSerial {
		fleet, err = sim.StartSerial(ports, opts)
	} else {
		fleet, err = sim.StartMQTT("mqtt://"+addr, ids, opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// d1 cuts the photo's first transfer at 30,000 bytes (the templates are smaller).
	const cut = 30_000
	fleet.Terminal("d1").SetCutFace(cut)

	bo := connectBackOffice(t, addr, "gw-fb")
	t1, t2, t3 := newTestFace(31, 1<<10, "template"), newTestFace(32, 1<<10, "template"), newTestFace(33, 1<<10, "template")
	photo := newTestFace(34, 100<<10, "photo")
	desired := map[string]map[string]desiredPerson{"d1": {}, "d2": {}}
	var taken []string
	add := func(task, dev, id string, f *testFace, withData bool) string {
		name := "N " + id
		desired[dev][id] = desiredPerson{name, f}
		taken = append(taken, task)
		return fmt.Sprintf(`{"taskId":%q,"deviceId":%q,"op":"AddPerson","person":%s}`, task, dev, personJSON(id, name, f, withData))
	}
	// One message: the same template and the photo on both terminals; d2's photo without
	// its data, which d1's task brought; a person without a face, so that batches mix.
	bo.publish("faceagent/gw-fb/tasks", []byte("["+strings.Join([]string{
		add("a1", "d1", "p1", &t1, true),
		add("a2", "d1", "p2", &photo, true),
		add("a3", "d1", "p3", &t2, true),
		add("a4", "d1", "p4", nil, false),
		add("a5", "d2", "p1", &t1, true),
		add("a6", "d2", "p2", &photo, false),
		add("a7", "d2", "p5", &t2, true),
		add("a8", "d2", "p6", nil, false),
	}, ",")+"]"))
	if got := faceFiles(t, dataDir); len(got) != 3 {
		t.Fatalf("data_dir/faces holds %v, want each of the 3 faces once", got)
	}
	// A face the gateway holds, named without its data.
	bo.publish("faceagent/gw-fb/tasks", []byte(add("a9", "d1", "p7", &t1, false)))
	// A SetWhitelist with faces: d2's list becomes p1 (t1), p2 (the photo, held: no data),
	// p8 (a new face) and p9 (none); p5 and p6 go.
	sw := []string{personJSON("p1", "N p1", &t1, false), personJSON("p2", "N p2", &photo, false),
		personJSON("p8", "N p8", &t3, true), personJSON("p9", "N p9", nil, false)}
	bo.publish("faceagent/gw-fb/tasks", []byte(fmt.Sprintf(`{"taskId":"s1","deviceId":"d2","op":"SetWhitelist","persons":[%s]}`, strings.Join(sw, ","))))
	taken = append(taken, "s1")
	desired["d2"] = map[string]desiredPerson{"p1": {"N p1", &t1}, "p2": {"N p2", &photo}, "p8": {"N p8", &t3}, "p9": {"N p9", nil}}
	// Refused: data that does not hash to the face's sha256; a face over the budget.
	bad := t3
	bad.sum = newTestFace(35, 1<<10, "template").sum
	bo.publish("faceagent/gw-fb/tasks", []byte(fmt.Sprintf(`{"taskId":"x1","deviceId":"d1","op":"AddPerson","person":%s}`, personJSON("p10", "N p10", &bad, true))))
	huge := newTestFace(36, 950<<10, "photo")
	bo.publish("faceagent/gw-fb/tasks", []byte(fmt.Sprintf(`{"taskId":"x2","deviceId":"d2","op":"AddPerson","person":%s}`, personJSON("p11", "N p11", &huge, true))))

	bo.waitSucceeded(taken, 2, 60*time.Second) // returns locked
	reasons := []string{bo.dead[0].Reason, bo.dead[1].Reason}
	bo.mu.Unlock()
	for i, want := range []string{
		`face.data: hashes to `,
		`person.face: face ` + huge.sum + ` of person "p11": faces: over the disk budget [faces] max_bytes = 1048576`,
	} {
		if !strings.Contains(reasons[i], want) {
			t.Errorf("deadletter %d: %q, want it to hold %q", i, reasons[i], want)
		}
	}
	if got := faceFiles(t, dataDir); len(got) != 4 {
		t.Errorf("data_dir/faces holds %v, want the 4 faces taken", got)
	}

	// The last person of t2: d2's p5 went with the SetWhitelist, d1's p3 goes now.
	bo.publish("faceagent/gw-fb/tasks", []byte(`{"taskId":"del","deviceId":"d1","op":"DeletePerson","person":{"id":"p3"}}`))
	delete(desired["d1"], "p3")
	bo.waitFor("the delete's result", 30*time.Second, func() bool { _, ok := bo.results["del"]; return ok })
	pollUntil(t, "t2 swept", func() bool {
		v, _ := seriesValue(scrape(t, a), `faceagent_faces_removed_total{reason="unreferenced"}`)
		return v == 1
	})
	files := faceFiles(t, dataDir)
	slices.Sort(files)
	want := []string{t1.sum + ".1024", t3.sum + ".1024", photo.sum + ".102400"}
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Errorf("data_dir/faces holds %v, want %v", files, want)
	}
	pollUntil(t, "both terminals in sync", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 2 })

	for _, dev := range ids {
		term := fleet.Terminal(dev)
		if got, want := heldWithRevs(term), wantWithRevs(desired[dev]); !slices.Equal(got, want) {
			t.Errorf("%s holds %v", dev, diffLines(got, want))
		}
		sent := map[string]bool{}
		for _, p := range desired[dev] {
			if p.face == nil || sent[p.face.sum] {
				continue
			}
			sent[p.face.sum] = true
			if got, ok := term.Face(p.face.sum); !ok || !bytes.Equal(got, p.face.data) {
				t.Errorf("%s: face %.8s held %v, byte-exact %v", dev, p.face.sum, ok, bytes.Equal(got, p.face.data))
			}
			chunks, n := log.sent(dev, p.face.sum)
			whole := (len(p.face.data) + chunk - 1) / chunk
			if dev == "d1" && p.face == &photo {
				// Cut once: the chunk cut short went again (a chunk sent twice is harmless,
				// the terminal ignores it), then the rest from what it held: at most two
				// chunks more than the photo, within 1.1 times it with 4 KiB chunks.
				if n > len(photo.data)+2*chunk || n > len(photo.data)*11/10 || n < len(photo.data) {
					t.Errorf("d1: %d photo bytes sent for a %d-byte photo cut once", n, len(photo.data))
				}
				if st := term.Stats(); st.FaceCuts != 1 {
					t.Errorf("d1: %d cuts, want 1", st.FaceCuts)
				}
				continue
			}
			if chunks != whole || n != len(p.face.data) {
				t.Errorf("%s: face %.8s sent in %d chunks, %d bytes; want %d chunks, %d bytes (once)", dev, p.face.sum, chunks, n, whole, len(p.face.data))
			}
		}
	}
	// t2 went to each terminal once too, before it was given up.
	for _, dev := range ids {
		if chunks, n := log.sent(dev, t2.sum); chunks != 1 || n != len(t2.data) {
			t.Errorf("%s: t2 sent in %d chunks, %d bytes", dev, chunks, n)
		}
	}
	// Batches carried persons (the terminals announce 30).
	log.mu.Lock()
	batches := 0
	for _, dev := range ids {
		for _, c := range log.cmds[dev] {
			if c.Op == face.AddPersons {
				batches++
			}
		}
	}
	log.mu.Unlock()
	if batches == 0 {
		t.Error("no AddPersons batch was sent")
	}
	if err := fleet.Violations(); err != nil {
		t.Error(err)
	}
}

// SIGKILL of the agent in the middle of a 100 KiB photo's transfer: an agent in a child
// sends the photo to a strict protocol 2 terminal in 4 KiB chunks, each acked after 10 ms,
// and is killed once the terminal got 40 KiB of it. An agent restarted on the same
// data_dir finishes the transfer: the terminal holds the photo byte for byte and the
// person with its rev, and the task has exactly one result, succeeded.
func TestFaceTransferSurvivesSIGKILL(t *testing.T) {
	dir, addr := t.TempDir(), freeLoopbackAddr(t)
	src := fmt.Sprintf(`[agent]
gateway_id = "gw-fx"
data_dir = %q
[broker]
listen = %q
[dispatch]
retry_interval = "300ms"
heartbeat_timeout = "3s"
[faces]
chunk_mqtt = "4KiB"
[[devices]]
id = "d1"
`, dir, addr)
	cfgPath := filepath.Join(t.TempDir(), "agent.toml")
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	log := newChunkLog()
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"d1"}, sim.Options{Seed: 5, Protocol: 2, Batch: 30,
		AckLatency: sim.Latency{Kind: sim.Fixed, A: 10 * time.Millisecond}, HeartbeatInterval: 100 * time.Millisecond,
		Strict: true, OnCommand: log.add, OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()

	// The back office's session first, in an agent of this process: it outlives the kill.
	_, _, stop := startAgentFull(t, parse(t, src))
	connectBackOfficeSession(t, addr, "gw-fx", 3600)
	stop()

	child := testutil.StartChild(t, syncKillChildEnv+"="+cfgPath)
	child.WaitLine("ready", 30*time.Second)
	photo := newTestFace(41, 100<<10, "photo")
	boc := connectBackOfficeAs(t, addr, "gw-fx", "gw-fx-sender", true, 0)
	boc.publish("faceagent/gw-fx/tasks", []byte(fmt.Sprintf(`{"taskId":"k1","deviceId":"d1","op":"AddPerson","person":%s}`,
		personJSON("p1", "N p1", &photo, true))))
	waitFor(t, "40 KiB of the photo on the terminal", func() bool {
		_, n := log.sent("d1", photo.sum)
		return n >= 40<<10
	}, log.wake)
	child.Kill()
	term := fleet.Terminal("d1")
	if have := term.FaceHave(photo.sum); have >= len(photo.data) {
		t.Fatalf("the terminal holds %d bytes of the photo at the kill: nothing left to send", have)
	}

	_, a, _ := startAgentFull(t, parse(t, src))
	bo := connectBackOfficeAs(t, addr, "gw-fx", "backoffice", false, 3600)
	bo.waitFor("the task's result", 30*time.Second, func() bool { _, ok := bo.results["k1"]; return ok })
	pollUntil(t, "d1 in sync", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 1 })
	if got, ok := term.Face(photo.sum); !ok || !bytes.Equal(got, photo.data) {
		t.Errorf("the photo held %v, byte-exact %v", ok, bytes.Equal(got, photo.data))
	}
	want := wantWithRevs(map[string]desiredPerson{"p1": {"N p1", &photo}})
	if got := heldWithRevs(term); !slices.Equal(got, want) {
		t.Errorf("d1 holds %v", diffLines(got, want))
	}
	bo.mu.Lock()
	var results []wire.Result
	for _, r := range bo.all {
		if r.TaskID == "k1" {
			results = append(results, r)
		}
	}
	bo.mu.Unlock()
	if len(results) != 1 || results[0].Status != wire.Succeeded {
		t.Errorf("the task's results: %+v, want one, succeeded", results)
	}
	_, n := log.sent("d1", photo.sum)
	t.Logf("%d photo bytes sent for a %d-byte photo across the kill", n, len(photo.data))
	if err := fleet.Violations(); err != nil {
		t.Error(err)
	}
}
