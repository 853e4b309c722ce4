package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// Sizes and margins of TestDaemonSoak.
const (
	soakShortLoad   = 45 * time.Second // the load phase in `make test`
	soakLongLoad    = 20 * time.Minute // under FACEAGENT_SOAK=1 unless FACEAGENT_SOAK_DURATION says otherwise
	soakMsgsASecond = 8                // task messages the back office publishes a second (one task or an array)
	soakPersons     = 30               // person ids the tasks draw from, shared by the terminals
	soakBatch       = 8                // the batch the batching terminals announce
	// After the load, with the same clients connected and nothing queued, the agent runs
	// what it ran at its baseline (idle after the restart): per-connection readers and
	// writers, timers. A few more may be mid-exit (an HTTP scrape's, a retry timer's).
	soakGoroutineSlack = 8
	soakFDSlack        = 2 // a scrape's connection being closed, a journal file being rotated
	// The RSS of the last third of the restarted agent's life may pass the first third's
	// peak by this much. The agent's live heap is 1-3 MiB here and the Go runtime lets the
	// heap reach twice the live heap before a collection, returning freed pages to the
	// kernel only lazily, so RSS moves by about that much between two samples without any
	// leak; 3 MiB is just above it. A leak shows at that margin once it passes 3 MiB over
	// the middle third: in the 20-minute soak (about 13,000 tasks) from about 350 bytes a
	// task; in the short run (about 350 tasks after the restart) only from about 15 KiB a
	// task.
	soakRSSMarginKB = 3 << 10
)

// soakFaceSizes are the faces persons carry (shared by persons and terminals, so that the
// sweep has faces to keep and to remove); the largest takes several PutFace chunks on MQTT
// (chunk_mqtt 4 KiB) and on the serial line (chunk_serial 4 KiB).
var soakFaceSizes = [...]int{200, 900, 1800, 3000, 9000}

// soakFaceWeights are the odds of each face in a draw, then of none.
var soakFaceWeights = [len(soakFaceSizes) + 1]int{6, 3, 2, 1, 1, 6}

// The real daemon under a steady mix of back-office traffic for a while, watched for what
// short tests hide: slow leaks. The agent is the faceagent binary as released, built by
// the test without the race detector even under -race (the detector's shadow memory grows
// for minutes with the heap flat, so RSS would measure it, not the agent; the in-process
// tests run the agent under the detector), in a child process (journal sync "always",
// the default) with its embedded broker and kept sessions; five simulated terminals: two
// MQTT protocol 2 terminals announcing batches, one that does not, one protocol 1, and one
// on a serial line (a pseudo-terminal pair), faces on every v2 terminal. A back office with
// a kept session publishes task messages at a steady pace: AddPerson with and without a face
// of a shared pool (with the face's data, or without it when the gateway holds it),
// DeletePerson, arrays of both, now and then a SetWhitelist, the last message again, and a
// task whose face does not hash to its sha256 (dead-lettered). On a schedule: factory resets
// of three terminals, two terminals offline past heartbeat_timeout and back, and one SIGKILL
// of the agent a quarter in, after which it starts again on the same data_dir and the back
// office resumes its session.
//
// Every few seconds the agent's RSS and open descriptors (/proc), its goroutines, live heap
// and queued commands (/metrics) and data_dir's size are sampled; the table is logged and,
// with FACEAGENT_SOAK_OUT set, written there as CSV. At the end: every task the broker
// accepted has exactly one result (copies of it, after the SIGKILL, carry the same
// messageId and status; a failure a reason) or a deadletter with a reason; every terminal
// holds exactly the list the tasks make (computed here from the tasks: ids, names, the
// agent's revs and faces on v2; ids and names on v1) and the agent counts every v2 terminal
// in sync (a v1 terminal cannot say what it holds: never counted); once idle, goroutines and descriptors are back within a small constant of the
// restarted agent's idle baseline; its RSS in the last third of its life is not above the
// first third's peak by more than soakRSSMarginKB; data_dir stays within the bound its
// journals' configuration gives (soakDiskBoundKB). Its RSS once quiet at the end (its free
// memory given back, internal/memtrim) is reported beside.
//
// `make test` runs 45 s of load; FACEAGENT_SOAK=1 (`make soak`) runs FACEAGENT_SOAK_DURATION
// (default 20m); FACEAGENT_SOAK_SEED replays a run's draws.
func TestDaemonSoak(t *testing.T) {
	load := soakShortLoad
	if os.Getenv("FACEAGENT_SOAK") != "" {
		load = soakLongLoad
		if d, err := time.ParseDuration(os.Getenv("FACEAGENT_SOAK_DURATION")); err == nil && d > 0 {
			load = d
		}
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("FACEAGENT_SOAK_SEED"), 10, 64); err == nil && s != 0 {
		seed = s
	}
	t.Logf("seed %d (FACEAGENT_SOAK_SEED replays it), load %v", seed, load)
	s := newSoakRun(t, seed)
	s.converge("the terminals' first lists", 60*time.Second)
	s.sample("warm")
	s.runLoad(load)
	s.converge("the end of the load", 3*time.Minute)
	s.settle()
	s.sample("idle")
	s.endQuiet = s.quiet("quiet")
	s.report()
	s.checkResults()
	s.checkResources()
}

