package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// SIGKILL of the agent while a SetWhitelist's corrections are in progress: a protocol 2
// and a protocol 1 terminal of 300 persons each get a SetWhitelist that deletes 100,
// renames 50, keeps 150 and adds 100; once each got 40 corrective commands the agent (a
// child process) is SIGKILLed, and an agent restarted on its data_dir finishes. Each
// terminal ends holding exactly the new list (ids, names, and revs on v2); each
// SetWhitelist has one result by messageId across the restart (copies a QoS 1
// redelivery may bring must be identical), succeeded, with the counts against the list
// before it; the sync reports of reason setWhitelist start with started and end with
// done, none failed; never two commands in flight.
func TestSetWhitelistSurvivesSIGKILL(t *testing.T) { testSetWhitelistKill(t, true) }

// SIGKILL right after the SetWhitelist was acknowledged, before any correction was sent:
// each terminal has a task's AddPerson in flight (its ack held back), so the SetWhitelist
// waits behind it; the agent is killed as soon as the back office has its PUBACK. The
// restarted agent sends the in-flight command again, then converges as above.
func TestSetWhitelistSIGKILLBeforeCorrections(t *testing.T) { testSetWhitelistKill(t, false) }

func testSetWhitelistKill(t *testing.T, midRepair bool) {
	dir, addr := t.TempDir(), freeLoopbackAddr(t)
	const gw = "gw-sk"
	src := syncConfig{gateway: gw, dataDir: dir, listen: addr, whitelist: []string{"list_limit = 16"}, devices: []string{"v2", "v1"}}.String()
	cfgPath := filepath.Join(t.TempDir(), "agent.toml")
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	ids := []string{"v2", "v1"}
	log := newCommandLog()
	fast := sim.Latency{Kind: sim.Fixed, A: 2 * time.Millisecond}
	fleet, err := sim.StartMQTT("mqtt://"+addr, ids, sim.Options{Seed: 21, AckLatency: fast,
		HeartbeatInterval: 100 * time.Millisecond, Strict: true, OnCommand: log.add,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	if err := fleet.Terminal("v1").SetProtocol(1); err != nil {
		t.Fatal(err)
	}

	// Phase 1, an agent in this process: 300 persons on each terminal by tasks.
	_, a, stop := startAgentFull(t, parse(t, src))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	bo := connectBackOfficeSession(t, addr, gw, 3600)
	const n = 300
	before := map[string]map[string]string{} // device → person id → name: the desired list
	var tasks []wire.Task
	for _, dev := range ids {
		before[dev] = map[string]string{}
		for i := range n {
			p := syncPerson(i)
			before[dev][p.ID] = p.Name
			tasks = append(tasks, wire.Task{TaskID: fmt.Sprintf("%s-add-%d", dev, i), DeviceID: dev, Op: face.AddPerson, Person: p})
		}
	}
	b, _ := json.Marshal(tasks)
	bo.publish("faceagent/"+gw+"/tasks", b)
	bo.waitFor("every add's result", 60*time.Second, func() bool { return len(bo.results) == len(tasks) })
	pollUntil(t, "v2 in sync", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 1 })
	stop()
	bo.mu.Lock()
	all := slices.Clone(bo.all)
	bo.mu.Unlock()

	// The new list: p0..p99 gone, p100..p149 renamed, p150..p299 kept, p300..p399 new.
	var after []face.Person
	for i := 100; i < 400; i++ {
		p := syncPerson(i)
		if i < 150 {
			p.Name = fmt.Sprintf("renamed %d", i)
		}
		after = append(after, p)
	}

	// Phase 2, the agent in a child, killed during the SetWhitelist.
	child := testutil.StartChild(t, syncKillChildEnv+"="+cfgPath)
	child.WaitLine("ready", 30*time.Second)
	pub := connectBackOfficeAs(t, addr, gw, gw+"-pub", true, 0)
	marks := map[string]int{}
	for _, dev := range ids {
		marks[dev] = log.len(dev)
	}
	var inflight []wire.Task
	if !midRepair {
		// A task's command in flight on each terminal, its ack held back (longer than the
		// publish and the kill take on a loaded machine): the SetWhitelist
		// waits behind it, so nothing of it can be sent before the kill.
		for _, dev := range ids {
			fleet.Terminal(dev).SetAckLatency(sim.Latency{Kind: sim.Fixed, A: 15 * time.Second})
			p := face.Person{ID: "p120", Name: "in flight"}
			inflight = append(inflight, wire.Task{TaskID: dev + "-inflight", DeviceID: dev, Op: face.AddPerson, Person: p})
			before[dev][p.ID] = p.Name // taken before the SetWhitelist: its counts see it
		}
		b, _ = json.Marshal(inflight)
		pub.publish("faceagent/"+gw+"/tasks", b)
		waitFor(t, "the tasks' commands at both terminals", func() bool {
			return log.len("v2") > marks["v2"] && log.len("v1") > marks["v1"]
		}, log.wake)
	}
	var sets []wire.Task
	for _, dev := range ids {
		sets = append(sets, wire.Task{TaskID: dev + "-set", DeviceID: dev, Op: wire.SetWhitelist, Persons: after})
	}
	b, _ = json.Marshal(sets)
	pub.publish("faceagent/"+gw+"/tasks", b) // returns at the PUBACK: the tasks are journalled
	if midRepair {
		waitFor(t, "40 corrections on each terminal", func() bool {
			return log.corrections("v2", marks["v2"]) >= 40 && log.corrections("v1", marks["v1"]) >= 40
		}, log.wake)
	}
	child.Kill()
	for _, dev := range ids {
		if got := log.corrections(dev, marks[dev]); !midRepair && (got != 0 || log.len(dev) != marks[dev]+1) {
			log.mu.Lock()
			t.Fatalf("%s got %d corrections before the kill, want none but the task's command: %+v", dev, got, log.cmds[dev][marks[dev]:])
		}
		if slices.Equal(heldNames(fleet.Terminal(dev), dev == "v2"), wantNames(after, dev == "v2")) {
			t.Fatalf("%s holds the new list at the kill: nothing left to do", dev)
		}
	}
	for _, dev := range ids {
		fleet.Terminal(dev).SetAckLatency(fast)
	}

	// Phase 3, restarted on the same data_dir: the SetWhitelists finish.
	_, a, _ = startAgentFull(t, parse(t, src))
	bo = connectBackOfficeAs(t, addr, gw, "backoffice", false, 3600)
	bo.waitFor("both SetWhitelist results", 90*time.Second, func() bool {
		for _, tk := range append(slices.Clone(sets), inflight...) {
			if _, ok := bo.results[tk.TaskID]; !ok {
				return false
			}
		}
		return true
	})
	pollUntil(t, "v2 in sync after the restart", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 1 })
	bo.waitFor("a done setWhitelist report of each terminal", 30*time.Second, func() bool {
		for _, dev := range ids {
			s := bo.syncs[dev]
			if len(s) == 0 || s[len(s)-1].Status != wire.SyncDone {
				return false
			}
		}
		return true
	})
	bo.mu.Lock()
	all = append(all, bo.all...)
	syncs := map[string][]wire.SyncReport{}
	for _, dev := range ids {
		syncs[dev] = slices.Clone(bo.syncs[dev])
	}
	bo.mu.Unlock()

	// One result per messageId: copies (QoS 1 is at least once) must be identical.
	byMsg := map[string][]wire.Result{}
	for _, r := range all {
		byMsg[r.MessageID] = append(byMsg[r.MessageID], r)
	}
	copies := 0
	for id, rs := range byMsg {
		for _, r := range rs[1:] {
			copies++
			if resultLine(r) != resultLine(rs[0]) {
				t.Errorf("message %s: two different results: %s and %s", id, resultLine(rs[0]), resultLine(r))
			}
		}
	}
	if copies > 0 {
		t.Logf("%d results arrived twice (identical copies, QoS 1 redelivery)", copies)
	}
	for _, tk := range inflight {
		if r := resultOf(all, tk.TaskID); len(r) != 1 || r[0].Status != wire.Succeeded {
			t.Errorf("task %s: results %v", tk.TaskID, r)
		}
	}
	for _, tk := range sets {
		old := before[tk.DeviceID]
		var want wire.WhitelistCounts
		listed := map[string]bool{}
		for _, p := range after {
			listed[p.ID] = true
			if name, ok := old[p.ID]; ok && name == p.Name {
				want.Unchanged++
			} else {
				want.Added++
			}
		}
		for id := range old {
			if !listed[id] {
				want.Deleted++
			}
		}
		rs := resultOf(all, tk.TaskID)
		if len(rs) != 1 || rs[0].Status != wire.Succeeded || rs[0].WhitelistCounts == nil || *rs[0].WhitelistCounts != want {
			t.Errorf("%s: results %v, want one, succeeded, with %+v", tk.TaskID, resultLines(rs), want)
		}
	}
	for _, dev := range ids {
		if got, want := heldNames(fleet.Terminal(dev), dev == "v2"), wantNames(after, dev == "v2"); !slices.Equal(got, want) {
			t.Errorf("%s holds %d persons, want %d: %v", dev, len(got), len(want), diffLines(got, want))
		}
		var set []string
		for _, r := range syncs[dev] {
			if r.Status == wire.SyncFailed {
				t.Errorf("%s: a failed sync report: %+v", dev, r)
			}
			if r.Reason == wire.SyncSetWhitelist {
				set = append(set, string(r.Status))
			}
		}
		if len(set) < 2 || set[0] != "started" || set[len(set)-1] != "done" {
			t.Errorf("%s: setWhitelist sync reports %v, want started … done", dev, set)
		}
		t.Logf("%s: setWhitelist sync reports %v", dev, set)
	}
	if err := fleet.Violations(); err != nil {
		t.Error(err)
	}
}

