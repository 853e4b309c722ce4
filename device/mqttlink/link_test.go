package mqttlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"go.uber.org/goleak"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startBroker runs the embedded broker (agent/broker: the Bus the agent gives its link)
// on a free loopback port, open to every client.
func startBroker(t testing.TB) (*broker.Broker, string) {
	t.Helper()
	b, err := broker.New(&broker.Options{Listen: testutil.FreeAddr(t), AllowAnonymous: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, "mqtt://" + b.Addr()
}

// refusingBus is a Bus that refuses subscriptions, as a broker without in-process
// subscriptions would.
type refusingBus struct{ Bus }

func (refusingBus) SubscribeInline(string, int, func(string, []byte, string)) error {
	return errors.New("no in-process subscriptions")
}

func newLink(t *testing.T, cfg Config) *Link {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func startFleet(t *testing.T, brokerURL string, ids []string, opts sim.Options) *sim.Fleet {
	t.Helper()
	opts.Strict = true
	opts.OnViolation = func(id string, err error) { t.Errorf("%s: %v", id, err) }
	f, err := sim.StartMQTT(brokerURL, ids, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

func waitEvent(t *testing.T, l *Link, kind device.EventKind) device.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-l.Events():
			if !ok {
				t.Fatalf("events closed while waiting for %s", kind)
			}
			if ev.Kind == kind {
				return ev
			}
			t.Logf("skipping %s", ev)
		case <-timeout:
			t.Fatalf("no %s event", kind)
		}
	}
}

func add(id, person string) face.Command {
	return face.Command{MessageID: "AddPerson-" + person + "-" + id, Op: face.AddPerson, Person: face.Person{ID: person, Name: "n" + person}}
}

// roundTrips sends one command at a time to each terminal and waits for its ack, checking
// that acks are routed to the right device ids through the one shared connection.
func roundTrips(t *testing.T, l *Link, f *sim.Fleet, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		for _, term := range f.Terminals() {
			cmd := add(fmt.Sprint(i), fmt.Sprint(i))
			if err := l.Send(ctx, term.ID(), cmd); err != nil {
				t.Fatal(err)
			}
			ev := waitEvent(t, l, device.Ack)
			if ev.DeviceID != term.ID() || ev.Ack.MessageID != cmd.MessageID || !ev.Ack.OK() {
				t.Fatalf("ack %s, want %s from %s", ev, cmd.MessageID, term.ID())
			}
		}
	}
	for _, term := range f.Terminals() {
		if got := len(term.Persons()); got != n {
			t.Fatalf("%s has %d persons, want %d", term.ID(), got, n)
		}
	}
}

func TestInlineRoundTripsManyTerminals(t *testing.T) {
	srv, burl := startBroker(t)
	l := newLink(t, Config{Bus: srv})
	if ev := waitEvent(t, l, device.Up); ev.DeviceID != "" {
		t.Fatalf("up for %q, want the whole link", ev.DeviceID)
	}
	f := startFleet(t, burl, []string{"2042253", "2042254", "2042255"}, sim.Options{Seed: 1})
	roundTrips(t, l, f, 3)
}

func TestPahoRoundTripsAgainstMochi(t *testing.T) {
	_, burl := startBroker(t)
	l := newLink(t, Config{URL: burl})
	waitEvent(t, l, device.Up)
	f := startFleet(t, burl, []string{"a", "b"}, sim.Options{Seed: 2, HeartbeatInterval: time.Hour})
	roundTrips(t, l, f, 2)
}

func TestPahoAgainstMosquittoSurvivesRestart(t *testing.T) {
	m := testutil.StartMosquitto(t)
	l := newLink(t, Config{URL: m.URL, ReconnectMax: 300 * time.Millisecond})
	waitEvent(t, l, device.Up)
	f := startFleet(t, m.URL, []string{"t1", "t2"}, sim.Options{Seed: 3})
	roundTrips(t, l, f, 2)

	m.Restart()
	waitEvent(t, l, device.Down)
	waitEvent(t, l, device.Up)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.WaitReady(ctx); err != nil { // the terminals reconnect too (autopaho)
		t.Fatal(err)
	}
	// The terminals resubscribe on their own schedule: retry like the agent would.
	cmd := add("after-restart", "900")
	for {
		if err := l.Send(ctx, "t1", cmd); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-l.Events():
			if ev.Kind == device.Ack && ev.Ack.MessageID == cmd.MessageID && ev.DeviceID == "t1" {
				return
			}
		case <-time.After(300 * time.Millisecond): // the agent's retry interval
		case <-ctx.Done():
			t.Fatal("no ack after the broker restarted")
		}
	}
}

