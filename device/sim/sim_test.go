package sim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/mqttlink"
	"github.com/seed0e69bba5/faceagent/device/serial"
	"github.com/seed0e69bba5/faceagent/internal/mqttwire"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startBroker runs the embedded broker (agent/broker) on a free loopback port, open to
// every client.
func startBroker(t *testing.T) (*broker.Broker, string) {
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

// strict turns strict mode on and fails the test on any violation.
func strict(t *testing.T, o Options) Options {
	o.Strict = true
	o.OnViolation = func(id string, err error) { t.Errorf("%s: %v", id, err) }
	return o
}

// serialFleet starts one simulated terminal per id, each on its own PTY, and one serial
// link per terminal; it returns the links by id.
func serialFleet(t *testing.T, ids []string, o Options) (*Fleet, map[string]*serial.Link) {
	t.Helper()
	var ports []SerialPort
	links := map[string]*serial.Link{}
	for _, id := range ids {
		p, err := serial.OpenPTY()
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, SerialPort{DeviceID: id, Port: p.Master})
		l, err := serial.New(serial.Config{Port: p.Path, DeviceID: id, FrameTimeout: 200 * time.Millisecond, ReadTimeout: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(); p.Close() })
		links[id] = l
	}
	f, err := StartSerial(ports, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, links
}

// agent is the smallest correct sender: per terminal, one command at a time, resent with
// the same messageId every retry until acked; a second ack for a messageId is ignored.
type agent struct {
	t     *testing.T
	link  device.Link
	retry time.Duration
	mu    sync.Mutex
	acks  map[string]chan face.Ack // per device
	codes map[string]int           // messageId → first ack code
	stop  chan struct{}
	wg    sync.WaitGroup
}

func newAgent(t *testing.T, l device.Link, ids []string, retry time.Duration) *agent {
	a := &agent{t: t, link: l, retry: retry, acks: map[string]chan face.Ack{}, codes: map[string]int{}, stop: make(chan struct{})}
	for _, id := range ids {
		a.acks[id] = make(chan face.Ack, 64)
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			select {
			case ev := <-l.Events():
				if ev.Kind == device.Ack {
					a.acks[ev.DeviceID] <- ev.Ack
				}
			case <-a.stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(a.stop); a.wg.Wait() })
	return a
}

func (a *agent) run(ctx context.Context, id string, cmds []face.Command) error {
	for _, cmd := range cmds {
	resend:
		for {
			if err := a.link.Send(ctx, id, cmd); err != nil && !errors.Is(err, device.ErrNotConnected) {
				return err
			}
			timer := time.NewTimer(a.retry)
			for {
				select {
				case ack := <-a.acks[id]:
					if ack.MessageID != cmd.MessageID {
						continue // a late duplicate of an earlier command's ack: ignored
					}
					timer.Stop()
					a.mu.Lock()
					a.codes[cmd.MessageID] = ack.Code
					a.mu.Unlock()
					break resend
				case <-timer.C:
					continue resend
				case <-ctx.Done():
					return fmt.Errorf("%s: %s never acked: %w", id, cmd.MessageID, ctx.Err())
				}
			}
		}
	}
	return nil
}

// workload adds persons 0..n-1, then deletes the odd ones.
func workload(id string, n int) (cmds []face.Command, want []string) {
	for i := range n {
		cmds = append(cmds, face.Command{MessageID: fmt.Sprintf("Add-%s-%d", id, i), Op: face.AddPerson,
			Person: face.Person{ID: fmt.Sprint(i), Name: "p" + fmt.Sprint(i)}})
	}
	for i := 1; i < n; i += 2 {
		cmds = append(cmds, face.Command{MessageID: fmt.Sprintf("Del-%s-%d", id, i), Op: face.DeletePerson, Person: face.Person{ID: fmt.Sprint(i)}})
	}
	for i := 0; i < n; i += 2 {
		want = append(want, fmt.Sprint(i))
	}
	return cmds, want
}

func personIDs(ps []face.Person) string {
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	return strings.Join(ids, ",")
}

func sortedIDs(ids []string) string {
	// Persons() sorts by string: do the same.
	s := append([]string(nil), ids...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return strings.Join(s, ",")
}

// TestUnreliableTerminalsConvergeOverMQTT runs the smallest correct agent against terminals
// with every fault on and checks the final whitelists and the absence of violations.
func TestUnreliableTerminalsConvergeOverMQTT(t *testing.T) {
	srv, url := startBroker(t)
	l, err := mqttlink.New(mqttlink.Config{Bus: srv})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ids := []string{"t0", "t1", "t2"}
	f, err := StartMQTT(url, ids, strict(t, Options{Seed: 7,
		AckLatency: Latency{Kind: Uniform, A: 0, B: 30 * time.Millisecond}, AckLoss: 0.2,
		HeartbeatInterval: 50 * time.Millisecond, GarbageRate: 0.2,
		OfflineEvery: 300 * time.Millisecond, OfflineFor: 50 * time.Millisecond,
		CrashRate: 0.05, CrashDowntime: 50 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	converge(t, ctx, newAgent(t, l, ids, 40*time.Millisecond), f, ids, 12)
}

func converge(t *testing.T, ctx context.Context, a *agent, f *Fleet, ids []string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	wants := map[string][]string{}
	for _, id := range ids {
		cmds, want := workload(id, n)
		wants[id] = want
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := a.run(ctx, id, cmds); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		got := personIDs(f.Terminal(id).Persons())
		if want := sortedIDs(wants[id]); got != want {
			t.Errorf("%s whitelist %s, want %s", id, got, want)
		}
		t.Logf("%+v", f.Terminal(id).Stats())
	}
	if err := f.Violations(); err != nil {
		t.Fatal(err)
	}
}

func TestUnreliableTerminalsConvergeOverSerial(t *testing.T) {
	ids := []string{"s0", "s1"}
	f, links := serialFleet(t, ids, strict(t, Options{Seed: 9,
		AckLatency: Latency{Kind: Exponential, A: 10 * time.Millisecond}, AckLoss: 0.2,
		HeartbeatInterval: 50 * time.Millisecond, GarbageRate: 0.3,
		CrashRate: 0.05, CrashDowntime: 50 * time.Millisecond}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			converge(t, ctx, newAgent(t, links[id], []string{id}, 60*time.Millisecond), f, []string{id}, 10)
		}()
	}
	wg.Wait()
}

func TestStrictModeCatchesASecondCommand(t *testing.T) {
	var mu sync.Mutex
	var seen []error
	o := Options{Seed: 1, Strict: true, AckLatency: Latency{A: time.Second}, // the four sends land well within it
		OnViolation: func(_ string, err error) { mu.Lock(); seen = append(seen, err); mu.Unlock() }}
	f, links := serialFleet(t, []string{"d"}, o)
	l := links["d"]
	waitKind(t, l, device.Up)
	ctx := context.Background()
	c1 := face.Command{MessageID: "m1", Op: face.AddPerson, Person: face.Person{ID: "1"}}
	c2 := face.Command{MessageID: "m2", Op: face.AddPerson, Person: face.Person{ID: "2"}}
	must(t, l.Send(ctx, "d", c1))
	must(t, l.Send(ctx, "d", c1)) // a resend of the command in flight: allowed
	changed := c1
	changed.Person.Name = "someone else"
	must(t, l.Send(ctx, "d", changed)) // same messageId, other content: a violation
	must(t, l.Send(ctx, "d", c2))      // another command while m1 is unacked: a violation
	for range 4 {                      // every copy is acked (a repeated messageId is acked again)
		waitKind(t, l, device.Ack)
	}
	err := f.Violations()
	if err == nil || strings.Count(err.Error(), "strict:") != 2 || !strings.Contains(err.Error(), "received m2") {
		t.Fatalf("violations: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("OnViolation called %d times", len(seen))
	}
	if s := f.Terminal("d").Stats(); s.Duplicates != 2 || s.Violations != 2 || s.Acked != 4 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRefusalsAndLostAcks(t *testing.T) {
	f, links := serialFleet(t, []string{"r", "q"}, Options{Seed: 1, RefuseRate: 1, RefuseCode: 42})
	_ = f
	l := links["r"]
	waitKind(t, l, device.Up)
	c := face.Command{MessageID: "m1", Op: face.AddPerson, Person: face.Person{ID: "1"}}
	must(t, l.Send(context.Background(), "r", c))
	if ev := waitKind(t, l, device.Ack); ev.Ack.Code != 42 || ev.Ack.OK() {
		t.Fatalf("refusal %+v", ev.Ack)
	}
	if n := len(f.Terminal("r").Persons()); n != 0 {
		t.Fatalf("refused person stored: %d", n)
	}

	g, links2 := serialFleet(t, []string{"lossy"}, Options{Seed: 1, AckLoss: 1})
	l2 := links2["lossy"]
	waitKind(t, l2, device.Up)
	must(t, l2.Send(context.Background(), "lossy", c))
	deadline := time.After(5 * time.Second)
	for g.Terminal("lossy").Stats().AcksLost != 1 {
		select {
		case ev := <-l2.Events():
			if ev.Kind == device.Ack {
				t.Fatalf("ack not lost: %s", ev)
			}
		case <-deadline:
			t.Fatal("command never answered")
		case <-time.After(10 * time.Millisecond): // polling a counter that has no event
		}
	}
	if ps := g.Terminal("lossy").Persons(); len(ps) != 1 {
		t.Fatalf("applied despite the lost ack? %v", ps)
	}
}

func TestCrashLeavesACutFrameAndComesBack(t *testing.T) {
	f, links := serialFleet(t, []string{"c"}, Options{Seed: 3, CrashRate: 1, CrashDowntime: 100 * time.Millisecond})
	l := links["c"]
	waitKind(t, l, device.Up)
	must(t, l.Send(context.Background(), "c", face.Command{MessageID: "m", Op: face.AddPerson, Person: face.Person{ID: "1"}}))
	if ev := waitKind(t, l, device.Error); !errors.Is(ev.Err, device.ErrFrame) {
		t.Fatalf("after a crash: %v", ev.Err)
	}
	// On its way back the terminal announces itself with a heartbeat.
	if ev := waitKind(t, l, device.Heartbeat); ev.DeviceID != "c" {
		t.Fatalf("heartbeat %s", ev)
	}
	if s := f.Terminal("c").Stats(); s.Crashes != 1 || s.Acked != 0 || !s.Online {
		t.Fatalf("stats %+v", s)
	}
}

func TestSeededFatesRepeat(t *testing.T) {
	fates := func(seed uint64) string {
		f, err := newFleet([]string{"a"}, Options{Seed: seed, RefuseRate: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		tm := f.Terminal("a")
		for range 64 {
			if tm.rng.Float64() < 0.5 {
				b.WriteByte('R')
			} else {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	first, again, other := fates(5), fates(5), fates(6)
	if first != again || first == other {
		t.Fatal("fates are not a function of the seed")
	}
}

func TestParseLatency(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for in, check := range map[string]func(time.Duration) bool{
		"50ms":                func(d time.Duration) bool { return d == 50*time.Millisecond },
		"uniform:10ms-20ms":   func(d time.Duration) bool { return d >= 10*time.Millisecond && d <= 20*time.Millisecond },
		"exp:5ms":             func(d time.Duration) bool { return d >= 0 },
		"normal:100ms,1000ms": func(d time.Duration) bool { return d >= 0 },
	} {
		l, err := ParseLatency(in)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if back, err := ParseLatency(l.String()); err != nil || back != l {
			t.Fatalf("%s: String() %q does not parse back", in, l.String())
		}
		for range 100 {
			if d := l.Sample(r); !check(d) {
				t.Fatalf("%s sampled %v", in, d)
			}
		}
	}
	for _, bad := range []string{"", "fast", "uniform:20ms-10ms", "exp:x", "normal:1ms", "gamma:1ms", "-5ms"} {
		if _, err := ParseLatency(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func waitKind(t *testing.T, l device.Link, kind device.EventKind) device.Event {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-l.Events():
			if ev.Kind == kind {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event", kind)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A late duplicate is acked again but not executed again: it must not undo a later command.
func TestDuplicateIsAckedNotReExecuted(t *testing.T) {
	f, links := serialFleet(t, []string{"d"}, strict(t, Options{Seed: 1}))
	l := links["d"]
	waitKind(t, l, device.Up)
	ctx := context.Background()
	add := face.Command{MessageID: "Add-1", Op: face.AddPerson, Person: face.Person{ID: "1"}}
	del := face.Command{MessageID: "Del-1", Op: face.DeletePerson, Person: face.Person{ID: "1"}}
	for _, c := range []face.Command{add, del, add} {
		must(t, l.Send(ctx, "d", c))
		if ev := waitKind(t, l, device.Ack); ev.Ack.MessageID != c.MessageID || !ev.Ack.OK() {
			t.Fatalf("ack %s for %s", ev, c.MessageID)
		}
	}
	if ps := f.Terminal("d").Persons(); len(ps) != 0 {
		t.Fatalf("the duplicate AddPerson was executed again: %v", ps)
	}
	if s := f.Terminal("d").Stats(); s.Duplicates != 1 || s.Acked != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// A terminal's "back online" timer may fire as its fleet closes. The reconnect must not
// outlive the fleet: a leftover connection reconnected to the broker while it closed and
// held mochi's Close forever (seen as a hung `go test -count 8`).
func TestMQTTTerminalDoesNotReconnectAfterClose(t *testing.T) {
	_, url := startBroker(t)
	f, err := StartMQTT(url, []string{"x"}, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	m := f.Terminal("x").tr.(*mqttTerm)
	f.Close()
	m.setOnline(true) // what the back-online timer does when it wins the race with Close
	m.mu.Lock()
	stop := m.cancel
	m.mu.Unlock()
	if stop != nil {
		stop()
		t.Fatal("the terminal started connecting again after its fleet closed")
	}
}

// A terminal whose connection the broker drops connects again, subscribes again and
// takes commands; its packet ids and PUBACK waits belong to the connection they were
// taken on.
func TestMQTTTerminalReconnectsAfterTheBrokerDropsIt(t *testing.T) {
	srv, url := startBroker(t)
	l, err := mqttlink.New(mqttlink.Config{Bus: srv})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := StartMQTT(url, []string{"r"}, Options{Seed: 1, AckLatency: Latency{Kind: Fixed, A: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	a := newAgent(t, l, []string{"r"}, 100*time.Millisecond)
	cmd := func(i int) face.Command {
		return face.Command{MessageID: fmt.Sprintf("m-%d", i), Op: face.AddPerson, Person: face.Person{ID: fmt.Sprint(i)}}
	}
	if err := a.run(ctx, "r", []face.Command{cmd(0)}); err != nil {
		t.Fatal(err)
	}
	m := f.Terminal("r").tr.(*mqttTerm)
	m.mu.Lock()
	old := m.conn
	m.mu.Unlock()
	cl, ok := srv.Server().Clients.Get("facesim-r")
	if !ok {
		t.Fatal("the terminal's client is not in the broker")
	}
	cl.Stop(errors.New("test: dropped by the broker"))
	// The agent resends until the terminal is back, subscribed, and acks.
	if err := a.run(ctx, "r", []face.Command{cmd(1), cmd(2)}); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	now := m.conn
	m.mu.Unlock()
	if now == nil || now == old {
		t.Fatalf("connection after the drop: %p, before: %p", now, old)
	}
	if _, _, err := old.track(true); !errors.Is(err, errConnectionLost) {
		t.Fatalf("the dropped connection still hands out packet ids: %v", err)
	}
	if got := personIDs(f.Terminal("r").Persons()); got != "0,1,2" {
		t.Fatalf("persons %s", got)
	}
}

// A QoS 1 publish ends with its PUBACK's verdict, the connection's loss or the timeout,
// and the waiting channel it returns to the pool is empty: a late PUBACK for a publish
// that timed out is not taken for the next publish's.
func TestPublishWaitEndsCleanly(t *testing.T) {
	defer func(d time.Duration) { publishTimeout = d }(publishTimeout)
	publishTimeout = 100 * time.Millisecond
	client, broker := net.Pipe()
	defer client.Close()
	defer broker.Close()
	c := &termConn{nc: client, r: bufio.NewReader(client), inflight: map[uint16]chan error{}}
	m := &mqttTerm{conn: c}
	br := bufio.NewReader(broker)
	// next reads the PUBLISH the terminal writes and returns its packet id.
	next := func() <-chan uint16 {
		ids := make(chan uint16, 1)
		go func() {
			first, body, _, err := mqttwire.ReadPacket(br, nil)
			if err != nil {
				t.Error(err)
				close(ids)
				return
			}
			p, err := mqttwire.ParsePublish(first, body)
			if err != nil || p.QoS != 1 || string(p.Payload) != "x" {
				t.Errorf("publish %+v, %v", p, err)
			}
			ids <- p.ID
		}()
		return ids
	}
	publish := func(answer func(id uint16)) error {
		ids := next()
		errc := make(chan error, 1)
		go func() { errc <- m.publish("a", 1, []byte("x")) }()
		id := <-ids
		if answer != nil {
			answer(id)
		}
		return <-errc
	}
	if err := publish(func(id uint16) { c.acked(id, 0) }); err != nil {
		t.Fatalf("acked: %v", err)
	}
	if err := publish(func(id uint16) { c.acked(id, 0x87) }); err == nil || !strings.Contains(err.Error(), "0x87") {
		t.Fatalf("refused: %v", err)
	}
	var late uint16
	if err := publish(func(id uint16) { late = id }); !errors.Is(err, errPublishTimeout) {
		t.Fatalf("unanswered: %v", err)
	}
	c.acked(late, 0) // too late: nobody waits, nothing is left in a channel
	for range 3 {    // whichever pooled channel comes next is empty
		if err := publish(func(id uint16) { c.acked(id, 0) }); err != nil {
			t.Fatalf("after a late PUBACK: %v", err)
		}
	}
	if err := publish(func(uint16) { c.fail() }); !errors.Is(err, errConnectionLost) {
		t.Fatalf("connection lost: %v", err)
	}
	if err := m.publish("a", 1, []byte("x")); !errors.Is(err, errConnectionLost) {
		t.Fatalf("publish on a lost connection: %v", err)
	}
}
