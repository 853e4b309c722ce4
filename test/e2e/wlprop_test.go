package e2e

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
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

// propSeed replays TestWhitelistSyncProperty with one seed (also FACEAGENT_WLPROP_SEED):
//
//	go test -race -run TestWhitelistSyncProperty ./test/e2e -args -wlprop.seed=12345
var propSeed = flag.Uint64("wlprop.seed", 0, "run TestWhitelistSyncProperty with this seed alone")

// Sizes of the property test: a few seeds in `make test`, many and longer under
// FACEAGENT_SOAK=1 (`make soak`).
const (
	propSeedsShort, propStepsShort = 2, 14
	propSeedsSoak, propStepsSoak   = 20, 40
	propTerminals                  = 3
	propPersons                    = 12 // person ids the tasks draw from: changes and deletes of held persons are common
	propBatch                      = 8  // the batch the batching terminals announce
)

// propFaceSizes are the sizes of the faces persons carry: a few, so that persons and
// terminals share them and the gateway's sweep has faces to keep and to remove; the larger
// ones take more than one PutFace (chunk_mqtt is 1 KiB in the run).
var propFaceSizes = [...]int{200, 900, 1800, 3000}

// propBatching says which terminals announce batches (AddPersons of up to propBatch
// persons); the others take persons one AddPerson at a time.
func propBatching(dev string) bool { return dev != "t2" }

// The whole daemon against a model, with replayable seeds: random tasks (AddPerson and
// DeletePerson, alone or in arrays, some delivered twice, and SetWhitelist replacing a
// terminal's whole list; persons with or without one of a few shared faces, a face's data
// left out now and then when the gateway holds it) to random terminals (two announcing
// batches, so that persons go in AddPersons and corrections are batched, one not), random
// terminal faults (factory reset, replacement, a person added, deleted or its rev changed
// by hand, a DeletePerson refused) and random agent restarts (SIGTERM or SIGKILL of the
// agent's process). At the end every terminal holds exactly the desired list the taken
// tasks make — computed here from the tasks, not read from the agent — with the agent's
// revs and each person's face byte for byte, the gateway's data_dir/faces holds exactly
// the faces those lists refer to once its sweep ran, every taken task has its result (a
// SetWhitelist's succeeded, with the counts the model computed against the list it
// replaced, or superseded by a later one), and the agent counts every terminal in sync. A
// failure names the seed and the steps; -wlprop.seed replays it.
func TestWhitelistSyncProperty(t *testing.T) {
	seeds, steps := propSeedsShort, propStepsShort
	if os.Getenv("FACEAGENT_SOAK") != "" {
		seeds, steps = propSeedsSoak, propStepsSoak
	}
	var list []uint64
	if s, _ := strconv.ParseUint(os.Getenv("FACEAGENT_WLPROP_SEED"), 10, 64); s != 0 {
		list = []uint64{s}
	}
	if *propSeed != 0 {
		list = []uint64{*propSeed}
	}
	for i := 0; len(list) < seeds && i < seeds; i++ {
		list = append(list, uint64(time.Now().UnixNano())+uint64(i)*7919)
	}
	for _, seed := range list {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			p := newPropRun(t, seed)
			defer func() {
				if t.Failed() {
					t.Logf("replay: go test -race -run 'TestWhitelistSyncProperty' ./test/e2e -args -wlprop.seed=%d\nsteps:\n  %s",
						seed, strings.Join(p.trace, "\n  "))
				}
			}()
			for i := 0; i < steps && !t.Failed(); i++ {
				p.step()
			}
			if !t.Failed() {
				p.converge()
			}
		})
	}
}

// propOp is one kind of step, drawn by weight.
type propOp struct {
	name   string
	weight int
	run    func(p *propRun)
}

