package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// heartbeats counts the forwarded heartbeats of dev that s received.
func (s *forwardSubscriber) heartbeats(gw, dev string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	prefix := "faceagent/" + gw + "/devices/" + dev + "/heartbeat "
	n := 0
	for _, m := range s.got {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// seriesIs reports whether a's /metrics has series with value v (false while it has none).
func seriesIs(t testing.TB, a *agent.Agent, series string, v float64) bool {
	got, ok := seriesValue(scrape(t, a), series)
	return ok && got == v
}

// A back office AddPerson the terminal refused takes the person out of the terminal's
// desired list: a protocol 2 terminal is judged in sync without it and a protocol 1 one
// has no count drift, and neither gets a single command (no repair, no sync report) over
// the next six heartbeats of each. A later AddPerson for the person, accepted, makes it
// desired again and the terminals hold it.
func TestTaskRefusalLeavesDesiredList(t *testing.T) {
	src := syncConfig{gateway: "gw-r", dataDir: t.TempDir(), whitelist: []string{"list_limit = 4"}, devices: []string{"v2", "v1"}}.String()
	addr, a, stop := startAgentFull(t, parse(t, src))
	defer stop()
	ids := []string{"v2", "v1"}
	log := newCommandLog()
	fleet, err := sim.StartMQTT("mqtt://"+addr, ids, sim.Options{Seed: 5, AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond},
		HeartbeatInterval: 100 * time.Millisecond, Strict: true, OnCommand: log.add,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	if err := fleet.Terminal("v1").SetProtocol(1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	fwd := subscribeForwarded(t, addr, "gw-r")
	bo := connectBackOffice(t, addr, "gw-r")

	const n = 5
	var persons []face.Person
	for i := range n {
		persons = append(persons, syncPerson(i))
	}
	refused := persons[2]
	var tasks []wire.Task
	for _, dev := range ids {
		fleet.Terminal(dev).RefuseNext(face.AddPerson, refused.ID)
		for _, p := range persons {
			tasks = append(tasks, wire.Task{TaskID: dev + "-add-" + p.ID, DeviceID: dev, Op: face.AddPerson, Person: p})
		}
	}
	b, _ := json.Marshal(tasks)
	bo.publish("faceagent/gw-r/tasks", b)
	bo.waitFor("every add's result", 30*time.Second, func() bool { return len(bo.results) == len(tasks) })
	bo.mu.Lock()
	for id, r := range bo.results {
		if want := wire.Succeeded; strings.HasSuffix(id, "-add-"+refused.ID) {
			if r.Status != wire.Failed || !strings.Contains(r.Error, "refused") {
				t.Errorf("task %s: %+v, want failed on a refusal", id, r)
			}
		} else if r.Status != want {
			t.Errorf("task %s: %+v", id, r)
		}
	}
	bo.mu.Unlock()
	pollUntil(t, "v2 judged in sync without the refused person",
		func() bool { return seriesIs(t, a, `faceagent_terminal_in_sync{device="v2"}`, 1) })
	pollUntil(t, "v1's desired list without the refused person",
		func() bool { return seriesIs(t, a, `faceagent_desired_persons{device="v1"}`, n-1) })

	// Six heartbeats of each terminal from now: no command at all.
	sent := map[string]int{}
	beats := map[string]int{}
	for _, dev := range ids {
		sent[dev], beats[dev] = log.len(dev), fwd.heartbeats("gw-r", dev)
	}
	waitFor(t, "six more heartbeats of each terminal", func() bool {
		for _, dev := range ids {
			if fwd.heartbeats("gw-r", dev) < beats[dev]+6 {
				return false
			}
		}
		return true
	}, fwd.changed)
	without := slices.DeleteFunc(slices.Clone(persons), func(p face.Person) bool { return p.ID == refused.ID })
	for _, dev := range ids {
		if got := log.len(dev) - sent[dev]; got != 0 {
			log.mu.Lock()
			t.Errorf("terminal %s got %d commands after the refusal: %+v", dev, got, log.cmds[dev][sent[dev]:])
			log.mu.Unlock()
		}
	}
	if got, want := heldList(fleet.Terminal("v2")), desiredList(without); !slices.Equal(got, want) {
		t.Errorf("v2 holds %v, want %v", got, want)
	}
	if got := len(fleet.Terminal("v1").Persons()); got != n-1 {
		t.Errorf("v1 holds %d persons, want %d", got, n-1)
	}
	bo.mu.Lock()
	if len(bo.syncs) != 0 {
		t.Errorf("a refusal started reconciliations: %+v", bo.syncs)
	}
	bo.mu.Unlock()

	// A later task for the person, accepted: desired again, held, in sync.
	var again []wire.Task
	for _, dev := range ids {
		again = append(again, wire.Task{TaskID: dev + "-again-" + refused.ID, DeviceID: dev, Op: face.AddPerson, Person: refused})
	}
	b, _ = json.Marshal(again)
	bo.publish("faceagent/gw-r/tasks", b)
	bo.waitFor("the later adds' results", 30*time.Second, func() bool { return len(bo.results) == len(tasks)+len(again) })
	bo.mu.Lock()
	for _, task := range again {
		if r := bo.results[task.TaskID]; r.Status != wire.Succeeded {
			t.Errorf("task %s: %+v", task.TaskID, r)
		}
	}
	bo.mu.Unlock()
	if got, want := heldList(fleet.Terminal("v2")), desiredList(persons); !slices.Equal(got, want) {
		t.Errorf("v2 holds %v, want %v", got, want)
	}
	if got := len(fleet.Terminal("v1").Persons()); got != n {
		t.Errorf("v1 holds %d persons, want %d", got, n)
	}
	pollUntil(t, "v2 in sync with the person desired again",
		func() bool { return seriesIs(t, a, `faceagent_terminal_in_sync{device="v2"}`, 1) })
	pollUntil(t, "v1's desired list holding the person again",
		func() bool { return seriesIs(t, a, `faceagent_desired_persons{device="v1"}`, n) })
	if err := fleet.Violations(); err != nil {
		t.Error(err)
	}
}
