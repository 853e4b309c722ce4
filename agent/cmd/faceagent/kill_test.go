package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// The intake boundary under SIGKILL (docs/design.md "Intake boundary"): a task whose PUBACK
// the back office received was in the journal, so after the agent is killed and started
// again every such task reaches its terminal. Terminals are strict, and the only repeat
// allowed is a resend of the command in flight at the kill: each terminal counts at most
// one duplicate (the agent writes its journal out before every send: agent/dispatch.go).
// The retry interval is far above the terminals' 3ms acks, so that a retry under load
// cannot pass for a repeat.
func TestSIGKILLLosesNothingAcknowledged(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the agent")
	}
	dir := t.TempDir()
	addr := testutil.FreeAddr(t)
	ids := []string{"k1", "k2", "k3", "k4"}
	cfgPath := writeEmbeddedConfig(t, dir, "gw-k", addr, ids, 3*time.Second, "[journal]\nsync = \"always\"\n")

	p := startAgent(t, cfgPath)
	p.waitLog(runningRe, 0)
	fleet := startStrictFleet(t, "mqtt://"+addr, ids, 11, 3*time.Millisecond)
	defer fleet.Close()

	// The back office publishes tasks one at a time and records each PUBACK.
	const total = 400
	var mu sync.Mutex
	acked := map[int]bool{}
	half := make(chan struct{})
	pubDone := make(chan struct{})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	bo := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := bo.Connect(ctx, &paho.Connect{ClientID: "bo-kill", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(pubDone)
		for i := range total {
			task := fmt.Sprintf(`{"taskId":"k-%d","deviceId":%q,"op":"AddPerson","person":{"id":"p%d"}}`, i, ids[i%len(ids)], i)
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := bo.Publish(pctx, &paho.Publish{Topic: "faceagent/gw-k/tasks", QoS: 1, Payload: []byte(task)})
			pcancel()
			if err != nil {
				return // the agent was killed: this one and the rest are not ours
			}
			mu.Lock()
			acked[i] = true
			if len(acked) == total/2 {
				close(half)
			}
			mu.Unlock()
		}
	}()
	select {
	case <-half:
	case <-pubDone:
		t.Fatal("publisher stopped before the kill")
	case <-ctx.Done():
		t.Fatal("no progress")
	}
	p.kill()
	<-pubDone
	_ = bo.Disconnect(&paho.Disconnect{})
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	if n >= total {
		t.Fatalf("the kill came too late: all %d tasks acknowledged", n)
	}

	p = startAgent(t, cfgPath)
	p.waitLog(runningRe, 0)
	// Every acknowledged task's person must reach its terminal's whitelist.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := 0
		have := map[string]map[string]bool{}
		for _, id := range ids {
			have[id] = map[string]bool{}
			for _, person := range fleet.Terminal(id).Persons() {
				have[id][person.ID] = true
			}
		}
		mu.Lock()
		for i := range acked {
			if !have[ids[i%len(ids)]][fmt.Sprintf("p%d", i)] {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("%d of %d acknowledged tasks never reached their terminals\n%s", missing, n, p.log())
		}
	}
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM after restart: exit %d\n%s", code, p.log())
	}
	dups := checkOneDuplicatePerKill(t, fleet, 1)
	t.Logf("%d of %d tasks acknowledged before SIGKILL; all delivered after the restart; %d duplicates", n, total, dups)
}

// The same boundary with an external broker (Debian's mosquitto): the agent acknowledges a
// task to the broker only after the journal append, its session persists, so after a
// SIGKILL the broker delivers again what the agent had not acknowledged, and
// every task the back office got a PUBACK for reaches its terminal. The terminals stay
// connected to mosquitto throughout; each counts at most one duplicate, the command in
// flight at the kill (the retry interval is far above their acks, as above).
func TestSIGKILLExternalUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts the agent")
	}
	m := testutil.StartMosquitto(t)
	dir := t.TempDir()
	ids := []string{"e1", "e2"}
	cfg := fmt.Sprintf("[agent]\ngateway_id = \"gw-e\"\ndata_dir = %q\n[upstream]\nurl = %q\nsession_expiry = \"1h\"\nreconnect_max = \"300ms\"\n"+
		"[store]\nrequest_timeout = \"200ms\"\n[dispatch]\nretry_interval = \"3s\"\nheartbeat_timeout = \"10s\"\n",
		filepath.Join(dir, "data"), m.URL)
	for _, id := range ids {
		cfg += fmt.Sprintf("[[devices]]\nid = %q\n", id)
	}
	cfgPath := writeFile(t, dir, "agent.toml", cfg)
	subscribed := regexp.MustCompile(`msg="upstream connected"`)
	p := startAgent(t, cfgPath)
	p.waitLog(subscribed, 0)
	fleet := startStrictFleet(t, m.URL, ids, 13, 2*time.Millisecond)
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn, err := net.Dial("tcp", m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	bo := paho.NewClient(paho.ClientConfig{Conn: conn})
	if _, err := bo.Connect(ctx, &paho.Connect{ClientID: "bo-ext", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer bo.Disconnect(&paho.Disconnect{})
	const total = 300
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			task := fmt.Sprintf(`{"taskId":"e-%d","deviceId":%q,"op":"AddPerson","person":{"id":"p%d"}}`, i, ids[i%len(ids)], i)
			if _, err := bo.Publish(ctx, &paho.Publish{Topic: "faceagent/gw-e/tasks", QoS: 1, Payload: []byte(task)}); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	publish(0, total/2)
	p.kill()
	// While the agent is dead the broker queues for its persistent session.
	publish(total/2, total)
	p = startAgent(t, cfgPath)
	p.waitLog(subscribed, 0)

	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := 0
		for _, id := range ids {
			have := map[string]bool{}
			for _, person := range fleet.Terminal(id).Persons() {
				have[person.ID] = true
			}
			for i := range total {
				if ids[i%len(ids)] == id && !have[fmt.Sprintf("p%d", i)] {
					missing++
				}
			}
		}
		if missing == 0 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("%d of %d tasks never reached their terminals\n%s", missing, total, p.log())
		}
	}
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, p.log())
	}
	checkOneDuplicatePerKill(t, fleet, 1)
}

