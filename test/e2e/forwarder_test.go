package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/upstream"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// The tests here put the forward log (report.Forwarder) together with a real upstream
// part by hand, without a whole agent: upstream.Dial against mosquitto, or the embedded
// broker's Publisher, so a test can stop the broker or stall a subscriber at a chosen ack.

// Acks forwarded while the external broker (mosquitto) is stopped stay in the forward log
// and are delivered in order, once each at least, when it is back — heartbeats coalesced
// to the latest. A proxy holds the forwarder's reconnect until the back office has
// subscribed to the restarted broker again (mosquitto here keeps no sessions across a
// restart).
func TestForwardedAcksSurviveUpstreamOutage(t *testing.T) {
	m := testutil.StartMosquitto(t)
	proxy := testutil.StartDelayProxy(t, m.Addr, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := metrics.NewRegistry()
	fm := report.NewForwardMetrics(reg)
	connected := make(chan struct{})
	// Nobody publishes tasks here: the taker, opened on no outbox, would refuse them.
	tasks := intake.NewTaker(intake.Options{MaxBatch: 1000, MaxMessageSize: 1 << 20, Devices: []string{"o1"}, Logger: quietLog}, nil)
	uc, err := upstream.Dial(ctx, &upstream.Options{
		URL:            "mqtt://" + proxy.Addr(),
		ClientID:       "faceagent-gw-o",
		KeepAlive:      30 * time.Second,
		ConnectTimeout: 10 * time.Second,
		SessionExpiry:  24 * time.Hour,
		ReconnectMax:   200 * time.Millisecond,
		PublishWindow:  64,
		TasksTopic:     wire.GatewayTopics("gw-o").Tasks,
		Tasks:          tasks,
		Connected:      connected,
		Metrics:        upstream.NewMetrics(reg),
		Logger:         quietLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = uc.Close(sctx)
	}()
	select {
	case <-connected:
	case <-time.After(20 * time.Second):
		t.Fatal("never connected upstream")
	}
	const prefix = "faceagent/gw-o/devices/"
	f := openForwarder(t, journal.Options{Sync: journal.SyncAlways}, prefix, fm)
	defer f.Close()
	fctx, fcancel := context.WithCancel(ctx)
	defer func() { fcancel(); f.Wait() }()
	f.Start(fctx, uc)

	sub := subscribeForwarded(t, m.Addr, "gw-o")
	f.Ack("o1", testAck(0))
	if got, want := sub.waitFirst(1)[0], ackLine(prefix, "o1", 0); got != want {
		t.Fatalf("first ack arrived as %q, want %q", got, want)
	}
	waitFor(t, "the first ack marked reported", func() bool { return fm.Backlog.Value() == 0 }, f.reported)
	sub.close()

	proxy.Hold()
	m.Stop()
	for i := 1; i <= 20; i++ {
		f.Ack("o1", testAck(i))
		if i%5 == 0 {
			f.Heartbeat("o1", testHeartbeat("o1", i))
		}
	}
	want := published(prefix, forwardBacklog(f.Forwarder))
	if len(want) != 21 { // 20 acks and the latest heartbeat (the broker took none of them)
		t.Fatalf("backlog during the outage: %q", want)
	}
	m.Restart()
	sub = subscribeForwarded(t, m.Addr, "gw-o")
	proxy.Release()
	if got := sub.waitFirst(len(want)); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("delivered after the outage\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	waitFor(t, "the backlog to empty", func() bool { return fm.Backlog.Value() == 0 }, f.reported)
	if n := fm.Coalesced.Value(); n != 3 {
		t.Errorf("coalesced %d heartbeats, want 3", n)
	}
}

// With the embedded broker, forwarded acks for a subscriber whose write queue is full are
// held in its session (mqtt.QuotaWritesHeld), not dropped, and nobody publishes them again:
// the subscriber that stopped reading gets every ack exactly once, in order, once it reads
// again.
func TestForwardedAcksForAFullQueueAreHeldNotDropped(t *testing.T) {
	br, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true,
		MaxPendingWrites: 4, MaxPendingWriteBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	const prefix = "faceagent/gw-e/devices/"
	fm := report.NewForwardMetrics(metrics.NewRegistry())
	stalled := dialRawSubscriber(t, br.Addr(), "stalled", prefix+"+/ack")
	f := openForwarder(t, journal.Options{Sync: journal.SyncNone}, prefix, fm)
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); f.Wait() }()
	f.Start(ctx, br.Publisher())

	n := 0
	for br.Dropped(mqtt.QuotaWritesHeld) == 0 {
		if n >= 20000 {
			t.Fatalf("no forwarded ack held after %d: the test proves nothing", n)
		}
		f.Ack("e1", testAck(n))
		n++
		if n%256 == 0 { // let the publisher catch up (and the subscriber's queue fill)
			waitFor(t, "the backlog to empty", func() bool { return fm.Backlog.Value() == 0 }, f.reported)
		}
	}
	waitFor(t, "the backlog to empty", func() bool { return fm.Backlog.Value() == 0 }, f.reported)
	t.Logf("first held after %d acks; %d held", n, br.Dropped(mqtt.QuotaWritesHeld))
	for next := 0; next < n; {
		pk := stalled.read(t)
		if pk.FixedHeader.Type != packets.Publish {
			continue
		}
		if pk.FixedHeader.Qos > 0 {
			stalled.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID, ProtocolVersion: 4})
		}
		var a face.Ack
		if err := json.Unmarshal(pk.Payload, &a); err != nil {
			t.Fatalf("forwarded ack %s: %v", pk.Payload, err)
		}
		var i int
		if _, err := fmt.Sscanf(a.MessageID, "AddPerson-%d-1", &i); err != nil {
			t.Fatalf("forwarded ack %s: %v", pk.Payload, err)
		}
		if i != next {
			t.Fatalf("ack %d arrived where ack %d was due", i, next)
		}
		next++
	}
	if d := br.DroppedMessages(); d != 0 {
		t.Errorf("%d messages dropped", d)
	}
}

var quietLog = slog.New(slog.DiscardHandler)

// eventedForwarder is a forward log with its backlog's events on a channel.
type eventedForwarder struct {
	*report.Forwarder
	reported chan struct{} // poked on every backlog event
}

// openForwarder opens a forward log in a new temporary directory.
func openForwarder(t *testing.T, jo journal.Options, prefix string, m *report.ForwardMetrics) *eventedForwarder {
	t.Helper()
	f := &eventedForwarder{reported: make(chan struct{}, 1)}
	fwd, err := report.OpenForwarder(t.TempDir(), report.ForwardOptions{Journal: jo, Prefix: prefix, Metrics: m,
		Logger: quietLog, Observe: func(backlog.Event) { poke(f.reported) }})
	if err != nil {
		t.Fatal(err)
	}
	f.Forwarder = fwd
	return f
}

func testAck(n int) face.Ack { return face.Ack{MessageID: fmt.Sprintf("AddPerson-%d-1", n)} }

func testHeartbeat(device string, persons int) face.Heartbeat {
	return face.Heartbeat{DeviceID: device, Time: "2026-11-22T14:00:00Z", Firmware: "1.0", Persons: persons}
}

// ackLine is testAck(n) as a subscriber to prefix sees it: "topic payload".
func ackLine(prefix, device string, n int) string {
	a := testAck(n)
	b, _ := a.AppendJSON(nil)
	return prefix + device + "/ack " + string(b)
}
