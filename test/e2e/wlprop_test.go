package e2e

import (
	"encoding/json"
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
)

// The whole daemon against a model, with replayable seeds: random tasks (AddPerson and
// DeletePerson, alone or in arrays, some delivered twice, and SetWhitelist replacing a
// terminal's whole list) to random terminals, random
// terminal faults (factory reset, replacement, a person added, deleted or its rev changed
// by hand, a DeletePerson refused) and random agent restarts (SIGTERM or SIGKILL of the
// agent's process). At the end every terminal holds exactly the desired list the taken
// tasks make — computed here from the tasks, not read from the agent — with the agent's
// revs, every taken task has its result (a SetWhitelist's succeeded, with the counts the
// model computed against the list it replaced, or superseded by a later one), and the
// agent counts every terminal in sync. A
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
	{"set-whitelist", 6, func(p *propRun) {
		// A list over the shared pool: of each id, kept as the model has it, renamed, or
		// left out, so that the task adds, changes, keeps and deletes.
		dev := p.dev()
		persons := []face.Person{}
		for i := range propPersons {
			id := fmt.Sprint("p", i)
			name, held := p.model[dev][id]
			switch k := p.r.IntN(3); {
			case k == 0:
				continue
			case k == 1 && held:
			default:
				p.name++
				name = fmt.Sprint("name ", p.name)
			}
			persons = append(persons, face.Person{ID: id, Name: name})
		}
		p.publish(wire.Task{TaskID: p.nextTaskID(), DeviceID: dev, Op: wire.SetWhitelist, Persons: persons})
	}},
	{"redeliver", 6, func(p *propRun) {
		if len(p.lastMsg) > 0 {
			p.note("  the same message again")
			p.bo.publish("faceagent/gw-p/tasks", p.lastMsg) // a known messageId: no change
		}
	}},
	{"factory-reset", 5, func(p *propRun) { p.fleet.Terminal(p.dev()).FactoryReset() }},
	{"replace", 3, func(p *propRun) { p.fleet.Terminal(p.dev()).Replace("") }},
	{"tamper-extra", 4, func(p *propRun) {
		p.extra++
		rev := fmt.Sprintf("%016x", p.r.Uint64())
		if err := p.fleet.Terminal(p.dev()).TamperAdd(face.Person{ID: fmt.Sprint("x", p.extra), Name: "by hand", Rev: rev}); err != nil {
			p.t.Fatal(err)
		}
	}},
	{"tamper-missing", 4, func(p *propRun) {
		term := p.fleet.Terminal(p.dev())
		if held := term.Persons(); len(held) > 0 {
			term.TamperDelete(held[p.r.IntN(len(held))].ID)
		}
	}},
	{"tamper-rev", 4, func(p *propRun) {
		term := p.fleet.Terminal(p.dev())
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
		p.fleet.Terminal(dev).RefuseNext(face.DeletePerson, id)
		t := wire.Task{TaskID: p.nextTaskID(), DeviceID: dev, Op: face.DeletePerson, Person: face.Person{ID: id}}
		p.publish(t)
	}},
	{"restart", 4, func(p *propRun) { p.restart(false) }},
	{"sigkill", 4, func(p *propRun) { p.restart(true) }},
}

// propRun is one seed's run: the agent in a child process on a fixed broker and metrics
// address, simulated protocol 2 terminals, a back office with a kept session, the model.
type propRun struct {
	t                  *testing.T
	r                  *rand.Rand
	cfgPath            string
	addr, metricsAddr  string
	devs               []string
	fleet              *sim.Fleet
	child              *testutil.Child
	bo                 *backOffice
	model              map[string]map[string]string // device → person id → name: what the taken tasks desire
	named              map[string]bool              // the terminals a taken task named: managed, judged in sync
	taken              []string                     // the taken tasks' ids
	results            map[string]wire.Result
	setCounts          map[string]wire.WhitelistCounts // SetWhitelist task id → its counts against the model
	lastMsg            []byte
	tasks, extra, name int
	trace              []string
}

