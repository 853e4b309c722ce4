package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/upstream"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// forwardSubscriber is a back office on mosquitto that keeps every forwarded ack and
// heartbeat as "topic payload", in arrival order.
type forwardSubscriber struct {
	t       *testing.T
	c       *paho.Client
	mu      sync.Mutex
	got     []string
	changed chan struct{}
}

func subscribeForwarded(t *testing.T, addr, gw string) *forwardSubscriber {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &forwardSubscriber{t: t, changed: make(chan struct{}, 1)}
	s.c = paho.NewClient(paho.ClientConfig{Conn: conn, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) {
			s.mu.Lock()
			s.got = append(s.got, pr.Packet.Topic+" "+string(pr.Packet.Payload))
			s.mu.Unlock()
			poke(s.changed)
			return true, nil
		}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.c.Connect(ctx, &paho.Connect{ClientID: "forward-watcher", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	prefix := "faceagent/" + gw + "/devices/+/"
	if _, err := s.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: prefix + "ack", QoS: 1}, {Topic: prefix + "heartbeat", QoS: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

func (s *forwardSubscriber) close() {
	_ = s.c.Disconnect(&paho.Disconnect{})
	<-s.c.Done()
}

// waitFirst waits until the messages received, each counted once (QoS 1 is at least
// once), number n, and returns them in the order of their first arrival.
func (s *forwardSubscriber) waitFirst(n int) []string {
	s.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		s.mu.Lock()
		var first []string
		seen := map[string]bool{}
		for _, m := range s.got {
			if !seen[m] {
				seen[m] = true
				first = append(first, m)
			}
		}
		s.mu.Unlock()
		if len(first) >= n {
			return first
		}
		select {
		case <-s.changed:
		case <-deadline:
			s.t.Fatalf("received %d of %d forwarded messages: %q", len(first), n, first)
		}
	}
}

// published turns backlog entries ("A dev payload") into what a subscriber sees.
func published(prefix string, backlog []string) []string {
	out := make([]string, len(backlog))
	for i, e := range backlog {
		kind, rest, _ := strings.Cut(e, " ")
		dev, payload, _ := strings.Cut(rest, " ")
		sub := "/ack "
		if kind == "H" {
			sub = "/heartbeat "
		}
		out[i] = prefix + dev + sub + payload
	}
	return out
}

// Acks forwarded while the external broker (mosquitto) is stopped stay in the forward log
// and are delivered in order, once each at least, when it is back — heartbeats coalesced
// to the latest. A proxy holds the agent's reconnect until the back office has subscribed
// to the restarted broker again (mosquitto here keeps no sessions across a restart).
func TestForwardedAcksSurviveUpstreamOutage(t *testing.T) {
	m := testutil.StartMosquitto(t)
	proxy := testutil.StartDelayProxy(t, m.Addr, 0)
	cfg, err := config.Parse("o.toml", []byte(fmt.Sprintf("[agent]\ngateway_id = \"gw-o\"\ndata_dir = %q\n"+
		"[upstream]\nurl = \"mqtt://%s\"\nreconnect_max = \"200ms\"\n[[devices]]\nid = \"o1\"\n", t.TempDir(), proxy.Addr())), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mt := testMetrics()
	connected := make(chan struct{})
	uo := upstreamOptions(cfg, newTaker(cfg, nil, quietLog), mt, quietLog)
	uo.Connected = connected
	uc, err := upstream.Dial(ctx, uo)
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
	f := openE2EForwarder(t, journal.Options{Sync: journal.SyncAlways}, prefix, mt)
	defer f.Close()
	fctx, fcancel := context.WithCancel(ctx)
	defer func() { fcancel(); f.Wait() }()
	f.Start(fctx, uc)

	sub := subscribeForwarded(t, m.Addr, "gw-o")
	f.Ack("o1", testAck(0))
	if got, want := sub.waitFirst(1)[0], strings.Replace(ackLine("o1", 0), testForwardPrefix, prefix, 1); got != want {
		t.Fatalf("first ack arrived as %q, want %q", got, want)
	}
	waitFor(t, "the first ack marked reported", func() bool { return mt.forward.Backlog.Value() == 0 }, f.reported)
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
	waitFor(t, "the backlog to empty", func() bool { return mt.forward.Backlog.Value() == 0 }, f.reported)
	if n := mt.forward.Coalesced.Value(); n != 3 {
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
	mt := testMetrics()
	stalled := dialRawSubscriber(t, br.Addr(), "stalled", prefix+"+/ack")
	f := openE2EForwarder(t, journal.Options{Sync: journal.SyncNone}, prefix, mt)
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
			waitFor(t, "the backlog to empty", func() bool { return mt.forward.Backlog.Value() == 0 }, f.reported)
		}
	}
	waitFor(t, "the backlog to empty", func() bool { return mt.forward.Backlog.Value() == 0 }, f.reported)
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

// e2eForwarder is a forward log with its backlog's events on a channel.
type e2eForwarder struct {
	*report.Forwarder
	reported chan struct{} // poked on every backlog event
}

func openE2EForwarder(t *testing.T, jo journal.Options, prefix string, m *agentMetrics) *e2eForwarder {
	t.Helper()
	f := &e2eForwarder{reported: make(chan struct{}, 1)}
	fwd, err := report.OpenForwarder(t.TempDir(), report.ForwardOptions{Journal: jo, Prefix: prefix, Metrics: m.forward,
		Logger: quietLog, Observe: func(backlog.Event) { poke(f.reported) }})
	if err != nil {
		t.Fatal(err)
	}
	f.Forwarder = fwd
	return f
}

// forwardBacklog lists the forwarder's live entries as "kind device payload".
func forwardBacklog(f *report.Forwarder) []string {
	var out []string
	for _, e := range f.Backlog().Entries() {
		out = append(out, fmt.Sprintf("%c %s %s", e.Kind, e.Key, e.Payload))
	}
	return out
}

const testForwardPrefix = "faceagent/gw/devices/"

func testAck(n int) face.Ack { return face.Ack{MessageID: fmt.Sprintf("AddPerson-%d-1", n)} }

func testHeartbeat(device string, persons int) face.Heartbeat {
	return face.Heartbeat{DeviceID: device, Time: "2026-11-22T14:00:00Z", Firmware: "1.0", Persons: persons}
}

func ackLine(device string, n int) string {
	a := testAck(n)
	b, _ := a.AppendJSON(nil)
	return testForwardPrefix + device + "/ack " + string(b)
}
