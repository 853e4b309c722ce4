package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// A deadletter produced while the upstream broker (mosquitto) is down is journalled, and
// delivered by the next run of the agent once the broker is back; a malformed task taken
// over MQTT is dead-lettered with its reason.
func TestDeadLetterSurvivesRestartWithBrokerDown(t *testing.T) {
	m := testutil.StartMosquitto(t)
	m.Stop()
	var listBad atomic.Bool
	listBad.Store(true)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if listBad.Load() {
			_, _ = io.WriteString(w, `[{"taskId":"bad-1","deviceId":"nope","op":"AddPerson","person":{"id":"1"}}]`)
			return
		}
		_, _ = io.WriteString(w, `[]`)
	}))
	defer api.Close()
	src := fmt.Sprintf(`[agent]
gateway_id = "gw-r"
data_dir = %q
[upstream]
url = %q
session_expiry = "1h"
reconnect_max = "300ms"
[store]
request_timeout = "200ms"
[intake.http]
url = %q
page_size = 10
interval = "1h"
[[devices]]
id = "r1"
`, t.TempDir(), m.URL, api.URL)
	cfg, err := config.Parse("r.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}

	_, a, stop := startAgentFull(t, cfg)
	// Intake counts a refused task once its deadletter is on disk.
	pollUntil(t, "the page's deadletter journalled", func() bool { return a.intakeM.Rejected.Value() >= 1 })
	if n := a.m.deadLetters.Backlog.Value(); n != 1 {
		t.Fatalf("deadletter backlog %v, want 1 (the broker is down)", n)
	}
	stop()

	m.Restart()
	listBad.Store(false) // the back office would list the task again; here it does not
	bo := connectBackOffice(t, m.Addr, "gw-r")
	_, a, stop = startAgentFull(t, cfg)
	bo.waitFor("the deadletter of the first run", 30*time.Second, func() bool { return len(bo.dead) == 1 })
	bo.mu.Lock()
	first := bo.dead[0]
	bo.mu.Unlock()
	if d := first; d.Reason != `task 0: unknown device "nope"` || !bytes.Contains(d.Payload, []byte(`"bad-1"`)) {
		t.Errorf("deadletter %+v (%s)", d, d.Payload)
	}
	select {
	case <-a.UpstreamConnected():
	case <-time.After(20 * time.Second):
		t.Fatal("never subscribed upstream")
	}
	bo.publish("faceagent/gw-r/tasks", []byte(`{"taskId":`))
	bo.waitFor("the malformed task's deadletter", 30*time.Second, func() bool { return len(bo.dead) == 2 })
	bo.mu.Lock()
	second := bo.dead[1]
	bo.mu.Unlock()
	if d := second; !strings.HasPrefix(d.Reason, "malformed JSON:") || string(d.Payload) != `"{\"taskId\":"` {
		t.Errorf("deadletter %+v (%s)", d, d.Payload)
	}
	pollUntil(t, "the backlog to empty", func() bool { return a.m.deadLetters.Backlog.Value() == 0 })
	stop()
}

// waitFor waits for cond, checked again on every poke of ev.
func waitFor(t *testing.T, what string, cond func() bool, ev <-chan struct{}) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-ev:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// rawSubscriber is an MQTT 3.1.1 client on a bare TCP connection, so a test decides when
// it reads: a subscriber that stops reading fills its queue in the broker.
type rawSubscriber struct {
	conn net.Conn
	r    *bufio.Reader
}

// dialRawSubscriber connects clientID with a clean session and subscribes it to filter
// with QoS 1.
func dialRawSubscriber(t *testing.T, addr, clientID, filter string) *rawSubscriber {
	t.Helper()
	return connectRawSubscriber(t, addr, packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, ClientIdentifier: clientID}, filter)
}

// connectRawSubscriber connects with connect on a new connection (closed when t ends) and
// subscribes to filter with QoS 1.
func connectRawSubscriber(t *testing.T, addr string, connect packets.ConnectParams, filter string) *rawSubscriber {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.(*net.TCPConn).SetReadBuffer(4096) // fill up sooner
	s := &rawSubscriber{conn: conn, r: bufio.NewReaderSize(conn, 512)}
	s.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4, Connect: connect})
	if pk := s.read(t); pk.FixedHeader.Type != packets.Connack || pk.ReasonCode != 0 {
		t.Fatalf("connect: %+v", pk)
	}
	s.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: 4,
		PacketID: 1, Filters: packets.Subscriptions{{Filter: filter, Qos: 1}}})
	if pk := s.read(t); pk.FixedHeader.Type != packets.Suback {
		t.Fatalf("subscribe: %+v", pk)
	}
	return s
}

func (s *rawSubscriber) write(t *testing.T, pk packets.Packet) {
	var buf bytes.Buffer
	err := brokertest.EncodeClientPacket(&buf, pk)
	if err == nil {
		_, err = s.conn.Write(buf.Bytes())
	}
	if err != nil {
		t.Errorf("raw subscriber: writing %v: %v", pk.FixedHeader.Type, err)
	}
}

