package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// syncKillChildEnv names the config file of a child agent that runs until SIGKILL.
const syncKillChildEnv = "FACEAGENT_SYNC_KILL_CONFIG"

// syncKillChild runs the agent of the config file at path, says "ready" once it is, and
// runs until SIGKILL, or until SIGTERM stops it cleanly (exit status 0).
func syncKillChild(path string) {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "sync kill child:", err); os.Exit(3) }
	cfg, err := config.Load(path, nil)
	if err != nil {
		fail(err)
	}
	a, err := agent.New(&agent.Options{Config: cfg})
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		fail(fmt.Errorf("not ready: %v", err))
	}
	fmt.Println("ready")
	if err := <-done; err != nil {
		fail(err)
	}
	os.Exit(0)
}

// leftFromKilled counts the distinct corrections dev received from index killed on that
// carry the message id prefix of the last correction before it (the killed agent's).
func leftFromKilled(l *commandLog, dev string, killed int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	cmds := l.cmds[dev]
	prefix := ""
	for _, c := range slices.Backward(cmds[:killed]) {
		if whitelist.OwnMessageID(c.MessageID) {
			prefix = c.MessageID[:strings.LastIndex(c.MessageID, "-")+1]
			break
		}
	}
	seen := map[string]bool{}
	for _, c := range cmds[killed:] {
		if prefix != "" && strings.HasPrefix(c.MessageID, prefix) {
			seen[c.MessageID] = true
		}
	}
	return len(seen)
}

// commandLog records, per terminal, the commands it was sent, in arrival order; wake is
// poked on each.
type commandLog struct {
	mu   sync.Mutex
	cmds map[string][]face.Command
	wake chan struct{}
}

func newCommandLog() *commandLog {
	return &commandLog{cmds: map[string][]face.Command{}, wake: make(chan struct{}, 1)}
}

func (l *commandLog) add(dev string, cmd face.Command) {
	l.mu.Lock()
	l.cmds[dev] = append(l.cmds[dev], cmd)
	l.mu.Unlock()
	poke(l.wake)
}

// corrections counts the reconciliation's commands dev received from the index from on.
func (l *commandLog) corrections(dev string, from int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.cmds[dev][min(from, len(l.cmds[dev])):] {
		if whitelist.OwnMessageID(c.MessageID) && c.Op != face.ListPersons {
			n++
		}
	}
	return n
}

func (l *commandLog) len(dev string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.cmds[dev])
}

