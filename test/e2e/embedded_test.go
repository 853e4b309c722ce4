package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// The embedded default end to end: back office → embedded broker (intake hook, journal)
// → outbox → MQTT link → simulated terminals (strict: never two commands in flight) →
// results and acks upstream; malformed and unknown-device tasks dead-lettered.
func TestEndToEndEmbedded(t *testing.T) {
	ids := []string{"t1", "t2", "t3", "t4"}
	src := fmt.Sprintf(`[agent]
gateway_id = "gw-e"
data_dir = %q
[broker]
listen = "127.0.0.1:0"
[dispatch]
retry_interval = "300ms"
heartbeat_timeout = "3s"
[journal]
sync = "batch"
`, t.TempDir())
	for _, id := range ids {
		src += fmt.Sprintf("[[devices]]\nid = %q\n", id)
	}
	cfg, err := config.Parse("e2e.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, a, stop := startAgentFull(t, cfg)

	fleet, err := sim.StartMQTT("mqtt://"+addr, ids, sim.Options{
		Seed: 7, AckLatency: sim.Latency{Kind: sim.Fixed, A: 2 * time.Millisecond}, AckLoss: 0.05,
		HeartbeatInterval: 100 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	bo := connectBackOffice(t, addr, "gw-e")
	const n uint64 = 200
	want := map[string][]string{} // device -> person ids expected on its whitelist
	var batch []wire.Task
	for i := range int(n) {
		dev := ids[i%len(ids)]
		task := wire.Task{TaskID: fmt.Sprintf("task-%d", i), DeviceID: dev, Op: face.AddPerson,
			Person: face.Person{ID: fmt.Sprint(1000 + i), Name: "P"}}
		want[dev] = append(want[dev], task.Person.ID)
		batch = append(batch, task)
		if len(batch) == 25 {
			b, _ := json.Marshal(batch)
			bo.publish("faceagent/gw-e/tasks", b)
			batch = nil
		}
	}
	bo.publish("faceagent/gw-e/tasks", []byte(`{"taskId":"x","deviceId":"nope","op":"AddPerson","person":{"id":"1"}}`))
	bo.publish("faceagent/gw-e/tasks", []byte(`not json`))

	bo.waitFor("every result", 60*time.Second, func() bool { return uint64(len(bo.results)) == n && len(bo.dead) == 2 })
	for id, r := range bo.results {
		if r.Status != wire.Succeeded || r.Tries < 1 || r.MessageID == "" {
			t.Errorf("task %s: %+v", id, r)
		}
	}
	if bo.dead[0].Reason != `unknown device "nope"` || bo.dead[1].Reason[:15] != "malformed JSON:" {
		t.Errorf("deadletters: %+v", bo.dead)
	}
	bo.waitFor("acks forwarded", 10*time.Second, func() bool { return uint64(bo.acks) >= n })
	for _, id := range ids {
		var got []string
		for _, p := range fleet.Terminal(id).Persons() {
			got = append(got, p.ID)
		}
		slices.Sort(got)
		exp := slices.Clone(want[id])
		slices.Sort(exp)
		if !slices.Equal(got, exp) {
			t.Errorf("terminal %s whitelist %v, want %v", id, got, exp)
		}
	}
	if err := fleet.Violations(); err != nil {
		t.Error(err)
	}

	// Each terminal's state in the store, read back through a store client over MQTT:
	// written on change (at most once a second), so wait for the final one.
	sc, err := store.Connect(ctx, &store.Options{URL: "mqtt://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	for _, id := range ids {
		key := "faceagent/gw-e/devices/" + id
		w, err := sc.KeyNotify(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		final := func(v []byte) bool {
			var st wire.DeviceState
			if _, err := st.UnmarshalMsg(v); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			return st.DeviceID == id && st.Online && st.Succeeded == n/uint64(len(ids)) && st.QueueDepth == 0 &&
				st.InFlight == "" && st.Firmware == "facesim-1" && st.LastHeartbeat > 0
		}
		e, err := sc.Get(ctx, key)
		for err != nil || !final(e.Value) {
			select {
			case nt := <-w.C():
				e, err = store.Entry{Value: nt.Value}, nil
			case <-ctx.Done():
				t.Fatalf("%s never showed the final state (last: %v %x)", key, err, e.Value)
			}
		}
		_ = w.Stop(ctx)
	}

	exp := scrape(t, a)
	for _, want := range []string{
		`faceagent_results_total{status="succeeded"} 200`,
		`faceagent_tasks_accepted_total 200`,
		`faceagent_tasks_rejected_total 2`,
		`faceagent_queue_depth{device="t1"} 0`,
		`faceagent_device_online{device="t4"} 1`,
		`faceagent_commands_succeeded_total{device="t2"} 50`,
		`faceagent_journal_fsyncs_total `,
		`faceagent_store_write_seconds_count `,
	} {
		if !strings.Contains(exp, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	stop()
}

// An external upstream broker (Debian's mosquitto), no embedded broker: tasks acknowledged only
// after the journal append, terminals on the same broker, results published
// with QoS 1 — and the upstream broker restarted between two rounds: the agent
// reconnects, subscribes again and carries on. The state store is absent (mosquitto has
// none): dispatch must not care.
func TestEndToEndExternalUpstream(t *testing.T) {
	m := testutil.StartMosquitto(t)
	ids := []string{"x1", "x2"}
	src := fmt.Sprintf(`[agent]
gateway_id = "gw-x"
data_dir = %q
[upstream]
url = %q
session_expiry = "1h"
reconnect_max = "300ms"
[store]
request_timeout = "200ms"
[dispatch]
retry_interval = "300ms"
heartbeat_timeout = "3s"
[[devices]]
id = "x1"
[[devices]]
id = "x2"
`, t.TempDir(), m.URL)
	cfg, err := config.Parse("x.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, a, stop := startAgentFull(t, cfg)
	waitUpstream(t, a)
	fleet, err := sim.StartMQTT(m.URL, ids, sim.Options{
		Seed: 3, AckLatency: sim.Latency{Kind: sim.Fixed, A: 2 * time.Millisecond},
		HeartbeatInterval: 100 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()

	round := func(name string, from, n int) {
		bo := connectBackOffice(t, m.Addr, "gw-x")
		for i := from; i < from+n; i++ {
			bo.publish("faceagent/gw-x/tasks", fmt.Appendf(nil, `{"taskId":"%s-%d","deviceId":%q,"op":"AddPerson","person":{"id":"%d"}}`, name, i, ids[i%2], i))
		}
		bo.waitFor(name+" results", 60*time.Second, func() bool {
			for i := from; i < from+n; i++ {
				if r, ok := bo.results[fmt.Sprintf("%s-%d", name, i)]; !ok || r.Status != wire.Succeeded {
					return false
				}
			}
			return true
		})
		_ = bo.c.Disconnect(&paho.Disconnect{})
	}
	round("a", 0, 60)
	m.Restart()
	// mosquitto runs without persistence here: tasks published before the agent has
	// subscribed again would be dropped by the broker. Wait for the resubscription.
	pollUntil(t, "the agent to subscribe again on the restarted upstream broker", func() bool {
		return metric(t, a, "faceagent_upstream_connects_total") >= 2
	})
	round("b", 60, 60)
	for _, id := range ids {
		if got := len(fleet.Terminal(id).Persons()); got != 60 {
			t.Errorf("terminal %s has %d persons, want 60", id, got)
		}
	}
	stop()
}

// Both: the back office and the state store on an external broker (mosquitto), the
// terminals on the gateway's own embedded broker.
func TestEndToEndUpstreamWithLocalTerminals(t *testing.T) {
	m := testutil.StartMosquitto(t)
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-l\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[upstream]\nurl = %q\nreconnect_max = \"300ms\"\n[store]\nrequest_timeout = \"200ms\"\n[[devices]]\nid = \"l1\"\n", t.TempDir(), m.URL)
	cfg, err := config.Parse("l.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	local, a, stop := startAgentFull(t, cfg)
	waitUpstream(t, a)
	fleet, err := sim.StartMQTT("mqtt://"+local, []string{"l1"}, sim.Options{Seed: 4, HeartbeatInterval: 100 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	bo := connectBackOffice(t, m.Addr, "gw-l")
	for i := range 20 {
		bo.publish("faceagent/gw-l/tasks", fmt.Appendf(nil, `{"taskId":"l-%d","deviceId":"l1","op":"AddPerson","person":{"id":"%d"}}`, i, i))
	}
	bo.waitFor("results", 30*time.Second, func() bool { return len(bo.results) == 20 })
	bo.waitFor("acks forwarded upstream", 10*time.Second, func() bool { return bo.acks >= 20 })
	if got := len(fleet.Terminal("l1").Persons()); got != 20 {
		t.Errorf("terminal has %d persons, want 20", got)
	}
	stop()
}