func (s *rawSubscriber) read(t *testing.T) packets.Packet {
	_ = s.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	hb, err := s.r.ReadByte()
	var pk packets.Packet
	if err == nil {
		err = pk.FixedHeader.Decode(hb)
	}
	var n int
	if err == nil {
		n, _, err = packets.DecodeLength(s.r)
	}
	body := make([]byte, n)
	if err == nil {
		_, err = io.ReadFull(s.r, body)
	}
	pk.ProtocolVersion = 4
	if err == nil {
		switch pk.FixedHeader.Type {
		case packets.Publish:
			err = pk.PublishDecode(body)
		case packets.Connack:
			if len(body) == 2 {
				pk.ReasonCode = body[1]
			}
		}
	}
	if err != nil {
		t.Fatalf("raw subscriber: %v", err)
	}
	return pk
}

// The embedded broker does not drop a QoS 1 result meant for a connected subscriber whose
// write queue is full: it holds it in the subscriber's session and writes it once the
// queue is empty, and the agent publishes nothing again. A subscriber that stopped reading
// gets every result once it reads again, each once, in the order they were published.
func TestResultsForAStalledSubscriberAreHeld(t *testing.T) {
	ids := []string{"q1", "q2", "q3", "q4"}
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-q\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[journal]\nsync = \"none\"\n[dispatch]\nretry_interval = \"300ms\"\nheartbeat_timeout = \"5s\"\n", t.TempDir())
	for _, id := range ids {
		src += fmt.Sprintf("[[devices]]\nid = %q\n", id)
	}
	cfg, err := config.Parse("q.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, a, stop := startAgentWith(t, cfg, func(a *Agent) {
		a.tuneBroker = func(b *broker.Broker) {
			// A small pending-writes queue per client, so a few hundred results fill it.
			b.Server().Options.Capabilities.MaximumClientWritesPending = 4
		}
	})
	stalled := dialRawSubscriber(t, addr, "stalled", "faceagent/gw-q/results")
	fleet, err := sim.StartMQTT("mqtt://"+addr, ids, sim.Options{Seed: 5, HeartbeatInterval: 200 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	bo := connectBackOffice(t, addr, "gw-q")

	held := func() bool { return a.broker.Dropped(mqtt.QuotaWritesHeld) > 0 }
	submitted := 0
	for !held() {
		if submitted >= 20000 {
			t.Fatalf("no result held after %d tasks: the test proves nothing", submitted)
		}
		var batch []wire.Task
		for range 250 {
			batch = append(batch, wire.Task{TaskID: fmt.Sprintf("q-%d", submitted), DeviceID: ids[submitted%len(ids)],
				Op: face.AddPerson, Person: face.Person{ID: fmt.Sprint(submitted)}})
			submitted++
		}
		b, _ := json.Marshal(batch)
		bo.publish("faceagent/gw-q/tasks", b)
		bo.waitFor("the batch's results", 60*time.Second, func() bool { return len(bo.results) == submitted })
	}
	t.Logf("first held after %d tasks", submitted)

	// The stalled subscriber reads again: every result arrives once, in the order the
	// healthy back office got them (the agent publishes results in one stream).
	seen := map[string]bool{}
	for len(seen) < submitted {
		pk := stalled.read(t)
		if pk.FixedHeader.Type != packets.Publish {
			continue
		}
		r, err := wire.ParseResult(pk.Payload)
		if err != nil {
			t.Fatalf("result %s: %v", pk.Payload, err)
		}
		if seen[r.TaskID] {
			t.Fatalf("result %s arrived twice", r.TaskID)
		}
		seen[r.TaskID] = true
		if pk.FixedHeader.Qos > 0 {
			stalled.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID, ProtocolVersion: 4})
		}
	}
	if n := a.broker.DroppedMessages(); n != 0 {
		t.Errorf("%d messages dropped", n)
	}
	var exp strings.Builder
	if _, err := a.registry.WriteTo(&exp); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"faceagent_broker_held_total ", `faceagent_broker_dropped_total{reason="pending_writes"} 0`} {
		if !strings.Contains(exp.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	stop()
}

// A back office with a persistent session that is away: the broker queues its results up
// to its session's bound (max_session_bytes: about 59 messages here, results and forwarded
// acks, ~0.95 KB each beside 8.7 KB of subscriptions) and drops the newer ones for that
// session alone, counted. Nobody else waits for it: a watcher gets every result at once,
// and the returning back office gets the ones its session held, oldest first.
//
// The bound is every session's, the watcher's too, and it counts messages sent and not yet
// acknowledged: a live watcher keeps what is in flight to it within ~59 messages only if
// it acknowledges as fast as they come. Without the race detector the agent publishes a
// burst of a hundred tasks' results and acks within a few milliseconds, faster than the
// watcher in this process acknowledges them, and the broker rightly dropped the excess for
// the watcher (its own bound, not the absent session's). So the tasks go in batches whose
// results and acks (20 messages) fit in the watcher's session with room to spare, and each
// batch is waited for at the watcher: the absent session's bound is reached in the third
// batch, and the first two batches (40 messages) are surely held for it, the first
// results among them, whichever of a task's result and ack came first.
func TestResultsForAnAbsentSessionAtItsBound(t *testing.T) {
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-p\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"max_packet_size = \"64KiB\"\nmax_session_bytes = \"64KiB\"\nmax_queued_bytes = \"1MiB\"\n"+
		"[journal]\nsync = \"none\"\n[dispatch]\nretry_interval = \"300ms\"\nheartbeat_timeout = \"5s\"\n[[devices]]\nid = \"p1\"\n", t.TempDir())
	cfg, err := config.Parse("p.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	const quota = 10 // results the session surely holds: the first two batches fit
	addr, a, stop := startAgentFull(t, cfg)
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"p1"}, sim.Options{Seed: 6, HeartbeatInterval: 200 * time.Millisecond, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fleet.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	away := connectBackOfficeAs(t, addr, "gw-p", "persistent", true, 3600)
	if err := away.c.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	<-away.c.Done()
	watcher := connectBackOfficeAs(t, addr, "gw-p", "watcher", true, 0)
	const n, batch = 100, 10
	for sent := 0; sent < n; {
		for range batch {
			watcher.publish("faceagent/gw-p/tasks", fmt.Appendf(nil, `{"taskId":"p-%d","deviceId":"p1","op":"AddPerson","person":{"id":"%d"}}`, sent, sent))
			sent++
		}
		watcher.waitFor("every result and ack of the batch at the watcher", 30*time.Second, func() bool {
			return len(watcher.results) == sent && watcher.acks >= sent
		})
	}
	if a.broker.Dropped(mqtt.QuotaSessionBytes) == 0 {
		t.Fatal("nothing dropped for the absent session at its bound")
	}

	back := connectBackOfficeAs(t, addr, "gw-p", "persistent", false, 3600)
	back.waitFor("the results the session held", 30*time.Second, func() bool { return len(back.results) >= quota })
	back.mu.Lock()
	for i := range quota {
		if _, ok := back.results[fmt.Sprintf("p-%d", i)]; !ok {
			t.Errorf("the returning back office lacks result p-%d, one of the oldest", i)
		}
	}
	back.mu.Unlock()
	stop()
}

// With the embedded broker a task message whose deadletters do not fit in the backlog
// is not acknowledged: MQTT5 gets PUBACK 0x83 (send it again), MQTT 3.1.1 no PUBACK and a
// disconnect. Messages without refused tasks are taken meanwhile; once there is room the
// same message is taken and its deadletter delivered.
func TestEmbeddedIntakeRefusesOverTheDeadLetterBound(t *testing.T) {
	cfg, err := config.Parse("f.toml", []byte(fmt.Sprintf("[agent]\ngateway_id = \"gw-f\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[journal]\nsync = \"none\"\n[[devices]]\nid = \"f1\"\n", t.TempDir())), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, a, stop := startAgentFull(t, cfg)
	setBound := func(n int) {
		a.dead.Backlog().SetBounds(n, report.MaxDeadLetterBytes)
	}
	setBound(0)
	bo := connectBackOffice(t, addr, "gw-f")
	bad := []byte(`{"taskId":"f-bad","deviceId":"nope","op":"AddPerson","person":{"id":"1"}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := bo.c.Publish(ctx, &paho.Publish{Topic: "faceagent/gw-f/tasks", QoS: 1, Payload: bad})
	if err == nil || resp == nil || resp.ReasonCode != packets.ErrImplementationSpecificError.Code {
		t.Fatalf("over the bound: PUBACK %+v, err %v; want reason 0x83", resp, err)
	}
	bo.publish("faceagent/gw-f/tasks", []byte(`{"taskId":"f-good","deviceId":"f1","op":"AddPerson","person":{"id":"2"}}`))

	// MQTT 3.1.1 has no negative PUBACK: the connection is dropped instead.
	raw := dialRawSubscriber(t, addr, "v4-publisher", "faceagent/gw-f/nothing")
	var buf bytes.Buffer
	pub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: 4,
		TopicName: "faceagent/gw-f/tasks", PacketID: 7, Payload: bad}
	if err := pub.PublishEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	// mochi writes a DISCONNECT (0xe0) even to 3.1.1 clients, then closes; no PUBACK (0x40).
	_ = raw.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest, err := io.ReadAll(raw.r)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("MQTT 3.1.1 publisher was neither acknowledged nor disconnected")
	}
	if len(rest) > 0 && rest[0]>>4 != packets.Disconnect {
		t.Fatalf("MQTT 3.1.1 publisher got % x before the connection closed, want only a DISCONNECT", rest)
	}
	if got := a.m.deadLetters.Refused.Value(); got != 2 {
		t.Errorf("refusals counted %d, want 2", got)
	}

	setBound(report.MaxDeadLetters)
	bo.publish("faceagent/gw-f/tasks", bad) // the redelivery
	bo.waitFor("the deadletter", 10*time.Second, func() bool { return len(bo.dead) == 1 })
	stop()
}