// rawClient publishes what a broken terminal would.
func rawClient(t *testing.T, brokerURL string) *autopaho.ConnectionManager {
	t.Helper()
	u := mustURL(t, brokerURL)
	cm, err := autopaho.NewConnection(context.Background(), autopaho.ClientConfig{
		ServerUrls: []*url.URL{u}, KeepAlive: 10, CleanStartOnInitialConnection: true,
		ClientConfig: paho.ClientConfig{ClientID: "broken-terminal"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cm.Disconnect(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cm.AwaitConnection(ctx); err != nil {
		t.Fatal(err)
	}
	return cm
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestBadMessagesBecomeErrorEvents(t *testing.T) {
	srv, burl := startBroker(t)
	l := newLink(t, Config{Bus: srv, Devices: []string{"d1"}})
	waitEvent(t, l, device.Up)
	cm := rawClient(t, burl)
	pub := func(topic, payload string) {
		t.Helper()
		if _, err := cm.Publish(context.Background(), &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(payload)}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		topic, payload string
		code           device.Code
		device, want   string
	}{
		{"dev/face/d1/Ack", `{"messageId":`, device.ErrInvalid, "d1", "unexpected end"},
		{"dev/face/d1/Ack", `{"code":0}`, device.ErrInvalid, "d1", "messageId: missing"},
		{"dev/face/d1/Ack", `{"messageId":"m"}`, device.ErrInvalid, "d1", "code: missing"},
		{"dev/face/d1/heartbeat", `{"deviceId":"d2","persons":1}`, device.ErrInvalid, "d1", "names device"},
		{"dev/face/d1/heartbeat", `{"time":"noon"}`, device.ErrInvalid, "d1", "RFC 3339"},
		{"dev/face/stranger/Ack", `{"messageId":"m","code":0}`, device.ErrUnknownDevice, "stranger", "unknown device"},
		{"dev/face/" + strings.Repeat("x", 200) + "/Ack", `{"messageId":"m","code":0}`, device.ErrInvalid, "", "at most 128"},
	}
	for _, c := range cases {
		pub(c.topic, c.payload)
		ev := waitEvent(t, l, device.Error)
		if !errors.Is(ev.Err, c.code) || ev.DeviceID != c.device || !strings.Contains(ev.Err.Error(), c.want) {
			t.Errorf("%s %s: got %s", c.topic, c.payload, ev)
		}
		var e *Error
		if !errors.As(ev.Err, &e) || e.Topic != c.topic {
			t.Errorf("%s: not an *Error naming the topic: %#v", c.topic, ev.Err)
		}
	}
	pub("dev/face/d1/heartbeat", `{"time":"2026-11-22T10:00:00Z","persons":5}`)
	if ev := waitEvent(t, l, device.Heartbeat); ev.Heartbeat.DeviceID != "d1" || ev.Heartbeat.Persons != 5 {
		t.Fatalf("heartbeat %s", ev)
	}
	if err := l.Send(context.Background(), "d2", add("1", "1")); !errors.Is(err, device.ErrUnknownDevice) {
		t.Fatalf("send to a device not on the list: %v", err)
	}
	if err := l.Send(context.Background(), "d1", face.Command{MessageID: "m"}); !errors.Is(err, device.ErrInvalid) {
		t.Fatalf("invalid command: %v", err)
	}
}

func TestCommandsArriveWithQoS1(t *testing.T) {
	srv, burl := startBroker(t)
	l := newLink(t, Config{Bus: srv, CommandTopic: "site/7/{id}/cmd"})
	got := make(chan paho.PublishReceived, 1)
	u := mustURL(t, burl)
	cm, err := autopaho.NewConnection(context.Background(), autopaho.ClientConfig{
		ServerUrls: []*url.URL{u}, KeepAlive: 10, CleanStartOnInitialConnection: true,
		ClientConfig: paho.ClientConfig{ClientID: "qos-probe", OnPublishReceived: []func(paho.PublishReceived) (bool, error){
			func(pr paho.PublishReceived) (bool, error) { got <- pr; return true, nil }}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Disconnect(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cm.AwaitConnection(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "site/7/+/cmd", QoS: 2}}}); err != nil {
		t.Fatal(err)
	}
	cmd := add("1", "951")
	if err := l.Send(ctx, "2042253", cmd); err != nil {
		t.Fatal(err)
	}
	select {
	case pr := <-got:
		if pr.Packet.Topic != "site/7/2042253/cmd" || pr.Packet.QoS != 1 {
			t.Fatalf("topic %s qos %d", pr.Packet.Topic, pr.Packet.QoS)
		}
		if c, err := face.ParseCommandJSON(pr.Packet.Payload); err != nil || !c.Equal(&cmd) {
			t.Fatalf("payload %s: %v", pr.Packet.Payload, err)
		}
	case <-ctx.Done():
		t.Fatal("command not delivered")
	}
}

func TestConfigErrors(t *testing.T) {
	srv := refusingBus{}
	for _, cfg := range []Config{
		{},
		{Bus: srv, URL: "mqtt://x"},
		{Bus: srv},
		{URL: "mqtt://127.0.0.1:1", AckTopic: "dev/{id}x/Ack"},
		{URL: "mqtt://127.0.0.1:1", AckTopic: "dev/+/{id}"},
		{URL: "mqtt://127.0.0.1:1", AckTopic: "dev/face/{id}/heartbeat"},
		{URL: "mqtt://127.0.0.1:1", Devices: []string{"a/b"}},
		{URL: "mqtt://127.0.0.1:1", QoS: 4},
	} {
		if l, err := New(cfg); !errors.Is(err, device.ErrConfig) {
			t.Errorf("%+v: %v", cfg, err)
			if l != nil {
				l.Close()
			}
		}
	}
}

func TestSendWhileBrokerUnreachable(t *testing.T) {
	l := newLink(t, Config{URL: "mqtt://" + testutil.FreeAddr(t)})
	if ev := waitEvent(t, l, device.Down); !errors.Is(ev.Err, device.ErrNotConnected) {
		t.Fatalf("down: %v", ev.Err)
	}
	if err := l.Send(context.Background(), "d1", add("1", "1")); !errors.Is(err, device.ErrNotConnected) {
		t.Fatalf("send: %v", err)
	}
	l.Close()
	if err := l.Send(context.Background(), "d1", add("1", "1")); !errors.Is(err, device.ErrClosed) {
		t.Fatalf("send after close: %v", err)
	}
	if _, ok := <-l.Events(); ok {
		t.Fatal("events not closed") // drained above except possibly Down repeats: coalesced
	}
}

func TestTemplate(t *testing.T) {
	tp, err := parseTemplate("ack", "dev/face/{id}/Ack")
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]string{"dev/face/7/Ack": "7", "dev/face//Ack": "", "dev/face/7/8/Ack": "", "dev/face/7/Ackx": ""} {
		id, ok := tp.match(topic)
		if id != want || ok != (want != "") {
			t.Errorf("%s: %q %v", topic, id, ok)
		}
	}
	if tp.filter() != "dev/face/+/Ack" || tp.topic("x") != "dev/face/x/Ack" {
		t.Fatal(tp.filter(), tp.topic("x"))
	}
	if tp, _ := parseTemplate("cmd", "{id}"); tp.filter() != "+" {
		t.Fatal(tp.filter())
	}
}

// A consumer that stops draining Events holds back delivery (no ack is dropped), and Close
// still returns: it unblocks the handlers waiting on the full channel.
func TestCloseUnblocksAFullEventsChannel(t *testing.T) {
	srv, burl := startBroker(t)
	l, err := New(Config{Bus: srv, EventBuffer: 1})
	if err != nil {
		t.Fatal(err)
	}
	cm := rawClient(t, burl)
	for i := range 5 { // Up fills the buffer; the handlers of these wait
		if _, err := cm.Publish(context.Background(), &paho.Publish{Topic: "dev/face/d1/heartbeat", QoS: 0,
			Payload: []byte(fmt.Sprintf(`{"persons":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked behind a full Events channel")
	}
	n := 0
	for range l.Events() {
		n++
	}
	if n > 1 {
		t.Fatalf("%d events buffered in a channel of 1", n)
	}
}

// Config.Deliver takes acks and heartbeats on the delivering goroutine; what it refuses
// (returns false for) still reaches Events, and Up stays on Events.
func TestDeliverTakesAcksBeforeEvents(t *testing.T) {
	for _, mode := range []string{"inline", "paho"} {
		t.Run(mode, func(t *testing.T) {
			srv, burl := startBroker(t)
			got := make(chan device.Event, 16)
			take := make(chan bool, 1)
			take <- false // the first ack is refused: it must go to Events
			cfg := Config{Deliver: func(ev device.Event) bool {
				if ev.Kind != device.Ack {
					return true // heartbeats: taken and dropped
				}
				if ok := <-take; !ok {
					take <- true
					return false
				}
				take <- true
				got <- ev
				return true
			}}
			if mode == "inline" {
				cfg.Bus = srv
			} else {
				cfg.URL = burl
			}
			l := newLink(t, cfg)
			waitEvent(t, l, device.Up)
			if l.SendsWithoutBlocking() != (mode == "inline") {
				t.Fatalf("SendsWithoutBlocking = %v", l.SendsWithoutBlocking())
			}
			startFleet(t, burl, []string{"a"}, sim.Options{Seed: 4, HeartbeatInterval: time.Hour})
			ctx := context.Background()
			first, second := add("1", "1"), add("2", "2")
			if err := l.Send(ctx, "a", first); err != nil {
				t.Fatal(err)
			}
			if ev := waitEvent(t, l, device.Ack); ev.Ack.MessageID != first.MessageID {
				t.Fatalf("refused ack on Events: %s", ev)
			}
			if err := l.Send(ctx, "a", second); err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-got:
				if ev.DeviceID != "a" || ev.Ack.MessageID != second.MessageID || ev.At.IsZero() {
					t.Fatalf("delivered %s", ev)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Deliver never got the second ack")
			}
			select {
			case ev := <-l.Events():
				if ev.Kind == device.Ack {
					t.Fatalf("a taken ack also went to Events: %s", ev)
				}
			default:
			}
		})
	}
}

// TestInlineHoldsACommandUntilItsTerminalSubscribes: a terminal that heartbeats on a new
// connection before subscribing (as after a broker restart) is sent its command as soon as
// its SUBSCRIBE is handled, not a retry interval later; the broker would have dropped it.
func TestInlineHoldsACommandUntilItsTerminalSubscribes(t *testing.T) {
	srv, burl := startBroker(t)
	beats := make(chan device.Event, 4)
	l := newLink(t, Config{Bus: srv, Devices: []string{"t1", "t2"}, Deliver: func(ev device.Event) bool {
		if ev.Kind == device.Heartbeat {
			beats <- ev
		}
		return true
	}})
	got := make(chan *paho.Publish, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cm := terminalConn(t, ctx, burl, got)
	defer cm.Disconnect(context.Background())
	if _, err := cm.Publish(ctx, &paho.Publish{Topic: "dev/face/t1/heartbeat", QoS: 1, Payload: []byte(`{"deviceId":"t1"}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-beats:
	case <-ctx.Done():
		t.Fatal("heartbeat not delivered")
	}
	cmd := add("m1", "p1")
	if err := l.Send(ctx, "t1", cmd); err != nil {
		t.Fatal(err)
	}
	// A terminal with no heartbeat on a new connection is not checked: its command goes
	// out at once, to nobody.
	if err := l.Send(ctx, "t2", add("m2", "p2")); err != nil {
		t.Fatal(err)
	}
	tr := l.tr.(*inline)
	tr.mu.Lock()
	_, held1 := tr.held["dev/face/t1"]
	_, held2 := tr.held["dev/face/t2"]
	tr.mu.Unlock()
	if !held1 || held2 {
		t.Fatalf("held: t1's command %v (want true), t2's %v (want false)", held1, held2)
	}
	if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "dev/face/t1", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if c, err := face.ParseCommandJSON(p.Payload); err != nil || !c.Equal(&cmd) || p.Topic != "dev/face/t1" {
			t.Fatalf("got %s on %s: %v", p.Payload, p.Topic, err)
		}
	case <-ctx.Done():
		t.Fatal("the held command was not published after the SUBSCRIBE")
	}
	// Now subscribed: the next command goes out directly.
	next := add("m3", "p3")
	if err := l.Send(ctx, "t1", next); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if c, err := face.ParseCommandJSON(p.Payload); err != nil || !c.Equal(&next) {
			t.Fatalf("got %s: %v", p.Payload, err)
		}
	case <-ctx.Done():
		t.Fatal("a command to a subscribed terminal was not delivered")
	}
}

// TestInlineTracksOnlyItsTerminalsConnections: heartbeats on topics of devices outside
// Config.Devices (any client may publish there) are Error events and leave no state behind:
// the connection map would grow with every id a client makes up, and each such id would
// keep every later Send on the slow path that looks for held commands.
func TestInlineTracksOnlyItsTerminalsConnections(t *testing.T) {
	srv, burl := startBroker(t)
	l := newLink(t, Config{Bus: srv, Devices: []string{"d1"}})
	waitEvent(t, l, device.Up)
	tr := l.tr.(*inline)
	cm := rawClient(t, burl)
	pub := func(topic string) {
		t.Helper()
		if _, err := cm.Publish(context.Background(), &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(`{"persons":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"stranger1", "stranger2", strings.Repeat("x", 200)} {
		pub("dev/face/" + id + "/heartbeat")
		waitEvent(t, l, device.Error)
	}
	tr.mu.Lock()
	conns, unsure := len(tr.conn), len(tr.unsure)
	tr.mu.Unlock()
	if n := tr.unsureN.Load(); conns != 0 || unsure != 0 || n != 0 {
		t.Fatalf("after heartbeats of unknown devices: %d connections, %d unsure (counter %d), want none", conns, unsure, n)
	}
	pub("dev/face/d1/heartbeat")
	waitEvent(t, l, device.Heartbeat)
	if n := tr.unsureN.Load(); n != 1 {
		t.Fatalf("after d1's first heartbeat: %d unsure devices, want 1", n)
	}
}
