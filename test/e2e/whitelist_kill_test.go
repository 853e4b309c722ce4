package e2e

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

const whitelistChildEnv = "FACEAGENT_WHITELIST_CRASH_DIR"

// whitelistKillConfig: one MQTT terminal without heartbeats, so that its commands wait
// while no terminal is connected.
func whitelistKillConfig(dir string) (*config.Config, error) {
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-w\"\ndata_dir = %q\n"+
		"[broker]\nlisten = \"127.0.0.1:0\"\n[[devices]]\nid = \"w1\"\nheartbeat = false\n", dir)
	return config.Parse("w.toml", []byte(src), nil)
}

// whitelistTask is the i-th task of the crash test: adds and deletes over seven persons,
// each add with a name of its own, so that the order of the tasks decides the list.
func whitelistTask(i int) (id, op, person, name string, payload []byte) {
	id, person, name = fmt.Sprintf("w-%d", i), fmt.Sprint(i*5%7), fmt.Sprintf("name %d", i)
	op = "AddPerson"
	if i%3 == 2 {
		op = "DeletePerson"
	}
	payload = fmt.Appendf(nil, `{"taskId":%q,"deviceId":"w1","op":%q,"person":{"id":%q,"name":%q}}`, id, op, person, name)
	return
}

// applyTasks is the desired list the tasks 0..n-1 leave: person id -> name.
func applyTasks(n int) map[string]string {
	l := map[string]string{}
	for i := range n {
		_, op, p, name, _ := whitelistTask(i)
		if op == "AddPerson" {
			l[p] = name
		} else {
			delete(l, p)
		}
	}
	return l
}

// whitelistChild runs an agent with the embedded broker and publishes the tasks one at a
// time with QoS 1, printing each task's index once its PUBACK came back, until SIGKILL.
func whitelistChild(dir string) {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "whitelist child:", err); os.Exit(3) }
	cfg, err := whitelistKillConfig(dir)
	if err != nil {
		fail(err)
	}
	a, err := agent.New(&agent.Options{Config: cfg})
	if err != nil {
		fail(err)
	}
	go func() { fail(a.Run(context.Background())) }()
	<-a.Ready()
	conn, err := net.Dial("tcp", a.BrokerAddr())
	if err != nil {
		fail(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx := context.Background()
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "crash-publisher", KeepAlive: 30, CleanStart: true}); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	for i := 0; i < 5000; i++ { // more than the time before the kill allows
		_, _, _, _, payload := whitelistTask(i)
		if _, err := c.Publish(ctx, &paho.Publish{Topic: "faceagent/gw-w/tasks", QoS: 1, Payload: payload}); err != nil {
			fail(err)
		}
		fmt.Println(i)
	}
	select {} // until the SIGKILL
}

// SIGKILL while tasks come in: the desired whitelist holds every acknowledged task (it was
// flushed before the PUBACK) and at most the one task not yet acknowledged; once the back
// office sends that task again and the terminal took every queued command, the terminal
// holds exactly the desired list: the outbox and the desired whitelists saw the same
// tasks in the same order.
func TestDesiredWhitelistSurvivesSIGKILL(t *testing.T) {
	dir := t.TempDir()
	acked := 0
	testutil.CrashChild(t, []string{whitelistChildEnv + "=" + dir}, 20*time.Second, 300*time.Millisecond,
		func(string) { acked++ })
	if acked < 3 {
		t.Fatalf("the child had %d messages acknowledged before the kill", acked)
	}

	// The desired list as the kill left it: the acknowledged tasks, maybe the next one.
	s, err := whitelist.Open(filepath.Join(dir, agent.WhitelistDir), whitelist.Options{Journal: journal.Options{Sync: journal.SyncNone}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range s.Page("w1", "", 100, nil) {
		r, _ := s.Get("w1", e.ID)
		got[e.ID] = r.Name
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, applyTasks(acked)) && !maps.Equal(got, applyTasks(acked+1)) {
		t.Fatalf("after %d acknowledged tasks the desired list is %v, want %v (or %v with the next task)",
			acked, got, applyTasks(acked), applyTasks(acked+1))
	}

	// Restart; the back office sends the unacknowledged task again; a terminal connects.
	cfg, err := whitelistKillConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	addr, a, stop := startAgentFull(t, cfg)
	defer stop()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx := context.Background()
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "crash-publisher", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	_, _, _, _, next := whitelistTask(acked)
	if _, err := c.Publish(ctx, &paho.Publish{Topic: "faceagent/gw-w/tasks", QoS: 1, Payload: next}); err != nil {
		t.Fatal(err)
	}
	c.Disconnect(&paho.Disconnect{})
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"w1"}, sim.Options{Seed: 5, Strict: true, HeartbeatInterval: 100 * time.Millisecond,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	want := applyTasks(acked + 1)
	pollUntil(t, "the terminal to take every queued command", func() bool {
		text := scrape(t, a)
		q, _ := seriesValue(text, `faceagent_queue_depth{device="w1"}`)
		f, _ := seriesValue(text, `faceagent_in_flight{device="w1"}`)
		return q == 0 && f == 0 && fleet.Stats()[0].Acked > 0
	})
	held := map[string]string{}
	for _, p := range fleet.Terminal("w1").Persons() {
		held[p.ID] = p.Name
	}
	if !maps.Equal(held, want) {
		t.Errorf("the terminal holds %v, want the desired list %v", held, want)
	}
	// Every AddPerson carried the agent's rev: the terminal's digest is the desired one.
	var digest face.Digest
	for id, name := range want {
		digest.Toggle(id, face.RecordRev(id, name, "", "", ""))
	}
	if d := fleet.Terminal("w1").Digest(); d != digest {
		t.Errorf("the terminal's digest %s, want the desired digest %s", d, digest)
	}
	// The device state sees it: a v2 heartbeat with the desired digest, nothing queued.
	pollUntil(t, "the terminal counted in sync", func() bool { return metric(t, a, "faceagent_terminals_in_sync") == 1 })
	if n := metric(t, a, `faceagent_desired_persons{device="w1"}`); n != float64(len(want)) {
		t.Errorf("faceagent_desired_persons %v, want %d", n, len(want))
	}
	if n := metric(t, a, "faceagent_whitelist_terminals"); n != 1 {
		t.Errorf("faceagent_whitelist_terminals %v, want 1", n)
	}
	t.Logf("%d tasks acknowledged before SIGKILL; the terminal holds the desired list of %d persons", acked, len(want))
}
