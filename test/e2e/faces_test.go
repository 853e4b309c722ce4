package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent"
	"github.com/seed0e69bba5/faceagent/agent/faces"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// testFaceData is n bytes of a face and its sha256 in wire form.
func testFaceData(seed, n int) ([]byte, string) {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*31 + i*7 + i>>11)
	}
	s := sha256.Sum256(b)
	return b, hex.EncodeToString(s[:])
}

// faceTask is an AddPerson of person id on dev with a face (data nil: sent without it).
func faceTask(task, dev, id, sum string, data []byte) string {
	f := fmt.Sprintf(`{"sha256":%q,"kind":"template"`, sum)
	if data != nil {
		f += fmt.Sprintf(`,"data":%q`, base64.StdEncoding.EncodeToString(data))
	}
	return fmt.Sprintf(`{"taskId":%q,"deviceId":%q,"op":"AddPerson","person":{"id":%q,"name":"N %s","face":%s}}`, task, dev, id, id, f+"}")
}

// faceFiles lists the faces in data_dir/faces (not the lock, nor temporary files).
func faceFiles(t testing.TB, dataDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dataDir, agent.FacesDir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); n != "LOCK" && !strings.HasPrefix(n, ".") {
			out = append(out, n)
		}
	}
	return out
}

// Faces end to end over the embedded broker: a 1 KiB and a 100 KiB face, each brought by
// tasks for two terminals and two persons, are stored once; each AddPerson reaches its
// terminal with the face's ref and the rev with the face's hash; a later task naming a
// face the gateway holds, without its data, is taken; one naming a face the gateway does
// not hold is dead-lettered with a reason naming the face and the person, and so is one
// over [faces] max_bytes, alone in its message; a face no desired person refers to any
// more is removed, one another terminal's list still refers to is kept. The terminals
// speak protocol 1, which takes a person without holding its face (sending faces is the
// sender's business, tested with it).
func TestFacesFlowIntoTheStore(t *testing.T) {
	dataDir := t.TempDir()
	cfg := parse(t, fmt.Sprintf(`[agent]
gateway_id = "gw-f"
data_dir = %q
[broker]
listen = "127.0.0.1:0"
max_packet_size = "2MiB"
[intake]
max_message_size = "2MiB"
[faces]
max_bytes = "1MiB"
[[devices]]
id = "d1"
[[devices]]
id = "d2"
`, dataDir))
	addr, a, stop := startAgentFull(t, cfg)
	defer stop()
	log := newCommandLog()
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"d1", "d2"}, sim.Options{Protocol: 1,
		AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond}, Strict: true, OnCommand: log.add,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	bo := connectBackOffice(t, addr, "gw-f")
	small, smallSum := testFaceData(1, 1<<10)
	big, bigSum := testFaceData(2, 100<<10)
	_, unknownSum := testFaceData(3, 10)
	huge, hugeSum := testFaceData(4, 950<<10)

	// Both faces, each to two terminals and two persons; the last refers to the big face
	// without its data, which an earlier element brought.
	bo.publish("faceagent/gw-f/tasks", []byte("["+strings.Join([]string{
		faceTask("a1", "d1", "p1", smallSum, small),
		faceTask("a2", "d2", "p1", smallSum, small),
		faceTask("a3", "d1", "p2", bigSum, big),
		faceTask("a4", "d2", "p2", bigSum, nil),
	}, ",")+"]"))
	if got := faceFiles(t, dataDir); len(got) != 2 {
		t.Fatalf("data_dir/faces holds %v, want each face once", got)
	}
	// Held by the gateway: taken without data.
	bo.publish("faceagent/gw-f/tasks", []byte(faceTask("a5", "d1", "p3", smallSum, nil)))
	// Unknown without data; over the budget (alone in its message).
	bo.publish("faceagent/gw-f/tasks", []byte(faceTask("x1", "d1", "p4", unknownSum, nil)))
	bo.publish("faceagent/gw-f/tasks", []byte("["+faceTask("x2", "d2", "p5", hugeSum, huge)+`,{"taskId":"a6","deviceId":"d2","op":"AddPerson","person":{"id":"p6","name":"no face"}}]`))
	taken := []string{"a1", "a2", "a3", "a4", "a5", "a6"}
	bo.waitSucceeded(taken, 2, 30*time.Second) // returns locked
	for _, id := range []string{"x1", "x2"} {
		if _, ok := bo.results[id]; ok {
			t.Errorf("a dead-lettered task %s got a result", id)
		}
	}
	reasons := []string{bo.dead[0].Reason, bo.dead[1].Reason}
	bo.mu.Unlock()
	for i, want := range []string{
		`person.face: face ` + unknownSum + ` of person "p4": not held by this gateway`,
		`person.face: face ` + hugeSum + ` of person "p5": faces: over the disk budget [faces] max_bytes = 1048576`,
	} {
		if !strings.HasPrefix(reasons[i], want) {
			t.Errorf("deadletter %d: %q, want it to begin %q", i, reasons[i], want)
		}
	}
	if got := faceFiles(t, dataDir); len(got) != 2 {
		t.Fatalf("data_dir/faces holds %v after the refusals", got)
	}

	// The commands carry the face's ref and the rev with its hash.
	refs := map[string]face.FaceRef{
		"p1": {SHA256: smallSum, Size: 1 << 10, Kind: face.FaceTemplate},
		"p2": {SHA256: bigSum, Size: 100 << 10, Kind: face.FaceTemplate},
		"p3": {SHA256: smallSum, Size: 1 << 10, Kind: face.FaceTemplate},
	}
	log.mu.Lock()
	n := 0
	for dev, cmds := range log.cmds {
		for _, c := range cmds {
			want, ok := refs[c.Person.ID]
			if c.Op != face.AddPerson || !ok {
				continue
			}
			n++
			if c.Person.Face != want {
				t.Errorf("%s %s: face %+v, want %+v", dev, c.Person.ID, c.Person.Face, want)
			}
			if rev := face.RecordRev(c.Person.ID, c.Person.Name, "", "", want.SHA256).String(); c.Person.Rev != rev {
				t.Errorf("%s %s: rev %s, want %s (with the face's hash)", dev, c.Person.ID, c.Person.Rev, rev)
			}
		}
	}
	log.mu.Unlock()
	if n != 5 {
		t.Errorf("%d AddPerson commands with faces, want 5", n)
	}

	// The big face's last persons go: removed. The small face's on d1 go: d2 still
	// refers to it, kept.
	var dels []wire.Task
	for _, d := range [][2]string{{"d1", "p2"}, {"d2", "p2"}, {"d1", "p1"}, {"d1", "p3"}} {
		dels = append(dels, wire.Task{TaskID: "del-" + d[0] + d[1], DeviceID: d[0], Op: face.DeletePerson, Person: face.Person{ID: d[1]}})
	}
	b, _ := json.Marshal(dels)
	bo.publish("faceagent/gw-f/tasks", b)
	// The sweep counts the removal once its directory fsync returned.
	pollUntil(t, "the big face removed", func() bool {
		v, _ := seriesValue(scrape(t, a), `faceagent_faces_removed_total{reason="unreferenced"}`)
		return v == 1
	})
	if got := faceFiles(t, dataDir); !slices.Equal(got, []string{smallSum + ".1024"}) {
		t.Errorf("data_dir/faces holds %v, want the small face alone", got)
	}
	if v := metric(t, a, "faceagent_faces"); v != 1 {
		t.Errorf("faceagent_faces %v, want 1", v)
	}
}