// soakRun is one soak: the agent's child process, its terminals, the back office and the
// model of what the tasks desire.
type soakRun struct {
	t                                   *testing.T
	r                                   *rand.Rand
	began                               time.Time
	bin                                 string // the faceagent binary
	cfgPath, dataDir, addr, metricsAddr string
	devs                                []string
	v1                                  map[string]bool
	fleets                              []*sim.Fleet
	taskModel
	child    *testutil.Child
	bo       *backOffice
	bos      []*backOffice   // every back office connection, the current one last
	taken    []string        // the ids of the tasks the broker accepted, in order
	refused  map[string]bool // tasks sent to be dead-lettered
	lastMsg  []byte
	samples  []soakSample
	base     soakSample // the restarted agent idle, before its load
	endQuiet soakSample // the agent quiet at the end (its free memory given back)
}

func newSoakRun(t *testing.T, seed uint64) *soakRun {
	s := &soakRun{t: t, r: rand.New(rand.NewPCG(seed, seed^0x50a4)), began: time.Now(), dataDir: t.TempDir(),
		addr: freeLoopbackAddr(t), metricsAddr: freeLoopbackAddr(t), v1: map[string]bool{"t3": true},
		refused: map[string]bool{}, devs: []string{"t0", "t1", "t2", "t3", "s0"}}
	s.taskModel = newTaskModel(s.r, seed, s.devs, soakPersons, soakFaceSizes[:], soakFaceWeights[:])
	src := fmt.Sprintf(`[agent]
gateway_id = "gw-soak"
data_dir = %q
[broker]
listen = %q
[metrics]
listen = %q
[dispatch]
retry_interval = "300ms"
heartbeat_timeout = "3s"
[whitelist]
backoff_base = "200ms"
backoff_max = "1s"
list_limit = 10
[faces]
chunk_mqtt = "4KiB"
`, s.dataDir, s.addr, s.metricsAddr)
	mqttFleets := [][]string{{"t0", "t1"}, {"t2"}, {"t3"}}
	for _, ids := range mqttFleets {
		for _, id := range ids {
			src += fmt.Sprintf("[[devices]]\nid = %q\n", id)
		}
	}
	serialDevices, serialPorts := deviceSections(t, []string{"s0"}, true)
	src += serialDevices
	s.cfgPath = filepath.Join(t.TempDir(), "agent.toml")
	if err := os.WriteFile(s.cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	s.bin = buildFaceagent(t)
	s.start()
	opts := func(i int, protocol, batch int) sim.Options {
		return sim.Options{Seed: seed + uint64(i), Protocol: protocol, Batch: batch, AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond},
			HeartbeatInterval: 250 * time.Millisecond, Strict: true,
			OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }}
	}
	for i, o := range []sim.Options{opts(0, 2, soakBatch), opts(1, 2, 0), opts(2, 1, 0)} {
		fleet, err := sim.StartMQTT("mqtt://"+s.addr, mqttFleets[i], o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fleet.Close() })
		s.fleets = append(s.fleets, fleet)
	}
	fleet, err := sim.StartSerial(serialPorts, opts(3, 2, soakBatch))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	s.fleets = append(s.fleets, fleet)
	s.connectBackOffice(true)
	// Every terminal managed from the start: an empty list each.
	for _, dev := range s.devs {
		s.publish(wire.Task{TaskID: s.nextTaskID(), DeviceID: dev, Op: wire.SetWhitelist, Persons: []face.Person{}})
	}
	return s
}

// start runs the agent in a new child and waits until it is ready.
func (s *soakRun) start() {
	s.child = testutil.StartProgram(s.t, s.bin, []string{"-config", s.cfgPath})
	s.child.WaitLine("faceagent running", 60*time.Second)
}

// buildFaceagent builds the daemon's binary, as released (no race detector), into a
// temporary directory and returns its path.
func buildFaceagent(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "faceagent")
	cmd := exec.Command("go", "build", "-o", bin, "./agent/cmd/faceagent")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build faceagent: %v\n%s", err, out)
	}
	return bin
}

func (s *soakRun) connectBackOffice(first bool) {
	s.bo = connectBackOfficeAs(s.t, s.addr, "gw-soak", "backoffice", first, 3600)
	s.bos = append(s.bos, s.bo)
}

