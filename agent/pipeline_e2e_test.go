package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// The whole agent, terminals on its embedded broker, the back office on mosquitto behind
// a link with a 40 ms round trip: the results of 400 tasks go up with many in flight at
// once (one at a time, 400 results took 16 s), each device's results in the order its
// tasks were given, each exactly once.
func TestResultsArePipelinedAcrossASlowLink(t *testing.T) {
	m := testutil.StartMosquitto(t)
	proxy := startDelayProxy(t, m.Addr, 20*time.Millisecond)
	ids := []string{"w1", "w2", "w3", "w4"}
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-w\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[upstream]\nurl = \"mqtt://%s\"\nreconnect_max = \"300ms\"\n[store]\nrequest_timeout = \"2s\"\n", t.TempDir(), proxy.addr())
	for _, id := range ids {
		src += fmt.Sprintf("[[devices]]\nid = %q\n", id)
	}
	cfg, err := config.Parse("w.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	local, a, stop := startAgentFull(t, cfg)
	select {
	case <-a.UpstreamConnected():
	case <-time.After(20 * time.Second):
		t.Fatal("never connected upstream")
	}
	fleet, err := sim.StartMQTT("mqtt://"+local, ids, sim.Options{Seed: 5, Strict: true,
		AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond}, HeartbeatInterval: time.Second,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	sub := subscribeInOrder(t, m.Addr, "faceagent/gw-w/results")
	bo := connectBackOffice(t, m.Addr, "gw-w")
	const n = 400
	var batch []byte
	for i := range n {
		if i%50 == 0 {
			batch = append(batch[:0], '[')
		} else {
			batch = append(batch, ',')
		}
		batch = fmt.Appendf(batch, `{"taskId":"w-%03d","deviceId":%q,"op":"AddPerson","person":{"id":"%d"}}`, i, ids[i%len(ids)], i)
		if i%50 == 49 {
			bo.publish("faceagent/gw-w/tasks", append(batch, ']'))
		}
	}
	waitFor(t, "every result", func() bool { return len(sub.received()) >= n }, sub.changed)
	_, peak, _ := proxy.counts()
	t.Logf("at most %d messages in flight across the link", peak)
	// Results, forwarded acks and heartbeats and the state store's requests share the
	// link; one at a time that is at most a handful. The terminals finish tasks far
	// faster than one result per round trip, so the results' window fills.
	if peak < 16 {
		t.Errorf("at most %d messages were in flight; results are not pipelined", peak)
	}
	next := map[string]int{} // the task each device's next result is for
	for k, id := range ids {
		next[id] = k
	}
	seen := map[string]bool{}
	for _, p := range sub.received() {
		r, err := intake.ParseResult([]byte(p))
		if err != nil {
			t.Fatal(err)
		}
		if seen[r.TaskID] {
			t.Errorf("result %s twice", r.TaskID)
			continue
		}
		seen[r.TaskID] = true
		var i int
		if _, err := fmt.Sscanf(r.TaskID, "w-%d", &i); err != nil {
			t.Fatal(err)
		}
		if r.Status != intake.Succeeded {
			t.Errorf("task %s: %s %s", r.TaskID, r.Status, r.Error)
		}
		if want := next[r.DeviceID]; i != want {
			t.Fatalf("device %s: result of task %d arrived where %d was next", r.DeviceID, i, want)
		}
		next[r.DeviceID] = i + len(ids)
	}
	if len(seen) != n {
		t.Fatalf("%d results, want %d", len(seen), n)
	}
	stop()
}
