package e2e

import (
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
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// With the embedded broker a task message whose deadletters do not fit in the backlog
// ([intake] max_deadletter_bytes) is not acknowledged: MQTT5 gets PUBACK 0x83 (send it
// again), MQTT 3.1.1 no PUBACK and a disconnect. Messages without refused tasks are taken
// meanwhile; once there is room (the bound raised, the agent restarted on the same data)
// the same message is taken and its deadletter delivered.
func TestEmbeddedIntakeRefusesOverTheDeadLetterBound(t *testing.T) {
	dir := t.TempDir()
	config := func(deadLetterBytes string) string {
		return fmt.Sprintf("[agent]\ngateway_id = \"gw-f\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
			"[journal]\nsync = \"none\"\n[intake]\nmax_message_size = \"1KiB\"\nmax_deadletter_bytes = %q\n[[devices]]\nid = \"f1\"\n", dir, deadLetterBytes)
	}
	// A task for an unknown terminal, 1,000 bytes: within max_message_size, but its
	// deadletter (the task and the reason) is larger than a 1 KiB backlog.
	bad := []byte(`{"taskId":"f-bad","deviceId":"nope","op":"AddPerson","person":{"id":"1"},"note":""}`)
	bad = bytes.Replace(bad, []byte(`"note":""`), []byte(`"note":"`+strings.Repeat("x", 1000-len(bad))+`"`), 1)
	if len(bad) != 1000 {
		t.Fatalf("the bad task is %d bytes", len(bad))
	}
	addr, a, stop := startAgentFull(t, parse(t, config("1KiB")))
	bo := connectBackOffice(t, addr, "gw-f")
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
	if got := metric(t, a, "faceagent_deadletter_backlog_refusals_total"); got != 2 {
		t.Errorf("refusals counted %v, want 2", got)
	}
	if got := metric(t, a, "faceagent_tasks_accepted_total"); got != 1 {
		t.Errorf("tasks accepted %v, want 1 (the good one)", got)
	}
	stop()

	addr, _, stop = startAgentFull(t, parse(t, config("4MiB")))
	bo = connectBackOffice(t, addr, "gw-f")
	bo.publish("faceagent/gw-f/tasks", bad) // the redelivery
	bo.waitFor("the deadletter", 10*time.Second, func() bool { return len(bo.dead) == 1 })
	bo.mu.Lock()
	d := bo.dead[0]
	bo.mu.Unlock()
	if b, _ := json.Marshal(d); len(b) <= 1<<10 || !bytes.Contains(d.Payload, []byte(`"f-bad"`)) {
		t.Errorf("deadletter of %d bytes, %s: want the bad task's, over 1 KiB", len(b), b)
	}
	stop()
}

// [reports] max_forwarded holds: while the upstream broker is away, a terminal's acks wait
// in the forward backlog up to the bound, and past it the oldest are dropped and counted.
// The terminal is on the embedded broker, the tasks come from the HTTP intake, and the
// upstream is a port nothing listens on.
func TestForwardBacklogHoldsItsConfiguredBound(t *testing.T) {
	const tasks, bound = 10, 4
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := l.Addr().String()
	l.Close()
	var served atomic.Bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var list []wire.Task
		if r.URL.Query().Get("page") == "1" && !served.Swap(true) {
			for i := range tasks {
				list = append(list, wire.Task{TaskID: fmt.Sprintf("w-%d", i), DeviceID: "w1", Op: face.AddPerson, Person: face.Person{ID: fmt.Sprint(i)}})
			}
		}
		_ = json.NewEncoder(w).Encode(append([]wire.Task{}, list...))
	}))
	defer api.Close()
	cfg := parse(t, fmt.Sprintf(`[agent]
gateway_id = "gw-w"
data_dir = %q
[broker]
listen = "127.0.0.1:0"
[upstream]
url = "mqtt://%s"
reconnect_max = "1s"
[journal]
sync = "none"
[reports]
max_forwarded = %d
[store]
request_timeout = "200ms"
[intake.http]
url = %q
page_size = %d
interval = "1h"
[[devices]]
id = "w1"
heartbeat = false
`, t.TempDir(), upstream, bound, api.URL, tasks))
	addr, a, stop := startAgentFull(t, cfg)
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"w1"}, sim.Options{Seed: 3, Strict: true,
		OnViolation: func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	// Every ack is in the backlog or dropped; the terminal's heartbeat on connecting is
	// forwarded too (it coalesces, and is never dropped).
	const dropped = `faceagent_forward_dropped_total{reason="bound"}`
	pollUntil(t, "every ack forwarded or dropped", func() bool {
		text := scrape(t, a)
		n, _ := seriesValue(text, "faceagent_forward_backlog")
		d, _ := seriesValue(text, dropped)
		return n+d >= tasks && fleet.Stats()[0].Acked == tasks
	})
	if n := metric(t, a, "faceagent_forward_backlog"); n != bound {
		t.Errorf("forward backlog %v, want the bound %d", n, bound)
	}
	if d := metric(t, a, dropped); d < tasks-bound {
		t.Errorf("acks dropped for the bound: %v, want at least %d", d, tasks-bound)
	}
	stop()
}
