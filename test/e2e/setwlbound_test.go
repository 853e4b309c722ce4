package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// whitelist.max_set_tasks bounds the SetWhitelist tasks kept (pending, or with a result
// not yet reported): with 2, SetWhitelist tasks for two offline terminals are kept and a
// third is dead-lettered with a reason naming the key, and gets no result. Once one
// terminal comes online and its task's result is reported (the agent has the PUBACK) there
// is room again: the third terminal's SetWhitelist is taken, and that terminal ends holding
// its list. faceagent_whitelist_set_tasks counts the kept tasks.
func TestSetWhitelistTaskBound(t *testing.T) {
	src := syncConfig{gateway: "gw-b", dataDir: t.TempDir(), whitelist: []string{"max_set_tasks = 2"}, devices: []string{"a", "b", "c"}}.String()
	addr, a, stop := startAgentFull(t, parse(t, src))
	defer stop()
	bo := connectBackOffice(t, addr, "gw-b")
	list := []face.Person{syncPerson(1), syncPerson(2), syncPerson(3)}
	set := func(id, dev string) {
		b, _ := json.Marshal(wire.Task{TaskID: id, DeviceID: dev, Op: wire.SetWhitelist, Persons: list})
		bo.publish("faceagent/gw-b/tasks", b) // returns once the agent acknowledged it
	}
	set("a-set", "a")
	set("b-set", "b")
	set("c-set", "c") // a third kept task: over the bound
	bo.waitFor("the third SetWhitelist dead-lettered", 20*time.Second, func() bool { return len(bo.dead) == 1 })
	bo.mu.Lock()
	if d := bo.dead[0]; !strings.Contains(d.Reason, "whitelist.max_set_tasks") || !strings.Contains(string(d.Payload), `"c-set"`) {
		t.Errorf("deadletter %+v, want c-set's with a reason naming whitelist.max_set_tasks", d)
	}
	if len(bo.results) != 0 {
		t.Errorf("results before any terminal came online: %+v", bo.results)
	}
	bo.mu.Unlock()
	if n := metric(t, a, "faceagent_whitelist_set_tasks"); n != 2 {
		t.Errorf("faceagent_whitelist_set_tasks = %v, want 2 (the two kept)", n)
	}

	// Terminal a comes online: its task succeeds, is reported, and makes room.
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"a", "c"}, sim.Options{Seed: 3,
		AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond}, HeartbeatInterval: 100 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	bo.waitFor("a's result", 30*time.Second, func() bool { _, ok := bo.results["a-set"]; return ok })
	// The back office has the result before the agent has its PUBACK: the task leaves the
	// bound only then.
	pollUntil(t, "a's task to leave the bound", func() bool { return metric(t, a, "faceagent_whitelist_set_tasks") == 1 })
	set("c-set-2", "c")
	bo.waitFor("c's result", 30*time.Second, func() bool { _, ok := bo.results["c-set-2"]; return ok })
	bo.mu.Lock()
	for _, id := range []string{"a-set", "c-set-2"} {
		if r := bo.results[id]; r.Status != wire.Succeeded {
			t.Errorf("%s: %+v", id, r)
		}
	}
	if _, ok := bo.results["c-set"]; ok || len(bo.dead) != 1 {
		t.Errorf("the dead-lettered task got a result, or more deadletters: %+v %+v", bo.results, bo.dead)
	}
	bo.mu.Unlock()
	for _, dev := range []string{"a", "c"} {
		if got, want := heldList(fleet.Terminal(dev)), desiredList(list); !slices.Equal(got, want) {
			t.Errorf("%s holds %v, want %v", dev, got, want)
		}
	}
}
