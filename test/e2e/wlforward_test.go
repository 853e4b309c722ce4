package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// A reconciliation's own commands are the agent's business, not the back office's: the
// acks of its ListPersons (a page of persons each) and of its corrections are not
// forwarded, so however large the repair, it cannot fill the forward backlog and push out
// the acks of tasks. Here the forward backlog is bounded far below one page (1 KiB, 8
// messages) and the terminal holds 240 persons listed in pages of 60: every task's ack
// is forwarded, nothing is dropped, and no forwarded ack answers a command of the
// reconciliation.
func TestReconciliationAcksNotForwarded(t *testing.T) {
	src := fmt.Sprintf(`[agent]
gateway_id = "gw-f"
data_dir = %q
[broker]
listen = "127.0.0.1:0"
[dispatch]
retry_interval = "300ms"
heartbeat_timeout = "3s"
[journal]
sync = "none"
[whitelist]
list_limit = 60
[reports]
max_forwarded = 8
max_forwarded_bytes = "1KiB"
[[devices]]
id = "big"
`, t.TempDir())
	addr, a, stop := startAgentFull(t, parse(t, src))
	defer stop()
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"big"}, sim.Options{Seed: 7, HeartbeatInterval: 100 * time.Millisecond,
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
	bo := connectBackOffice(t, addr, "gw-f")
	const n = 240
	var tasks []wire.Task
	for i := range n {
		tasks = append(tasks, wire.Task{TaskID: fmt.Sprintf("add-%d", i), DeviceID: "big", Op: face.AddPerson, Person: syncPerson(i)})
	}
	// One task at a time: the acks come one by one, as the back office waits for each.
	for i := range tasks {
		b, _ := json.Marshal(tasks[i])
		bo.publish("faceagent/gw-f/tasks", b)
		bo.waitFor("the task's ack forwarded", 10*time.Second, func() bool { return len(bo.ackIDs) > i })
	}
	pollUntil(t, "big in sync", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 1 })

	// Drift that needs every page listed and two corrections.
	big := fleet.Terminal("big")
	if ok, err := big.TamperRev("p3", "fedcba9876543210"); !ok || err != nil {
		t.Fatalf("TamperRev: %v %v", ok, err)
	}
	if !big.TamperDelete("p200") {
		t.Fatal("p200 not held")
	}
	big.SendHeartbeat()
	bo.waitFor("the reconciliation done", 20*time.Second, func() bool {
		s := bo.syncs["big"]
		return len(s) > 0 && s[len(s)-1].Status == wire.SyncDone
	})
	pollUntil(t, "the forward backlog empty", func() bool { return metric(t, a, "faceagent_forward_backlog") == 0 })
	if got := big.Stats().Lists; got < n/60 {
		t.Fatalf("the terminal answered %d ListPersons, want at least %d", got, n/60)
	}

	bo.mu.Lock()
	defer bo.mu.Unlock()
	var own []string
	for _, id := range bo.ackIDs {
		if !strings.HasPrefix(id, "AddPerson-") {
			own = append(own, id)
		}
	}
	if len(own) > 0 || len(bo.ackIDs) != n {
		t.Errorf("forwarded %d acks, want the %d tasks' alone; not of a task: %v", len(bo.ackIDs), n, own)
	}
	text := scrape(t, a)
	for _, reason := range []string{"bound", "refused", "journal"} {
		if v, _ := seriesValue(text, `faceagent_forward_dropped_total{reason="`+reason+`"}`); v != 0 {
			t.Errorf("faceagent_forward_dropped_total{reason=%q} %v, want 0", reason, v)
		}
	}
}