var propOps = []propOp{
	{"add", 30, func(p *propRun) { p.publish(p.task(face.AddPerson)) }},
	{"delete", 12, func(p *propRun) { p.publish(p.task(face.DeletePerson)) }},
	{"array", 8, func(p *propRun) {
		n := 2 + p.r.IntN(3)
		ts := make([]wire.Task, n)
		dev := p.dev()
		for i := range ts {
			op := face.AddPerson
			if p.r.IntN(3) == 0 {
				op = face.DeletePerson
			}
			ts[i] = p.taskFor(dev, op)
		}
		p.publish(ts...)
	}},
	{"set-whitelist", 6, func(p *propRun) { p.publish(p.setWhitelistFor(p.dev())) }},
	{"redeliver", 6, func(p *propRun) {
		if len(p.lastMsg) > 0 {
			p.note("  the same message again")
			p.bo.publish("faceagent/gw-p/tasks", p.lastMsg) // a known messageId: no change
		}
	}},
	{"factory-reset", 5, func(p *propRun) { p.term(p.dev()).FactoryReset() }},
	{"replace", 3, func(p *propRun) { p.term(p.dev()).Replace("") }},
	{"tamper-extra", 4, func(p *propRun) {
		p.extra++
		rev := fmt.Sprintf("%016x", p.r.Uint64())
		if err := p.term(p.dev()).TamperAdd(face.Person{ID: fmt.Sprint("x", p.extra), Name: "by hand", Rev: rev}); err != nil {
			p.t.Fatal(err)
		}
	}},
	{"tamper-missing", 4, func(p *propRun) {
		term := p.term(p.dev())
		if held := term.Persons(); len(held) > 0 {
			term.TamperDelete(held[p.r.IntN(len(held))].ID)
		}
	}},
	{"tamper-rev", 4, func(p *propRun) {
		term := p.term(p.dev())
		if held := term.Persons(); len(held) > 0 {
			_, _ = term.TamperRev(held[p.r.IntN(len(held))].ID, fmt.Sprintf("%016x", p.r.Uint64()))
		}
	}},
	{"refused-delete", 4, func(p *propRun) {
		// The terminal refuses the next DeletePerson of a desired person, whoever sends
		// it: the task fails (or a reconciliation's delete does, and is retried), and the
		// person, not desired any more, is deleted by a reconciliation.
		dev := p.dev()
		var ids []string
		for id := range p.model[dev] {
			ids = append(ids, id)
		}
		if len(ids) == 0 {
			return
		}
		slices.Sort(ids)
		id := ids[p.r.IntN(len(ids))]
		p.term(dev).RefuseNext(face.DeletePerson, id)
		t := wire.Task{TaskID: p.nextTaskID(), DeviceID: dev, Op: face.DeletePerson, Person: face.Person{ID: id}}
		p.publish(t)
	}},
	{"restart", 4, func(p *propRun) { p.restart(false) }},
	{"sigkill", 4, func(p *propRun) { p.restart(true) }},
}

// propRun is one seed's run: the agent in a child process on a fixed broker and metrics
// address, simulated protocol 2 terminals (two fleets: batching and not), a back office
// with a kept session, the model.
type propRun struct {
	t                 *testing.T
	r                 *rand.Rand
	cfgPath, dataDir  string
	addr, metricsAddr string
	devs              []string
	fleets            []*sim.Fleet
	taskModel
	child     *testutil.Child
	bo        *backOffice
	named     map[string]bool // the terminals a taken task named: managed, judged in sync
	taken     []string        // the taken tasks' ids
	results   map[string]wire.Result
	setCounts map[string]wire.WhitelistCounts // SetWhitelist task id → its counts against the model
	lastMsg   []byte
	extra     int
	trace     []string
}