func newPropRun(t *testing.T, seed uint64) *propRun {
	p := &propRun{t: t, r: rand.New(rand.NewPCG(seed, seed^0x5eed)), addr: freeLoopbackAddr(t), metricsAddr: freeLoopbackAddr(t),
		model: map[string]map[string]string{}, named: map[string]bool{}, results: map[string]wire.Result{},
		setCounts: map[string]wire.WhitelistCounts{}}
	src := syncConfig{gateway: "gw-p", dataDir: t.TempDir(), listen: p.addr, metrics: p.metricsAddr, whitelist: []string{"list_limit = 5"}}.String()
	for i := range propTerminals {
		dev := fmt.Sprint("t", i)
		p.devs = append(p.devs, dev)
		p.model[dev] = map[string]string{}
		src += fmt.Sprintf("[[devices]]\nid = %q\n", dev)
	}
	p.cfgPath = filepath.Join(t.TempDir(), "agent.toml")
	if err := os.WriteFile(p.cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()
	fleet, err := sim.StartMQTT("mqtt://"+p.addr, p.devs, sim.Options{Seed: seed, AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond},
		HeartbeatInterval: 100 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	p.fleet = fleet
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

func (p *propRun) nextTaskID() string {
	p.tasks++
	return fmt.Sprint("task-", p.tasks)
}

func (p *propRun) task(op face.Op) wire.Task { return p.taskFor(p.dev(), op) }

// taskFor draws a task of op for dev over the shared pool of person ids.
func (p *propRun) taskFor(dev string, op face.Op) wire.Task {
	person := face.Person{ID: fmt.Sprint("p", p.r.IntN(propPersons))}
	if op == face.AddPerson {
		p.name++
		person.Name = fmt.Sprint("name ", p.name)
	}
	return wire.Task{TaskID: p.nextTaskID(), DeviceID: dev, Op: op, Person: person}
}

// publish sends ts as one message (an array when more than one) and waits for its
// PUBACK: from then on the tasks are taken, and the model applies them in order.
func (p *propRun) publish(ts ...wire.Task) {
	var b []byte
	if len(ts) == 1 {
		b, _ = json.Marshal(ts[0])
	} else {
		b, _ = json.Marshal(ts)
	}
	for _, t := range ts {
		if t.Op == wire.SetWhitelist {
			var list []string
			for _, q := range t.Persons {
				list = append(list, fmt.Sprintf("%s=%q", q.ID, q.Name))
			}
			p.note(fmt.Sprintf("  %s %s %s [%s]", t.TaskID, t.DeviceID, t.Op, strings.Join(list, " ")))
			continue
		}
		p.note(fmt.Sprintf("  %s %s %s %s %q", t.TaskID, t.DeviceID, t.Op, t.Person.ID, t.Person.Name))
	}
	p.bo.publish("faceagent/gw-p/tasks", b)
	p.lastMsg = b
	for _, t := range ts {
		p.taken = append(p.taken, t.TaskID)
		p.named[t.DeviceID] = true
		switch t.Op {
		case face.AddPerson:
			p.model[t.DeviceID][t.Person.ID] = t.Person.Name
		case face.DeletePerson:
			delete(p.model[t.DeviceID], t.Person.ID)
		case wire.SetWhitelist:
			old, list := p.model[t.DeviceID], map[string]string{}
			var c wire.WhitelistCounts
			for _, q := range t.Persons {
				list[q.ID] = q.Name
				if name, ok := old[q.ID]; ok && name == q.Name {
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
			p.setCounts[t.TaskID] = c
			p.model[t.DeviceID] = list
		}
	}
}

// expected is what dev must hold: "id name rev" lines in id order.
func (p *propRun) expected(dev string) []string {
	var want []string
	for id, name := range p.model[dev] {
		want = append(want, id+" "+name+" "+face.RecordRev(id, name, "", "", "").String())
	}
	slices.Sort(want)
	return want
}

func propHeld(term *sim.Terminal) []string {
	var got []string
	for _, q := range term.Persons() {
		got = append(got, q.ID+" "+q.Name+" "+q.Rev)
	}
	return got // Persons is sorted by id
}

// converge waits until every terminal holds its expected list, every taken task has its
// result and the agent counts in sync every terminal a task named, within 90 s (one no
// task named has no desired list: the agent leaves it unmanaged, never in sync).
func (p *propRun) converge() {
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		p.collect()
		var wrong []string
		for _, dev := range p.devs {
			if got, want := propHeld(p.fleet.Terminal(dev)), p.expected(dev); !slices.Equal(got, want) {
				wrong = append(wrong, fmt.Sprintf("%s holds %d, want %d: %v", dev, len(got), len(want), diffLines(got, want)))
			}
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
			if err := p.fleet.Violations(); err != nil {
				p.t.Error(err)
			}
			p.checkSetResults()
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("not converged within 90 s: %d taken tasks without a result, %v of the %d terminals tasks named in sync; %s\n%s\n%s\n%s",
				missing, inSync, len(p.named), strings.Join(wrong, "; "), grepLines(text, "faceagent_terminal_in_sync{"),
				grepLines(text, "faceagent_desired_persons{"), grepLines(text, "faceagent_queue_depth{"))
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
