package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// A repair keeps several corrections queued behind the one in flight, yet a task taken in
// during it waits behind the command in flight only: a factory-reset terminal of 100
// persons acking after 40 ms is repaired, and five tasks, published one at a time while
// it runs, each reach the terminal after at most two of the repair's commands from its
// PUBACK on (the one in flight, and one more while the task passes from intake to its
// queue). Queued in intake order they would wait behind the window's four to eight. The
// terminal ends holding the desired list, tasks included; no two commands were ever in
// flight (a strict terminal).
func TestWhitelistSyncTaskWaitsBehindInFlightOnly(t *testing.T) {
	addr := freeLoopbackAddr(t)
	src := fmt.Sprintf(`[agent]
gateway_id = "gw-w"
data_dir = %q
[broker]
listen = %q
[dispatch]
heartbeat_timeout = "3s"
[[devices]]
id = "w"
`, t.TempDir(), addr)
	_, a, _ := startAgentFull(t, parse(t, src))
	log := newCommandLog()
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"w"}, sim.Options{Seed: 3, HeartbeatInterval: 100 * time.Millisecond,
		Strict: true, OnCommand: log.add, OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	term := fleet.Terminal("w")
	bo := connectBackOffice(t, addr, "gw-w")
	const n = 100
	var persons []face.Person
	var tasks []wire.Task
	for i := range n {
		persons = append(persons, syncPerson(i))
		tasks = append(tasks, wire.Task{TaskID: fmt.Sprintf("add-%d", i), DeviceID: "w", Op: face.AddPerson, Person: persons[i]})
	}
	b, _ := json.Marshal(tasks)
	bo.publish("faceagent/gw-w/tasks", b)
	bo.waitFor("every add's result", 30*time.Second, func() bool { return len(bo.results) == n })
	pollUntil(t, "w in sync", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 1 })

	term.SetAckLatency(sim.Latency{Kind: sim.Fixed, A: 40 * time.Millisecond})
	mark := log.len("w")
	term.FactoryReset()
	term.SendHeartbeat()
	for k := range 5 {
		waitFor(t, "more corrections", func() bool { return log.corrections("w", mark) >= 10*(k+1) }, log.wake)
		p := face.Person{ID: fmt.Sprintf("late%d", k), Name: "late"}
		persons = append(persons, p)
		from := log.len("w")
		b, _ := json.Marshal(wire.Task{TaskID: p.ID, DeviceID: "w", Op: face.AddPerson, Person: p})
		bo.publish("faceagent/gw-w/tasks", b)
		var at int
		waitFor(t, "the task's command", func() bool {
			log.mu.Lock()
			defer log.mu.Unlock()
			at = slices.IndexFunc(log.cmds["w"][from:], func(c face.Command) bool { return c.Person.ID == p.ID })
			return at >= 0
		}, log.wake)
		if before := log.corrections("w", from) - log.corrections("w", from+at); before > 2 {
			t.Errorf("task %s reached the terminal after %d of the repair's commands from its PUBACK on, want at most 2", p.ID, before)
		}
	}
	bo.waitFor("a done sync report", 30*time.Second, func() bool {
		s := bo.syncs["w"]
		return len(s) >= 2 && s[len(s)-1].Status == wire.SyncDone
	})
	pollUntil(t, "w in sync after the repair", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 1 })
	if got, want := heldList(term), desiredList(persons); !slices.Equal(got, want) {
		t.Errorf("the terminal holds %d persons, want %d: %v", len(got), len(want), diffLines(got, want))
	}
	own := 0
	log.mu.Lock()
	for _, c := range log.cmds["w"][mark:] {
		if whitelist.OwnMessageID(c.MessageID) && c.Op == face.AddPerson {
			own++
		}
	}
	log.mu.Unlock()
	if own < n || own > n+8 {
		t.Errorf("%d corrective adds for %d missing persons", own, n)
	}
	if err := fleet.Violations(); err != nil {
		t.Error(err)
	}
}