// kill SIGKILLs the agent between two messages, starts it again on the same data_dir and
// resumes the back office's kept session.
func (s *soakRun) kill() {
	s.child.Kill()
	s.start()
	s.connectBackOffice(false)
}

func (s *soakRun) term(dev string) *sim.Terminal { return fleetTerminal(s.t, s.fleets, dev) }

// soakEvent is a fault at a fraction of the load phase.
type soakEvent struct {
	at   float64
	name string
	do   func(s *soakRun)
}

var soakEvents = []soakEvent{
	{0.12, "factory reset t0", func(s *soakRun) { s.term("t0").FactoryReset() }},
	{0.25, "SIGKILL and restart", func(s *soakRun) {
		s.kill()
		s.converge("the restarted agent", 2*time.Minute)
		s.settle()
		s.base = s.sample("base")
	}},
	{0.40, "t2 offline 5s", func(s *soakRun) { s.term("t2").GoOffline(5 * time.Second) }},
	{0.55, "factory reset s0 (serial)", func(s *soakRun) { s.term("s0").FactoryReset() }},
	{0.70, "t3 (v1) offline 5s", func(s *soakRun) { s.term("t3").GoOffline(5 * time.Second) }},
	{0.85, "factory reset t1", func(s *soakRun) { s.term("t1").FactoryReset() }},
}

// runLoad publishes task messages at soakMsgsASecond for d, runs soakEvents when their
// time comes and samples the agent at a steady interval (at most about 300 samples).
func (s *soakRun) runLoad(d time.Duration) {
	every := time.Second / soakMsgsASecond
	sampleEvery := max(2*time.Second, d/300)
	start := time.Now()
	next, nextSample, events := start, start.Add(sampleEvery), soakEvents
	for now := time.Now(); now.Sub(start) < d && !s.t.Failed(); now = time.Now() {
		if len(events) > 0 && now.Sub(start) >= time.Duration(events[0].at*float64(d)) {
			s.t.Logf("%v: %s", s.since(), events[0].name)
			events[0].do(s)
			events = events[1:]
			continue
		}
		if !now.Before(nextSample) {
			s.sample("load")
			nextSample = now.Add(sampleEvery)
		}
		if now.Before(next) {
			time.Sleep(min(next.Sub(now), nextSample.Sub(now))) // the pace of the back office, not a wait for an event
			continue
		}
		s.step()
		if next = next.Add(every); next.Before(now) {
			next = now // behind: no burst to catch up
		}
	}
}

func (s *soakRun) since() time.Duration { return time.Since(s.began).Round(100 * time.Millisecond) }

// sample reads the agent, notes the tasks and results so far and keeps the sample.
func (s *soakRun) sample(phase string) soakSample {
	x := sampleAgent(s.t, s.child.Pid(), s.metricsAddr, s.dataDir)
	x.at, x.phase, x.tasks = time.Since(s.began), phase, len(s.taken)
	results, dead := s.outcomes()
	x.results = len(results) + len(dead)
	s.samples = append(s.samples, x)
	return x
}

// step publishes one message drawn from the mix.
func (s *soakRun) step() {
	dev := s.devs[s.r.IntN(len(s.devs))]
	switch n := s.r.IntN(100); {
	case n < 55:
		s.publish(s.taskFor(dev, face.AddPerson))
	case n < 72:
		s.publish(s.taskFor(dev, face.DeletePerson))
	case n < 88:
		ts := make([]wire.Task, 2+s.r.IntN(3))
		for i := range ts {
			op := face.AddPerson
			if s.r.IntN(3) == 0 {
				op = face.DeletePerson
			}
			ts[i] = s.taskFor(dev, op)
		}
		s.publish(ts...)
	case n < 92:
		s.publish(s.setWhitelistFor(dev))
	case n < 97:
		s.bo.publish("faceagent/gw-soak/tasks", s.lastMsg) // the last message again: a duplicate, no change
	default:
		// A face whose data does not hash to its sha256: dead-lettered, nothing changes.
		id := s.nextTaskID()
		bad := s.faces[0]
		bad.sum = newTestFace(int(s.r.Uint32()), 64, "template").sum
		s.bo.publish("faceagent/gw-soak/tasks", []byte(fmt.Sprintf(`{"taskId":%q,"deviceId":%q,"op":"AddPerson","person":%s}`,
			id, dev, personJSON("p0", "bad", &bad, true))))
		s.taken = append(s.taken, id)
		s.refused[id] = true
	}
}

// publish sends ts as one message and, once the broker accepted it, applies it to the
// model. A face a desired person refers to (the gateway holds it for sure) goes without its
// data half the time; any other with it.
func (s *soakRun) publish(ts ...wire.Task) {
	b, _ := s.messageJSON(ts)
	s.bo.publish("faceagent/gw-soak/tasks", b)
	s.lastMsg = b
	for _, t := range ts {
		s.taken = append(s.taken, t.TaskID)
		s.apply(t)
	}
}

