package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// A terminal replaced while the agent was stopped is noticed by its serial at its first
// heartbeat after the restart: the agent kept the serial it had seen. Its reconciliation
// reports reason serial (not digest), and the new terminal ends holding the desired list.
func TestReplacementWhileAgentDownIsSerialDrift(t *testing.T) {
	dir, addr := t.TempDir(), freeLoopbackAddr(t)
	src := fmt.Sprintf(`[agent]
gateway_id = "gw-r"
data_dir = %q
[broker]
listen = %q
[dispatch]
retry_interval = "300ms"
heartbeat_timeout = "3s"
[journal]
sync = "batch"
[[devices]]
id = "door"
`, dir, addr)
	_, a, stop := startAgentFull(t, parse(t, src))
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"door"}, sim.Options{Seed: 2, HeartbeatInterval: 100 * time.Millisecond,
		Strict: true, OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	bo := connectBackOfficeSession(t, addr, "gw-r", 3600)
	const n = 6
	var persons []face.Person
	var tasks []wire.Task
	for i := range n {
		persons = append(persons, syncPerson(i))
		tasks = append(tasks, wire.Task{TaskID: fmt.Sprint("add-", i), DeviceID: "door", Op: face.AddPerson, Person: persons[i]})
	}
	b, _ := json.Marshal(tasks)
	bo.publish("faceagent/gw-r/tasks", b)
	bo.waitFor("every add's result", 20*time.Second, func() bool { return len(bo.results) == n })
	pollUntil(t, "door in sync", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 1 })
	stop()

	door := fleet.Terminal("door")
	door.Replace("")
	door.SendHeartbeat() // to nobody: the agent is down

	_, _, _ = startAgentFull(t, parse(t, src))
	bo = connectBackOfficeAs(t, addr, "gw-r", "backoffice", false, 3600)
	bo.waitFor("a done sync report", 20*time.Second, func() bool {
		s := bo.syncs["door"]
		return len(s) > 0 && s[len(s)-1].Status == wire.SyncDone
	})
	bo.mu.Lock()
	s := bo.syncs["door"]
	bo.mu.Unlock()
	if len(s) != 2 || s[0].Status != wire.SyncStarted || s[0].Reason != wire.SyncSerial || s[1].Reason != wire.SyncSerial || s[1].Missing != n {
		t.Errorf("sync reports %+v, want started and done with reason serial, %d missing", s, n)
	}
	if got, want := heldList(door), desiredList(persons); !slices.Equal(got, want) {
		t.Errorf("the new terminal holds %v, want %v", got, want)
	}
}