// checkOneDuplicatePerKill fails t for every terminal of fleet that received more
// duplicates (a messageId it had seen before) than there were kills: a kill may repeat the
// command in flight, and nothing else. It returns the duplicates of all terminals.
func checkOneDuplicatePerKill(t *testing.T, fleet *sim.Fleet, kills int) int {
	t.Helper()
	total := 0
	for _, s := range fleet.Stats() {
		total += s.Duplicates
		if s.Duplicates > kills {
			t.Errorf("terminal %s received %d duplicates after %d kills: more than the command in flight at each", s.DeviceID, s.Duplicates, kills)
		}
	}
	return total
}

// Reports survive a SIGKILL: a back office with a persistent session on the embedded
// broker (sessions kept in data_dir) gets a result for every task, although the agent is
// killed half way through — results queued for it are kept by the broker, and results not
// yet marked reported are published again after the restart.
func TestResultsSurviveSIGKILL(t *testing.T) {
	dir := t.TempDir()
	addr := testutil.FreeAddr(t)
	ids := []string{"q1", "q2"}
	cfgPath := writeEmbeddedConfig(t, dir, "gw-q", addr, ids, 300*time.Millisecond, "")
	p := startAgent(t, cfgPath)
	p.waitLog(runningRe, 0)
	fleet, err := sim.StartMQTT("mqtt://"+addr, ids, sim.Options{
		Seed: 14, AckLatency: sim.Latency{Kind: sim.Fixed, A: 5 * time.Millisecond}, HeartbeatInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var mu sync.Mutex
	got := map[string]bool{}
	changed := make(chan struct{}, 1)
	connect := func(clean bool) *paho.Client {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c := paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) {
				var r struct {
					TaskID string `json:"taskId"`
				}
				_ = json.Unmarshal(pr.Packet.Payload, &r)
				mu.Lock()
				got[r.TaskID] = true
				mu.Unlock()
				select {
				case changed <- struct{}{}:
				default:
				}
				return true, nil
			}}})
		expiry := uint32(3600)
		ack, err := c.Connect(ctx, &paho.Connect{ClientID: "bo-persistent", KeepAlive: 30, CleanStart: clean,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
		if err != nil {
			t.Fatal(err)
		}
		if !clean && !ack.SessionPresent {
			t.Fatal("the broker lost the back office's session across the restart")
		}
		return c
	}
	bo := connect(true)
	if _, err := bo.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "faceagent/gw-q/results", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	const total = 400
	var b strings.Builder
	b.WriteByte('[')
	for i := range total {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"taskId":"q-%d","deviceId":%q,"op":"AddPerson","person":{"id":"p%d"}}`, i, ids[i%2], i)
	}
	b.WriteByte(']')
	if _, err := bo.Publish(ctx, &paho.Publish{Topic: "faceagent/gw-q/tasks", QoS: 1, Payload: []byte(b.String())}); err != nil {
		t.Fatal(err)
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	for count() < total/4 {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("no results")
		}
	}
	p.kill()
	<-bo.Done()
	if n := count(); n >= total {
		t.Fatalf("the kill came too late: %d results", n)
	}
	p = startAgent(t, cfgPath)
	p.waitLog(runningRe, 0)
	bo = connect(false)
	defer bo.Disconnect(&paho.Disconnect{})
	for count() < total {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("%d of %d results after the restart\n%s", count(), total, p.log())
		}
	}
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
}

// writeEmbeddedConfig writes dir/agent.toml for the SIGKILL tests on the embedded broker:
// gateway gw, broker on addr, data in dir/data, the given retry interval, a 10s heartbeat
// timeout, extra (more sections, or "") and one [[devices]] entry per id. It returns the
// path. The terminals heartbeat every 100 ms; the long timeout keeps a stall of the loaded
// machine from taking a terminal offline, which would put its command back in the queue and
// send it again in the same life: a repeat the strict kill rule would blame on the kill.
func writeEmbeddedConfig(t *testing.T, dir, gw, addr string, ids []string, retry time.Duration, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf("[agent]\ngateway_id = %q\ndata_dir = %q\n[broker]\nlisten = %q\n"+
		"[dispatch]\nretry_interval = %q\nheartbeat_timeout = \"10s\"\n",
		gw, filepath.Join(dir, "data"), addr, retry.String())
	cfg += extra
	for _, id := range ids {
		cfg += fmt.Sprintf("[[devices]]\nid = %q\n", id)
	}
	return writeFile(t, dir, "agent.toml", cfg)
}

// startStrictFleet connects simulated terminals ids to the broker at url: fixed ack
// latency, 100ms heartbeats, strict (any repeat but a resend of the command in flight is
// reported to t as an error). The caller closes the fleet.
func startStrictFleet(t *testing.T, url string, ids []string, seed uint64, ack time.Duration) *sim.Fleet {
	t.Helper()
	fleet, err := sim.StartMQTT(url, ids, sim.Options{
		Seed: seed, AckLatency: sim.Latency{Kind: sim.Fixed, A: ack},
		HeartbeatInterval: 100 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return fleet
}

// kill ends the agent with SIGKILL and waits until it has gone and its log is drained.
func (p *agentProc) kill() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.done
	_ = p.cmd.Wait()
}