// outcomes are the results (every copy, in arrival order) and the deadletters (by task
// id) every back office connection got so far.
func (s *soakRun) outcomes() (map[string][]wire.Result, map[string]wire.DeadLetter) {
	results, dead := map[string][]wire.Result{}, map[string]wire.DeadLetter{}
	for _, bo := range s.bos {
		bo.mu.Lock()
		for _, r := range bo.all {
			results[r.TaskID] = append(results[r.TaskID], r)
		}
		for _, d := range bo.dead {
			var task struct {
				TaskID string `json:"taskId"`
			}
			if err := json.Unmarshal(d.Payload, &task); err != nil {
				s.t.Errorf("deadletter payload %s: %v", d.Payload, err)
			}
			dead[task.TaskID] = d
		}
		bo.mu.Unlock()
	}
	return results, dead
}

// wrongTerminals lists how each terminal differs from the model: on v2 its persons with
// their revs and faces (each face byte for byte), on v1 its ids and names.
func (s *soakRun) wrongTerminals() []string {
	var wrong []string
	for _, dev := range s.devs {
		term := s.term(dev)
		var got, want []string
		if s.v1[dev] {
			got = heldNames(term, false)
			for id, q := range s.model[dev] {
				want = append(want, id+" "+q.name)
			}
			slices.Sort(want)
		} else {
			got, want = heldWithRevs(term), wantWithRevs(s.model[dev])
			wrong = append(wrong, s.wrongFaces(dev, term)...)
		}
		if !slices.Equal(got, want) {
			wrong = append(wrong, fmt.Sprintf("%s holds %d, want %d: %v", dev, len(got), len(want), diffLines(got, want)))
		}
	}
	return wrong
}

// converge waits, within timeout, until every taken task has a result or a deadletter,
// every terminal holds what the model says, the agent counts all in sync and nothing is
// queued.
func (s *soakRun) converge(what string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		results, dead := s.outcomes()
		missing := 0
		for _, id := range s.taken {
			if len(results[id]) == 0 && dead[id].Reason == "" {
				missing++
			}
		}
		wrong := s.wrongTerminals()
		text := scrapeAddr(s.t, s.metricsAddr)
		inSync, _ := seriesValue(text, "faceagent_terminals_in_sync")
		queued := sumSeries(text, "faceagent_queue_depth")
		// A protocol 1 terminal cannot say what it holds: the agent never counts it in sync.
		if missing == 0 && len(wrong) == 0 && inSync == float64(len(s.devs)-len(s.v1)) && queued == 0 {
			s.t.Logf("%v: converged: %s (%d tasks)", s.since(), what, len(s.taken))
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: not converged within %v: %d of %d tasks without a result, %v of the %d v2 terminals in sync, %v queued; %s\n%s",
				what, timeout, missing, len(s.taken), inSync, len(s.devs)-len(s.v1), queued, strings.Join(wrong, "; "),
				grepLines(text, "faceagent_terminal_in_sync{"))
		}
		<-tick.C
	}
}

// quiet waits, within 60 s, until the agent has given its free memory back (it does so 5 s
// after its last garbage collection, internal/memtrim), that is until its RSS has not
// fallen by more than 64 kB for 8 s, and returns a sample then.
func (s *soakRun) quiet(phase string) soakSample {
	deadline := time.Now().Add(60 * time.Second)
	low, since := procRSSKB(s.t, s.child.Pid()), time.Now()
	for time.Since(since) < 8*time.Second && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond) // polling a size nothing announces
		if rss := procRSSKB(s.t, s.child.Pid()); rss < low-64 {
			low, since = rss, time.Now()
		}
	}
	return s.sample(phase)
}

// settle waits, within 30 s, until the agent's goroutines and descriptors are back within
// their slack of the idle baseline (at the baseline itself: until they stop falling for 2 s).
func (s *soakRun) settle() {
	deadline := time.Now().Add(30 * time.Second)
	last, steady := sampleAgent(s.t, s.child.Pid(), s.metricsAddr, s.dataDir), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond) // polling a count nothing announces
		x := sampleAgent(s.t, s.child.Pid(), s.metricsAddr, s.dataDir)
		if s.base.pid == x.pid {
			if x.goroutines <= s.base.goroutines+soakGoroutineSlack && x.fds <= s.base.fds+soakFDSlack {
				return
			}
			continue
		}
		if x.goroutines < last.goroutines || x.fds < last.fds {
			steady = time.Now()
		}
		last = x
		if time.Since(steady) >= 2*time.Second {
			return
		}
	}
}
