package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// A back office that stops reading costs only itself. One subscribes to everything ('#',
// a kept session) and never reads after its SUBACK; another, healthy, subscribes to the
// results. Batches of tasks whose commands carry half a kilobyte each flow through four
// terminals: the stuck one's socket, then its queue of pending writes (a short one,
// max_pending_write_bytes 4 KiB: a few messages), then its session fill up. The healthy back office must get
// every batch's results within batchDeadline of submitting it (an agent that published a
// result again to everyone because one subscriber's queue was full stalled them 9–15 s a
// round, with a backoff up to 30 s), each result once; and what the broker holds for the
// stuck one stays within its bounds. What one client holds is agent/broker's to measure
// (TestStuckSubscriberCostsOnlyItself there); here /metrics shows it: messages held back
// from its full write queue, dropped at its full session, and the broker's queued bytes,
// nearly all of them the stuck session's, at max_session_bytes and no more.
func TestStuckBackOfficeStallsNoOne(t *testing.T) {
	const (
		batches       = 12
		batchSize     = 250
		batchDeadline = 4 * time.Second
		sessionBytes  = 1 << 20
		// What the other sessions hold at the end: the healthy back office's and the
		// terminals' subscriptions (a few KB) and messages not yet acknowledged.
		othersBytes = 64 << 10
	)
	ids := []string{"s1", "s2", "s3", "s4"}
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-s\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"max_pending_write_bytes = \"4KiB\"\nmax_session_bytes = %d\nmax_queued_bytes = %d\n"+
		"[journal]\nsync = \"none\"\n[dispatch]\nretry_interval = \"2s\"\nheartbeat_timeout = \"5s\"\n", t.TempDir(), sessionBytes, 4*sessionBytes)
	for _, id := range ids {
		src += fmt.Sprintf("[[devices]]\nid = %q\n", id)
	}
	addr, a, stop := startAgentFull(t, parse(t, src))
	defer stop()
	stuck := connectRawSubscriber(t, addr, packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: false, Keepalive: 600, ClientIdentifier: "stuck"}, "#")
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
	text := scrape(t, a)
	value := func(series string) float64 {
		v, ok := seriesValue(text, series)
		if !ok {
			t.Fatalf("/metrics lacks %s", series)
		}
		return v
	}
	held, droppedSession := value("faceagent_broker_held_total"), value(`faceagent_broker_dropped_total{reason="session_bytes"}`)
	queued := value("faceagent_broker_queued_bytes")
	t.Logf("%d tasks in %d batches; slowest batch %v; held %v, dropped %v (session_bytes %v, queued_bytes %v); queued bytes %v",
		submitted, batches, slowest.Round(time.Millisecond), held, brokerDropped(t, a), droppedSession,
		value(`faceagent_broker_dropped_total{reason="queued_bytes"}`), queued)

	// The stuck one is bounded: what waits for its writer (held back once its queue of
	// pending writes is full) and what its session holds (filled up, and no more).
	if held == 0 {
		t.Error("nothing held back from the stuck client's write queue: the test did not fill it")
	}
	if droppedSession == 0 {
		t.Error("nothing dropped for the stuck session: the test did not fill it")
	}
	if queued > sessionBytes+othersBytes || queued < sessionBytes/2 {
		t.Errorf("the broker's sessions hold %v bytes; want the stuck one's filled up to max_session_bytes (%d) and no more, beside at most %d of the others'",
			queued, sessionBytes, othersBytes)
	}
	stuck.conn.Close()
}