// SIGKILL of the agent in the middle of whitelist repairs: a protocol 2 and a protocol 1
// terminal of 250 persons each are factory-reset while the agent runs in a child process;
// once each got 40 corrective commands (and tasks for two of its persons were
// acknowledged meanwhile) the child is SIGKILLed and an agent restarted on its data_dir
// finishes the job. Each terminal ends holding exactly its desired list (ids, names and,
// for v2, revs), computed here from the tasks; no command arrived while another was
// unanswered (strict terminals); a task's command is never followed by a correction that
// undoes it; every task succeeded; and each terminal's last sync report says done, with
// none failed. The kill hits a window of corrections (one in flight, more queued): the
// restarted agent sends those it finds in its journal.
func TestWhitelistSyncSurvivesSIGKILL(t *testing.T) {
	dir, addr := t.TempDir(), freeLoopbackAddr(t)
	src := syncConfig{gateway: "gw-k", dataDir: dir, listen: addr, whitelist: []string{"list_limit = 16"}, devices: []string{"v2", "v1"}}.String()
	cfgPath := filepath.Join(t.TempDir(), "agent.toml")
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	ids := []string{"v2", "v1"}
	log := newCommandLog()
	fleet, err := sim.StartMQTT("mqtt://"+addr, ids, sim.Options{Seed: 9, AckLatency: sim.Latency{Kind: sim.Fixed, A: 2 * time.Millisecond},
		HeartbeatInterval: 100 * time.Millisecond, Strict: true, OnCommand: log.add,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	if err := fleet.Terminal("v1").SetProtocol(1); err != nil {
		t.Fatal(err)
	}

	// Phase 1, an agent in this process: the whitelists by tasks, both terminals in sync.
	_, a, stop := startAgentFull(t, parse(t, src))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	bo := connectBackOfficeSession(t, addr, "gw-k", 3600)
	const n = 250
	desired := map[string]map[string]string{} // device → person id → name
	var tasks []wire.Task
	for _, dev := range ids {
		desired[dev] = map[string]string{}
		for i := range n {
			p := syncPerson(i)
			desired[dev][p.ID] = p.Name
			tasks = append(tasks, wire.Task{TaskID: fmt.Sprintf("%s-add-%d", dev, i), DeviceID: dev, Op: face.AddPerson, Person: p})
		}
	}
	b, _ := json.Marshal(tasks)
	bo.publish("faceagent/gw-k/tasks", b)
	bo.waitFor("every add's result", 60*time.Second, func() bool { return len(bo.results) == len(tasks) })
	// A v1 terminal is never counted in sync: it has no digest to compare.
	pollUntil(t, "v2 in sync", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 1 })
	stop()
	results := map[string]wire.Result{}
	var reports []wire.SyncReport
	collect := func(bo *backOffice) {
		bo.mu.Lock()
		defer bo.mu.Unlock()
		for id, r := range bo.results {
			results[id] = r
		}
		for _, dev := range ids {
			reports = append(reports, bo.syncs[dev]...)
		}
	}
	collect(bo)

	// Phase 2, the agent in a child: the terminals are reset and repaired until SIGKILL.
	child := testutil.StartChild(t, syncKillChildEnv+"="+cfgPath)
	child.WaitLine("ready", 30*time.Second)
	marks := map[string]int{}
	for _, dev := range ids {
		marks[dev] = log.len(dev)
		fleet.Terminal(dev).FactoryReset()
	}
	repairing := func(k int) func() bool {
		return func() bool {
			return log.corrections("v2", marks["v2"]) >= k && log.corrections("v1", marks["v1"]) >= k
		}
	}
	waitFor(t, "the first corrections", repairing(1), log.wake)
	// Tasks while the repairs run, acknowledged (journalled) before the kill: a person
	// deleted and one renamed on each terminal.
	boc := connectBackOfficeAs(t, addr, "gw-k", "gw-k-late", true, 0)
	var late []wire.Task
	for _, dev := range ids {
		late = append(late,
			wire.Task{TaskID: dev + "-late-del", DeviceID: dev, Op: face.DeletePerson, Person: face.Person{ID: "p10"}},
			wire.Task{TaskID: dev + "-late-ren", DeviceID: dev, Op: face.AddPerson, Person: face.Person{ID: "p200", Name: "renamed"}})
		delete(desired[dev], "p10")
		desired[dev]["p200"] = "renamed"
	}
	b, _ = json.Marshal(late)
	boc.publish("faceagent/gw-k/tasks", b)
	waitFor(t, "40 corrections on each terminal", repairing(40), log.wake)
	child.Kill()
	killed := map[string]int{}
	for _, dev := range ids {
		killed[dev] = log.len(dev)
	}
	for _, dev := range ids {
		if held := len(fleet.Terminal(dev).Persons()); held >= n-1 {
			t.Fatalf("%s holds %d persons at the kill: nothing left to repair", dev, held)
		}
	}

	// Phase 3, restarted on the same data_dir: the repairs finish.
	_, a, _ = startAgentFull(t, parse(t, src))
	bo = connectBackOfficeAs(t, addr, "gw-k", "backoffice", false, 3600)
	bo.waitFor("every late task's result and a done report of each terminal", 60*time.Second, func() bool {
		for _, tk := range late {
			if _, ok := bo.results[tk.TaskID]; !ok {
				return false
			}
		}
		for _, dev := range ids {
			s := bo.syncs[dev]
			if len(s) == 0 || s[len(s)-1].Status != wire.SyncDone {
				return false
			}
		}
		return true
	})
	pollUntil(t, "v2 in sync after the restart", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 1 })
	collect(bo)

	for _, tk := range append(tasks, late...) {
		if r := results[tk.TaskID]; r.Status != wire.Succeeded {
			t.Errorf("task %s: %+v", tk.TaskID, r)
		}
	}
	for _, dev := range ids {
		var got, want []string
		for _, p := range fleet.Terminal(dev).Persons() {
			got = append(got, p.ID+" "+p.Name+" "+p.Rev)
		}
		for id, name := range desired[dev] {
			rev := face.RecordRev(id, name, "", "", "").String()
			if dev == "v1" {
				rev = "" // a v1 terminal keeps no rev
			}
			want = append(want, id+" "+name+" "+rev)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s holds %d persons, want %d: %v", dev, len(got), len(want), diffLines(got, want))
		}
		// Order: once the terminal got a late task's command, no correction undid it.
		log.mu.Lock()
		var deleted, renamed bool
		for _, c := range log.cmds[dev][marks[dev]:] {
			switch {
			case !whitelist.OwnMessageID(c.MessageID) && c.Op == face.DeletePerson && c.Person.ID == "p10":
				deleted = true
			case !whitelist.OwnMessageID(c.MessageID) && c.Op == face.AddPerson && c.Person.ID == "p200":
				renamed = true
			case deleted && c.Op == face.AddPerson && c.Person.ID == "p10":
				t.Errorf("%s: %s added p10 again after the task deleted it", dev, c.MessageID)
			case renamed && c.Op == face.AddPerson && c.Person.ID == "p200" && c.Person.Name != "renamed":
				t.Errorf("%s: %s set p200 back to %q after the task renamed it", dev, c.MessageID, c.Person.Name)
			}
		}
		log.mu.Unlock()
		if !deleted || !renamed {
			t.Errorf("%s never got the late tasks' commands (delete %v, rename %v)", dev, deleted, renamed)
		}
		// The kill hit a window of corrections: the one in flight and those queued behind
		// it were journalled, and the restarted agent sent them (under the killed agent's
		// message ids) before its own repair.
		if left := leftFromKilled(log, dev, killed[dev]); left < 2 {
			t.Errorf("%s: %d of the killed agent's corrections sent after the kill, want the one in flight and more", dev, left)
		}
	}
	for _, r := range reports {
		if r.Status == wire.SyncFailed {
			t.Errorf("a failed sync report: %+v", r)
		}
	}
	if err := fleet.Violations(); err != nil {
		t.Error(err)
	}
	var sb strings.Builder
	for _, r := range reports {
		fmt.Fprintf(&sb, "%s:%s:%s ", r.DeviceID, r.Reason, r.Status)
	}
	t.Logf("sync reports: %s", sb.String())
}
