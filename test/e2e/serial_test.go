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

// Terminals on serial lines (pseudo-terminal pairs opened through go.bug.st/serial by
// the agent) next to one on MQTT, with garbage on the lines: every task reaches its
// terminal, never two commands in flight, results upstream.
func TestEndToEndSerial(t *testing.T) {
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-s\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n[dispatch]\nretry_interval = \"500ms\"\nheartbeat_timeout = \"3s\"\n", t.TempDir())
	serialIDs := []string{"s1", "s2"}
	devices, ports := deviceSections(t, serialIDs, true)
	src += devices
	src += "[[devices]]\nid = \"m1\"\n"
	cfg, err := config.Parse("s.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := startAgent(t, cfg)
	opts := sim.Options{Seed: 9, AckLatency: sim.Latency{Kind: sim.Fixed, A: 2 * time.Millisecond},
		HeartbeatInterval: 100 * time.Millisecond, GarbageRate: 0.1, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }}
	sfleet, err := sim.StartSerial(ports, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer sfleet.Close()
	opts.GarbageRate = 0
	mfleet, err := sim.StartMQTT("mqtt://"+addr, []string{"m1"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer mfleet.Close()

	bo := connectBackOffice(t, addr, "gw-s")
	ids := []string{"s1", "s2", "m1"}
	const n = 90
	var batch []wire.Task
	for i := range n {
		batch = append(batch, wire.Task{TaskID: fmt.Sprintf("s-%d", i), DeviceID: ids[i%3], Op: face.AddPerson,
			Person: face.Person{ID: fmt.Sprint(i)}})
	}
	b, _ := json.Marshal(batch)
	bo.publish("faceagent/gw-s/tasks", b)
	bo.waitFor("every result", 60*time.Second, func() bool { return len(bo.results) == n })
	for id, r := range bo.results {
		if r.Status != wire.Succeeded {
			t.Errorf("%s: %+v", id, r)
		}
	}
	for _, f := range []*sim.Fleet{sfleet, mfleet} {
		for _, term := range f.Terminals() {
			if got := len(term.Persons()); got != n/3 {
				t.Errorf("terminal %s has %d persons, want %d", term.ID(), got, n/3)
			}
		}
	}
	stop()
}