func newPropRun(t *testing.T, seed uint64) *propRun {
	p := &propRun{t: t, r: rand.New(rand.NewPCG(seed, seed^0x5eed)), addr: freeLoopbackAddr(t), metricsAddr: freeLoopbackAddr(t),
		named: map[string]bool{}, results: map[string]wire.Result{},
		setCounts: map[string]wire.WhitelistCounts{}, dataDir: t.TempDir()}
	for i := range propTerminals {
		p.devs = append(p.devs, fmt.Sprint("t", i))
	}
	p.taskModel = newTaskModel(p.r, seed, p.devs, propPersons, propFaceSizes[:], propFaceWeights[:])
	src := syncConfig{gateway: "gw-p", dataDir: p.dataDir, listen: p.addr, metrics: p.metricsAddr, whitelist: []string{"list_limit = 5"}}.String()
	src += "[faces]\nchunk_mqtt = \"1KiB\"\n"
	var batching, single []string
	for _, dev := range p.devs {
		src += fmt.Sprintf("[[devices]]\nid = %q\n", dev)
		if propBatching(dev) {
			batching = append(batching, dev)
		} else {
			single = append(single, dev)
		}
	}
	p.cfgPath = filepath.Join(t.TempDir(), "agent.toml")
	if err := os.WriteFile(p.cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()
	for i, fleetDevs := range [][]string{batching, single} {
		batch := 0
		if i == 0 {
			batch = propBatch
		}
		fleet, err := sim.StartMQTT("mqtt://"+p.addr, fleetDevs, sim.Options{Seed: seed + uint64(i), Batch: batch,
			AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond}, HeartbeatInterval: 100 * time.Millisecond, Strict: true,
			OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fleet.Close() })
		p.fleets = append(p.fleets, fleet)
	}
	p.bo = connectBackOfficeSession(t, p.addr, "gw-p", 3600)
	// Every terminal managed from the start: an empty SetWhitelist gives each a desired
	// list, which the model says it holds (a terminal no task named keeps what it holds,
	// persons added by hand included, and is not judged in sync).
	for _, dev := range p.devs {
		p.publish(wire.Task{TaskID: p.nextTaskID(), DeviceID: dev, Op: wire.SetWhitelist, Persons: []face.Person{}})
	}
	return p
}

// start runs the agent in a new child and waits until it is ready.
func (p *propRun) start() {
	p.child = testutil.StartChild(p.t, syncKillChildEnv+"="+p.cfgPath)
	p.child.WaitLine("ready", 30*time.Second)
}

// restart stops the agent (SIGKILL or SIGTERM) between two steps, starts it again and
// reconnects the back office to its kept session.
func (p *propRun) restart(kill bool) {
	if kill {
		p.child.Kill()
	} else {
		p.child.Stop(30 * time.Second)
	}
	p.collect()
	p.start()
	p.bo = connectBackOfficeAs(p.t, p.addr, "gw-p", "backoffice", false, 3600)
}

// collect takes the results the back office got so far.
func (p *propRun) collect() {
	p.bo.mu.Lock()
	defer p.bo.mu.Unlock()
	for id, r := range p.bo.results {
		p.results[id] = r
	}
}

func (p *propRun) note(s string) { p.trace = append(p.trace, s) }

func (p *propRun) step() {
	total := 0
	for _, o := range propOps {
		total += o.weight
	}
	n := p.r.IntN(total)
	for _, o := range propOps {
		if n -= o.weight; n < 0 {
			p.note(o.name)
			o.run(p)
			return
		}
	}
}

func (p *propRun) dev() string { return p.devs[p.r.IntN(len(p.devs))] }

// term is dev's simulated terminal, in whichever fleet it is.
func (p *propRun) term(dev string) *sim.Terminal { return fleetTerminal(p.t, p.fleets, dev) }

// propFaceWeights are the odds of each face of the pool in a draw, then of none: the
// first faces are common, the last rare, so that the rare ones are often referred to for a
// while and then by no desired person, and the gateway's sweep removes them.
var propFaceWeights = [len(propFaceSizes) + 1]int{6, 3, 2, 1, 6}

func (p *propRun) task(op face.Op) wire.Task { return p.taskFor(p.dev(), op) }

// publish sends ts as one message (an array when more than one) and waits for its
// PUBACK: from then on the tasks are taken, and the model applies them in order. A face
// the gateway holds when the message is sent (a desired person refers to it) goes
// without its data half the time; any other face goes with it.
func (p *propRun) publish(ts ...wire.Task) {
	b, notes := p.messageJSON(ts)
	p.trace = append(p.trace, notes...)
	p.bo.publish("faceagent/gw-p/tasks", b)
	p.lastMsg = b
	for _, t := range ts {
		p.taken = append(p.taken, t.TaskID)
		p.named[t.DeviceID] = true
		if c := p.apply(t); t.Op == wire.SetWhitelist {
			p.setCounts[t.TaskID] = c
		}
	}
}

