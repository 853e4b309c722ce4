package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
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

// backOffice is a paho client playing the back office: it publishes task messages with
// QoS 1 and collects results and deadletters.
type backOffice struct {
	t       testing.TB
	c       *paho.Client
	mu      sync.Mutex
	results map[string]wire.Result
	dead    []wire.DeadLetter
	acks    int
	changed chan struct{}
	// want is the condition waitFor waits on (nil: nobody waits); the message handler
	// checks it and wakes the waiter only once it holds, not at every message.
	want func() bool
}

// bufferedConn is the back office's connection: reads go through a bufio.Reader (paho
// reads packets straight from its Conn, a read syscall for the type byte, one per length
// byte and one for the rest), and each packet is written in one call. It is a sync.Locker,
// which paho takes around every packet it writes (packets.ControlPacket.WriteTo; paho
// asks a custom Conn for one, or concurrent packets interleave): the parts written while
// it is held are gathered and written when it is released. The back office plays a
// client that runs on another machine in a deployment; this keeps the harness's own
// share of this machine's CPU down without changing what the agent does.
type bufferedConn struct {
	net.Conn
	r      *bufio.Reader
	mu     sync.Mutex
	packet []byte // gathered between Lock and Unlock
	err    error  // the last failed write, returned by the next Write
}

func newBufferedConn(c net.Conn) *bufferedConn {
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, 16<<10)}
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Lock starts a packet; paho writes every packet under it.
func (c *bufferedConn) Lock() { c.mu.Lock() }

// Write gathers a part of the packet being written (called with the lock held).
func (c *bufferedConn) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	c.packet = append(c.packet, p...)
	return len(p), nil
}

// Unlock writes the gathered packet.
func (c *bufferedConn) Unlock() {
	if len(c.packet) > 0 && c.err == nil {
		_, c.err = c.Conn.Write(c.packet)
	}
	c.packet = c.packet[:0]
	c.mu.Unlock()
}

func connectBackOffice(t testing.TB, addr, gw string) *backOffice {
	t.Helper()
	return connectBackOfficeSession(t, addr, gw, 0)
}

// connectBackOfficeSession connects a back office whose session outlives the connection
// by sessionExpiry seconds (0: it ends with the connection).
func connectBackOfficeSession(t testing.TB, addr, gw string, sessionExpiry uint32) *backOffice {
	t.Helper()
	return connectBackOfficeAs(t, addr, gw, "backoffice", true, sessionExpiry)
}

// connectBackOfficeAs connects a back office as clientID; with cleanStart false it resumes
// the session the broker kept for that id.
func connectBackOfficeAs(t testing.TB, addr, gw, clientID string, cleanStart bool, sessionExpiry uint32) *backOffice {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	bo := &backOffice{t: t, results: map[string]wire.Result{}, changed: make(chan struct{}, 1)}
	prefix := "faceagent/" + gw + "/"
	bo.c = paho.NewClient(paho.ClientConfig{Conn: newBufferedConn(conn), OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) {
			bo.mu.Lock()
			switch topic := pr.Packet.Topic; {
			case topic == prefix+"results":
				r, err := wire.ParseResult(pr.Packet.Payload)
				if err != nil {
					t.Errorf("bad result %s: %v", pr.Packet.Payload, err)
				}
				bo.results[r.TaskID] = r
			case topic == prefix+"deadletter":
				d, err := wire.ParseDeadLetter(pr.Packet.Payload)
				if err != nil {
					t.Errorf("bad deadletter %s: %v", pr.Packet.Payload, err)
				}
				bo.dead = append(bo.dead, d)
			default:
				bo.acks++
			}
			wake := bo.want != nil && bo.want()
			if wake {
				bo.want = nil
			}
			bo.mu.Unlock()
			if wake {
				select {
				case bo.changed <- struct{}{}:
				default:
				}
			}
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	connect := &paho.Connect{ClientID: clientID, KeepAlive: 30, CleanStart: cleanStart}
	if sessionExpiry > 0 {
		connect.Properties = &paho.ConnectProperties{SessionExpiryInterval: &sessionExpiry}
	}
	if _, err := bo.c.Connect(ctx, connect); err != nil {
		t.Fatal(err)
	}
	// A resumed session keeps its subscriptions. (Subscribing again could fail: mochi
	// refuses a SUBSCRIBE whose packet id equals one of its own QoS 1 messages in flight.)
	if cleanStart {
		if _, err := bo.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
			{Topic: prefix + "results", QoS: 1}, {Topic: prefix + "deadletter", QoS: 1}, {Topic: prefix + "devices/+/ack", QoS: 1},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = bo.c.Disconnect(&paho.Disconnect{})
		<-bo.c.Done()
	})
	return bo
}

func (bo *backOffice) publish(topic string, payload []byte) {
	bo.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := bo.c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: payload}); err != nil {
		bo.t.Fatalf("publish: %v", err)
	}
}

// waitFor waits until cond (called under the lock) holds.
func (bo *backOffice) waitFor(what string, timeout time.Duration, cond func() bool) {
	bo.t.Helper()
	deadline := time.After(timeout)
	for {
		bo.mu.Lock()
		ok := cond()
		if !ok {
			bo.want = cond
		}
		bo.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-bo.changed:
		case <-deadline:
			bo.mu.Lock()
			defer bo.mu.Unlock()
			bo.want = nil
			bo.t.Fatalf("timed out waiting for %s: %d results, %d deadletters", what, len(bo.results), len(bo.dead))
		}
	}
}

func startAgent(t testing.TB, cfg *config.Config) (addr string, stop func()) {
	addr, _, stop = startAgentFull(t, cfg)
	return addr, stop
}

func startAgentFull(t testing.TB, cfg *config.Config) (addr string, a *Agent, stop func()) {
	t.Helper()
	return startAgentWith(t, cfg, nil)
}

// startAgentWith is startAgentFull with a hook that adjusts the Agent before Run.
func startAgentWith(t testing.TB, cfg *config.Config, adjust func(*Agent)) (addr string, a *Agent, stop func()) {
	t.Helper()
	a, err := New(&Options{Config: cfg, Version: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	if adjust != nil {
		adjust(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("agent not ready")
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent stop: %v", err)
		}
	}
	t.Cleanup(stop)
	return a.BrokerAddr(), a, stop
}

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

	var exp strings.Builder
	if _, err := a.registry.WriteTo(&exp); err != nil {
		t.Fatal(err)
	}
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
		if !strings.Contains(exp.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	stop()
}

// An external upstream broker (Debian's mosquitto), no embedded broker: tasks taken with
// manual acks after the journal append, terminals on the same broker, results published
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
	select {
	case <-a.UpstreamConnected():
	case <-time.After(20 * time.Second):
		t.Fatal("never connected upstream")
	}
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
	deadline := time.After(30 * time.Second)
	for a.m.upstream.Connects.Value() < 2 {
		select {
		case <-a.upstreamEvent:
		case <-deadline:
			t.Fatal("the agent did not reconnect to the restarted upstream broker")
		}
	}
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
	select {
	case <-a.UpstreamConnected():
	case <-time.After(20 * time.Second):
		t.Fatal("never connected upstream")
	}
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