// SIGKILL between desired-list changes and the face sweeps they call for: an agent in a
// child takes messages that add persons with faces (always with their data) and delete
// persons, on two terminals, so that faces keep leaving and entering the desired lists;
// it is killed after a varying number of acknowledged messages, at once or a moment
// later (with a sweep due or under way). After each kill, every face the durable desired
// lists refer to is in data_dir/faces, whole (hashed again); an agent started at the end
// sweeps at start, leaving exactly the faces referred to.
func TestFacesSurviveSIGKILLBetweenChangeAndSweep(t *testing.T) {
	dir, addr := t.TempDir(), freeLoopbackAddr(t)
	src := fmt.Sprintf(`[agent]
gateway_id = "gw-fk"
data_dir = %q
[broker]
listen = %q
[[devices]]
id = "d1"
[[devices]]
id = "d2"
`, dir, addr)
	cfgPath := filepath.Join(t.TempDir(), "agent.toml")
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	type faceOf struct {
		data []byte
		sum  string
	}
	var fs []faceOf
	for i := range 12 {
		d, s := testFaceData(10+i, 2048+i)
		fs = append(fs, faceOf{d, s})
	}
	rng := rand.New(rand.NewPCG(7, 7))
	model := map[string]string{} // "dev/person" → the face of its desired record
	referred := func() map[[32]byte]struct{} {
		set := map[[32]byte]struct{}{}
		for _, sum := range model {
			var b [32]byte
			hex.Decode(b[:], []byte(sum))
			set[b] = struct{}{}
		}
		return set
	}
	check := func(when string, exact bool) {
		t.Helper()
		wl, err := whitelist.Open(filepath.Join(dir, agent.WhitelistDir), whitelist.Options{})
		if err != nil {
			t.Fatal(err)
		}
		inUse, err := wl.Faces()
		wl.Close()
		if err != nil {
			t.Fatal(err)
		}
		st, err := faces.Open(filepath.Join(dir, agent.FacesDir), faces.Options{VerifyOnOpen: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if r := st.Recovery(); len(r.Damaged) > 0 {
			t.Fatalf("%s: damaged faces %v", when, r.Damaged)
		}
		if want := referred(); !maps.Equal(inUse, want) {
			t.Fatalf("%s: the durable desired lists refer to %d faces, the acknowledged tasks to %d", when, len(inUse), len(want))
		}
		for sum := range inUse {
			if !st.Has(faces.Sum(sum)) {
				t.Fatalf("%s: the desired lists refer to face %x, which the store lost", when, sum)
			}
		}
		if exact && st.Stats().Faces != len(inUse) {
			t.Fatalf("%s: the store holds %d faces, the desired lists refer to %d", when, st.Stats().Faces, len(inUse))
		}
	}
	for round, acked := range []int{3, 8, 5, 12} {
		child := testutil.StartChild(t, syncKillChildEnv+"="+cfgPath)
		child.WaitLine("ready", 30*time.Second)
		bo := connectBackOfficeAs(t, addr, "gw-fk", fmt.Sprintf("bo-%d", round), true, 0)
		for m := range acked {
			var tasks []string
			for k := range 3 {
				dev := []string{"d1", "d2"}[rng.IntN(2)]
				p := fmt.Sprintf("p%d", rng.IntN(6))
				id := fmt.Sprintf("r%d-m%d-%d", round, m, k)
				// The round's later messages mostly delete: faces stay referred to by
				// the persons they leave, brought by no message of this agent's run.
				if rng.IntN(3) == 0 || (m > acked/2 && rng.IntN(4) > 0) {
					tasks = append(tasks, fmt.Sprintf(`{"taskId":%q,"deviceId":%q,"op":"DeletePerson","person":{"id":%q}}`, id, dev, p))
					delete(model, dev+"/"+p)
					continue
				}
				f := fs[rng.IntN(len(fs))]
				tasks = append(tasks, faceTask(id, dev, p, f.sum, f.data))
				model[dev+"/"+p] = f.sum
			}
			bo.publish("faceagent/gw-fk/tasks", []byte("["+strings.Join(tasks, ",")+"]"))
		}
		// The kill point: at once (the sweep these changes call for not run yet), or
		// 0.8 to 2 s later (its delay is 1 s: the sweep due, under way or done).
		if round%2 == 1 {
			time.Sleep(time.Duration(800+rng.IntN(1200)) * time.Millisecond)
		}
		child.Kill()
		check(fmt.Sprintf("after kill %d", round), false)
	}
	_, _, stop := startAgentFull(t, parse(t, src))
	// The sweep at start leaves only the faces referred to.
	pollUntil(t, "the sweep at start", func() bool { return len(faceFiles(t, dir)) == len(referred()) })
	stop()
	check("after a clean restart", true)
}