// wantFaceFiles are the files data_dir/faces must hold in the end: "<sha256>.<size>" of
// each face a desired person refers to, sorted.
func (p *propRun) wantFaceFiles() []string {
	var want []string
	for sum := range p.heldFaces() {
		for _, f := range p.faces {
			if f.sum == sum {
				want = append(want, fmt.Sprintf("%s.%d", sum, len(f.data)))
			}
		}
	}
	slices.Sort(want)
	return want
}

// converge waits until every terminal holds its expected list with each face byte for
// byte, every taken task has its result and the agent counts in sync every terminal a task
// named, within 90 s (one no task named has no desired list: the agent leaves it
// unmanaged, never in sync); then until data_dir/faces holds exactly the faces the desired
// lists refer to, within 30 s (a sweep runs a second after the desired lists change).
func (p *propRun) converge() {
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		p.collect()
		var wrong []string
		for _, dev := range p.devs {
			if got, want := heldWithRevs(p.term(dev)), wantWithRevs(p.model[dev]); !slices.Equal(got, want) {
				wrong = append(wrong, fmt.Sprintf("%s holds %d, want %d: %v", dev, len(got), len(want), diffLines(got, want)))
			}
			wrong = append(wrong, p.wrongFaces(dev, p.term(dev))...)
		}
		missing := 0
		for _, id := range p.taken {
			if _, ok := p.results[id]; !ok {
				missing++
			}
		}
		text := scrapeAddr(p.t, p.metricsAddr)
		inSync, _ := seriesValue(text, "faceagent_terminals_in_sync")
		if len(wrong) == 0 && missing == 0 && inSync == float64(len(p.named)) {
			for _, f := range p.fleets {
				if err := f.Violations(); err != nil {
					p.t.Error(err)
				}
			}
			p.checkSetResults()
			break
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("not converged within 90 s: %d taken tasks without a result, %v of the %d terminals tasks named in sync; %s\n%s\n%s\n%s",
				missing, inSync, len(p.named), strings.Join(wrong, "; "), grepLines(text, "faceagent_terminal_in_sync{"),
				grepLines(text, "faceagent_desired_persons{"), grepLines(text, "faceagent_queue_depth{"))
		}
		<-tick.C
	}
	want := p.wantFaceFiles()
	deadline = time.Now().Add(30 * time.Second)
	for {
		got := faceFiles(p.t, p.dataDir)
		slices.Sort(got)
		if slices.Equal(got, want) {
			var st []string
			for _, dev := range p.devs {
				s := p.term(dev).Stats()
				st = append(st, fmt.Sprintf("%s %d AddPersons, %d PutFace", dev, s.Batches, s.FaceChunks))
			}
			p.t.Logf("converged: %s; %d of the %d faces brought left on the gateway", strings.Join(st, ", "), len(want), len(p.brought))
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("data_dir/faces holds %v after 30 s, want %v", diffLines(got, want), want)
		}
		<-tick.C
	}
}

// checkSetResults checks each SetWhitelist's result: succeeded with the counts the model
// computed when it was taken, or superseded by a later SetWhitelist for its terminal.
func (p *propRun) checkSetResults() {
	for id, want := range p.setCounts {
		r := p.results[id]
		switch r.Status {
		case wire.Superseded:
		case wire.Succeeded:
			if r.WhitelistCounts == nil || *r.WhitelistCounts != want {
				p.t.Errorf("SetWhitelist %s: counts %+v, want %+v", id, r.WhitelistCounts, want)
			}
		default:
			p.t.Errorf("SetWhitelist %s: result %+v, want succeeded or superseded", id, r)
		}
	}
}

// scrapeAddr returns what the /metrics at addr serves.
func scrapeAddr(t testing.TB, addr string) string {
	t.Helper()
	resp, err := scrapeClient.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return sb.String()
}
