package e2e

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// A terminal that keeps going offline (disconnected, commands sent meanwhile are lost)
// and coming back: the agent holds its commands while it is offline, resends what was in
// flight, and every task still succeeds; its neighbour is not held up.
func TestTerminalOfflineAndBack(t *testing.T) {
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-o\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[dispatch]\nretry_interval = \"200ms\"\nheartbeat_timeout = \"300ms\"\nmax_tries = 20\nbackoff_max = \"500ms\"\n"+
		"[[devices]]\nid = \"flaky\"\n[[devices]]\nid = \"steady\"\n", t.TempDir())
	cfg, err := config.Parse("o.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startAgent(t, cfg)
	base := sim.Options{Seed: 21, AckLatency: sim.Latency{Kind: sim.Fixed, A: 5 * time.Millisecond},
		HeartbeatInterval: 50 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }}
	flakyOpts := base
	flakyOpts.OfflineEvery, flakyOpts.OfflineFor = 150*time.Millisecond, 400*time.Millisecond
	flaky, err := sim.StartMQTT("mqtt://"+addr, []string{"flaky"}, flakyOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer flaky.Close()
	steady, err := sim.StartMQTT("mqtt://"+addr, []string{"steady"}, base)
	if err != nil {
		t.Fatal(err)
	}
	defer steady.Close()

	bo := connectBackOffice(t, addr, "gw-o")
	var tasks []wire.Task
	for i := range 80 {
		dev := []string{"flaky", "steady"}[i%2]
		tasks = append(tasks, wire.Task{TaskID: fmt.Sprintf("o-%d", i), DeviceID: dev, Op: face.AddPerson, Person: face.Person{ID: fmt.Sprint(i)}})
	}
	b, _ := json.Marshal(tasks)
	bo.publish("faceagent/gw-o/tasks", b)
	bo.waitFor("every result", 90*time.Second, func() bool { return len(bo.results) == len(tasks) })
	for id, r := range bo.results {
		if r.Status != wire.Succeeded {
			t.Errorf("%s: %+v", id, r)
		}
	}
	if off := flaky.Terminal("flaky").Stats(); off.Offline == 0 {
		t.Errorf("the flaky terminal never went offline: %+v", off)
	}
	for _, f := range []*sim.Fleet{flaky, steady} {
		if got := len(f.Terminals()[0].Persons()); got != 40 {
			t.Errorf("%s has %d persons, want 40", f.Terminals()[0].ID(), got)
		}
	}
	stop()
}
