package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// A back office that stops reading costs only itself. One subscribes to everything ('#',
// a kept session) and never reads after its SUBACK; another, healthy, subscribes to the
// results. Batches of tasks whose commands carry half a kilobyte each flow through four terminals:
// the stuck one's socket, then its queue of pending writes, then its session fill up. The
// healthy back office must get every batch's results within batchDeadline of submitting it
// (an agent that published a result again to everyone because one subscriber's queue was
// full stalled them 9–15 s a round, with a backoff up to 30 s), each result once; and what
// the broker holds for the stuck one stays within its bounds.
func TestStuckBackOfficeStallsNoOne(t *testing.T) {
	const (
		batches       = 12
		batchSize     = 250
		batchDeadline = 4 * time.Second
		sessionBytes  = 1 << 20
	)
	ids := []string{"s1", "s2", "s3", "s4"}
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-s\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"max_session_bytes = %d\nmax_queued_bytes = %d\n"+
		"[journal]\nsync = \"none\"\n[dispatch]\nretry_interval = \"2s\"\nheartbeat_timeout = \"5s\"\n", t.TempDir(), sessionBytes, 4*sessionBytes)
	for _, id := range ids {
		src += fmt.Sprintf("[[devices]]\nid = %q\n", id)
	}
	cfg, err := config.Parse("s.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, a, stop := startAgentWith(t, cfg, func(a *Agent) {
		a.tuneBroker = func(b *broker.Broker) {
			// A short queue, so the stuck client's fills after a few messages.
			b.Server().Options.Capabilities.MaximumClientWritesPending = 4
		}
	})
	defer stop()
	stuck := dialStuckSubscriber(t, addr, "stuck", "#")
	fleet, err := sim.StartMQTT("mqtt://"+addr, ids, sim.Options{Seed: 9, HeartbeatInterval: 200 * time.Millisecond, Strict: true,
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
	healthy := connectBackOffice(t, addr, "gw-s")

	name := strings.Repeat("n", face.MaxTextLen)
	submitted := 0
	var slowest time.Duration
	for b := range batches {
		batch := make([]wire.Task, 0, batchSize)
		for range batchSize {
			batch = append(batch, wire.Task{TaskID: fmt.Sprintf("s-%d", submitted), DeviceID: ids[submitted%len(ids)],
				Op: face.AddPerson, Person: face.Person{ID: fmt.Sprint(submitted), Name: name}})
			submitted++
		}
		msg, _ := json.Marshal(batch)
		start := time.Now()
		healthy.publish("faceagent/gw-s/tasks", msg)
		want := submitted
		healthy.waitFor(fmt.Sprintf("batch %d's results", b), 60*time.Second, func() bool { return len(healthy.results) == want })
		took := time.Since(start)
		slowest = max(slowest, took)
		if took > batchDeadline {
			t.Errorf("batch %d: the healthy back office got its %d results after %v (deadline %v)", b, batchSize, took.Round(time.Millisecond), batchDeadline)
		}
	}
	t.Logf("%d tasks in %d batches; slowest batch %v; held %d, dropped %d (session_bytes %d, queued_bytes %d) for the stuck one",
		submitted, batches, slowest.Round(time.Millisecond), a.broker.Dropped(mqtt.QuotaWritesHeld), a.broker.DroppedMessages(),
		a.broker.Dropped(mqtt.QuotaSessionBytes), a.broker.Dropped(mqtt.QuotaQueuedBytes))

	// The stuck one is bounded: what waits for its writer and what its session holds.
	cl, ok := a.broker.Server().Clients.Get("stuck")
	if !ok {
		t.Fatal("the stuck back office is gone")
	}
	if n, limit := cl.PendingWriteBytes(), int64(cfg.Broker.MaxPendingWriteBytes)+int64(cfg.Broker.MaxPacketSize)+mqtt.MessageOverhead; n > limit {
		t.Errorf("stuck client's pending writes: %d bytes, bound %d", n, limit)
	}
	if n := cl.SessionBytes(); n > sessionBytes || n < sessionBytes/2 {
		t.Errorf("stuck client's session holds %d bytes; want it filled up to max_session_bytes (%d) and no more", n, sessionBytes)
	}
	if a.broker.Dropped(mqtt.QuotaSessionBytes) == 0 {
		t.Error("nothing dropped for the stuck session: the test did not fill it")
	}
	stuck.conn.Close()
}

// dialStuckSubscriber connects an MQTT 3.1.1 client with a kept session (clean session
// off) on a bare TCP connection, subscribes to filter with QoS 1, and reads nothing after
// the SUBACK.
func dialStuckSubscriber(t *testing.T, addr, clientID, filter string) *rawSubscriber {
	t.Helper()
	return connectRawSubscriber(t, addr, packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: false, Keepalive: 600, ClientIdentifier: clientID}, filter)
}
