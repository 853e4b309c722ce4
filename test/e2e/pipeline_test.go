package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// The whole agent, terminals on its embedded broker, the back office on mosquitto behind
// a link with a 40 ms round trip: the results of 400 tasks go up with many in flight at
// once (one at a time, 400 results took 16 s), each device's results in the order its
// tasks were given, each exactly once.
func TestResultsArePipelinedAcrossASlowLink(t *testing.T) {
	m := testutil.StartMosquitto(t)
	proxy := testutil.StartDelayProxy(t, m.Addr, 20*time.Millisecond)
	ids := []string{"w1", "w2", "w3", "w4"}
	local, _, stop := startUpstreamAgent(t, "gw-w", proxy.Addr(), "300ms", ids)
	defer startStrictTerminals(t, local, ids, 5).Close()
	sub := testutil.SubscribeInOrder(t, m.Addr, "faceagent/gw-w/results")
	bo := connectBackOffice(t, m.Addr, "gw-w")
	const n = 400
	publishAddBatches(bo, "gw-w", "w-%03d", ids, n, 50)
	waitFor(t, "every result", func() bool { return len(sub.Received()) >= n }, sub.Changed())
	_, peak, _ := proxy.Counts()
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
	for _, p := range sub.Received() {
		r, err := wire.ParseResult([]byte(p))
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
		if r.Status != wire.Succeeded {
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

// The upstream broker (mosquitto, no sessions kept across a restart) restarts while the
// agent has results and forwarded acks in flight across a 20 ms link: every result
// arrives, each device's first copies in task order. The proxy first stops the agent's
// bytes and the test lets the subscribers take what already reached the broker (a broker
// without persistence loses what it acknowledged and had not yet delivered).
func TestResultsSurviveUpstreamRestartMidStream(t *testing.T) {
	m := testutil.StartMosquitto(t)
	proxy := testutil.StartDelayProxy(t, m.Addr, 10*time.Millisecond)
	proxy.SetCountTopic("faceagent/gw-v/")
	ids := []string{"v1", "v2", "v3", "v4"}
	local, a, stop := startUpstreamAgent(t, "gw-v", proxy.Addr(), "200ms", ids)
	// Subscribed before anything is forwarded: the broker drops what nobody takes.
	results := testutil.SubscribeInOrder(t, m.Addr, "faceagent/gw-v/results")
	others := testutil.SubscribeInOrder(t, m.Addr, "faceagent/gw-v/devices/#", "faceagent/gw-v/deadletter")
	defer startStrictTerminals(t, local, ids, 6).Close()
	bo := connectBackOffice(t, m.Addr, "gw-v")
	const n = 1200
	publishAddBatches(bo, "gw-v", "v-%04d", ids, n, 100)
	// Every task is in the agent's journal before the broker goes (it would lose those
	// it had not delivered yet).
	pollUntil(t, "every task taken", func() bool { return metric(t, a, "faceagent_tasks_accepted_total") >= n })
	waitFor(t, "a quarter of the results", func() bool { return len(results.Received()) >= n/4 }, results.Changed())
	proxy.Hold()
	pollUntil(t, "the subscribers to get what reached the broker", func() bool {
		return len(results.Received())+len(others.Received()) >= proxy.ForwardedOnTopic()
	})
	before := results.Received()
	if len(before) == n {
		t.Fatal("every result was out before the restart; nothing was in flight")
	}
	results.Close()
	others.Close()
	m.Restart()
	after := testutil.SubscribeInOrder(t, m.Addr, "faceagent/gw-v/results")
	proxy.Release()
	all := func() []string { return append(append([]string(nil), before...), after.Received()...) }
	waitFor(t, "every result", func() bool {
		seen := map[string]bool{}
		for _, p := range all() {
			seen[p] = true
		}
		return len(seen) >= n
	}, after.Changed())
	got := all()
	t.Logf("%d results before the restart, %d after (%d duplicates)", len(before), len(got)-len(before), len(got)-n)
	next := map[string]int{}
	for k, id := range ids {
		next[id] = k
	}
	seen := map[string]bool{}
	for _, p := range got {
		r, err := wire.ParseResult([]byte(p))
		if err != nil {
			t.Fatal(err)
		}
		if seen[r.TaskID] {
			continue // a duplicate: allowed after the restart
		}
		seen[r.TaskID] = true
		var i int
		if _, err := fmt.Sscanf(r.TaskID, "v-%d", &i); err != nil {
			t.Fatal(err)
		}
		if want := next[r.DeviceID]; i != want {
			t.Fatalf("device %s: the first result of task %d arrived where %d was next", r.DeviceID, i, want)
		}
		next[r.DeviceID] = i + len(ids)
	}
	if len(seen) != n {
		t.Fatalf("%d results, want %d", len(seen), n)
	}
	stop()
}

// startUpstreamAgent starts an agent with its embedded broker for the terminals and the
// upstream broker at upstream, and waits until it is connected there.
func startUpstreamAgent(t *testing.T, gw, upstream, reconnectMax string, ids []string) (local string, a *agent.Agent, stop func()) {
	t.Helper()
	src := fmt.Sprintf("[agent]\ngateway_id = %q\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[upstream]\nurl = \"mqtt://%s\"\nreconnect_max = %q\n[store]\nrequest_timeout = \"2s\"\n",
		gw, t.TempDir(), upstream, reconnectMax)
	for _, id := range ids {
		src += fmt.Sprintf("[[devices]]\nid = %q\n", id)
	}
	cfg, err := config.Parse(gw+".toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	local, a, stop = startAgentFull(t, cfg)
	waitUpstream(t, a)
	return local, a, stop
}

// startStrictTerminals connects simulated terminals that ack after 1 ms and report any
// second command in flight as a test error.
func startStrictTerminals(t *testing.T, brokerAddr string, ids []string, seed uint64) *sim.Fleet {
	t.Helper()
	fleet, err := sim.StartMQTT("mqtt://"+brokerAddr, ids, sim.Options{Seed: seed, Strict: true,
		AckLatency: sim.Latency{Kind: sim.Fixed, A: time.Millisecond}, HeartbeatInterval: time.Second,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	return fleet
}

// publishAddBatches publishes n AddPerson tasks, task i to ids[i%len(ids)] with task id
// fmt.Sprintf(taskID, i) and person i, in batches of per.
func publishAddBatches(bo *backOffice, gw, taskID string, ids []string, n, per int) {
	var batch []byte
	for i := range n {
		if i%per == 0 {
			batch = append(batch[:0], '[')
		} else {
			batch = append(batch, ',')
		}
		batch = fmt.Appendf(batch, `{"taskId":"`+taskID+`","deviceId":%q,"op":"AddPerson","person":{"id":"%d"}}`, i, ids[i%len(ids)], i)
		if i%per == per-1 {
			bo.publish("faceagent/"+gw+"/tasks", append(batch, ']'))
		}
	}
}