// heldNames is what term holds as "id name rev" lines (rev only when withRev), sorted;
// nil for an empty terminal.
func heldNames(term *sim.Terminal, withRev bool) []string {
	var got []string
	for _, p := range term.Persons() {
		line := p.ID + " " + p.Name
		if withRev {
			line += " " + p.Rev
		}
		got = append(got, line)
	}
	slices.Sort(got)
	return got
}

// wantNames is heldNames of a terminal holding exactly persons, revs the agent's.
func wantNames(persons []face.Person, withRev bool) []string {
	var want []string
	for _, p := range persons {
		line := p.ID + " " + p.Name
		if withRev {
			line += " " + face.RecordRev(p.ID, p.Name, p.ValidFrom, p.ValidTo, "").String()
		}
		want = append(want, line)
	}
	slices.Sort(want)
	return want
}

// resultOf returns the distinct results (by messageId) of taskID in all.
func resultOf(all []wire.Result, taskID string) []wire.Result {
	var out []wire.Result
	seen := map[string]bool{}
	for _, r := range all {
		if r.TaskID == taskID && !seen[r.MessageID] {
			seen[r.MessageID] = true
			out = append(out, r)
		}
	}
	return out
}

// resultLine is a result, every field, as one comparable line.
func resultLine(r wire.Result) string {
	line := fmt.Sprintf("%s %s %s %s tries %d %q %dms", r.TaskID, r.DeviceID, r.MessageID, r.Status, r.Tries, r.Error, r.DurationMs)
	if c := r.WhitelistCounts; c != nil {
		line += fmt.Sprintf(" added %d deleted %d unchanged %d", c.Added, c.Deleted, c.Unchanged)
	}
	return line
}

func resultLines(rs []wire.Result) string {
	var out []string
	for _, r := range rs {
		out = append(out, resultLine(r))
	}
	return strings.Join(out, "; ")
}
