package links

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// Queries with the real parts: the outbox, these links, and simulated terminals over MQTT
// (the embedded broker on 127.0.0.1) and over serial (a pseudo-terminal pair).

// trail is the order of what crossed between the outbox and a terminal: "send <id> <try>"
// when the outbox hands a command to the links, "ack <id>" when a terminal's ack reaches
// the outbox, "done <id>" when a query's Done runs.
type trail struct {
	mu      sync.Mutex
	entries []string
	changed chan struct{}
}

func newTrail() *trail { return &trail{changed: make(chan struct{}, 1)} }

func (tr *trail) add(format string, args ...any) {
	tr.mu.Lock()
	tr.entries = append(tr.entries, fmt.Sprintf(format, args...))
	tr.mu.Unlock()
	select {
	case tr.changed <- struct{}{}:
	default:
	}
}

func (tr *trail) list() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.entries)
}

// waitFor waits until entry is in the trail and returns its index.
func (tr *trail) waitFor(t *testing.T, entry string) int {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if i := slices.Index(tr.list(), entry); i >= 0 {
			return i
		}
		select {
		case <-tr.changed:
		case <-deadline:
			t.Fatalf("no %q in %v", entry, tr.list())
		}
	}
}

// recordingSender is the links as the outbox's Sender, noting each send in the trail.
type recordingSender struct {
	*Links
	tr *trail
}

func (s recordingSender) Send(ctx context.Context, deviceID string, cmd outbox.Command) error {
	s.tr.add("send %s %d", cmd.MessageID, cmd.Try)
	return s.Links.Send(ctx, deviceID, cmd)
}

// recordingOutbox is the outbox as the links' sink, noting each ack in the trail first.
type recordingOutbox struct {
	*outbox.Outbox
	tr *trail
}

func (o recordingOutbox) AckMessage(deviceID string, a face.Ack) {
	o.tr.add("ack %s", a.MessageID)
	o.Outbox.AckMessage(deviceID, a)
}

type nopForwarder struct{}

func (nopForwarder) Ack(string, face.Ack)             {}
func (nopForwarder) Heartbeat(string, face.Heartbeat) {}

type nopState struct{}

func (nopState) Touch(string)                     {}
func (nopState) Heartbeat(string, face.Heartbeat) {}

// rig is one terminal "t1" behind the outbox and the links, on one transport.
type rig struct {
	t     *testing.T
	ob    *outbox.Outbox
	tr    *trail
	start func() *sim.Terminal // starts the simulated terminal
	fleet *sim.Fleet
}

const dev = "t1"

// newRig opens the links and the outbox for dev on transport ("mqtt" or "serial"); the
// terminal is not running until rig.run.
func newRig(t *testing.T, transport string, opts sim.Options, settings outbox.Settings) *rig {
	t.Helper()
	r := &rig{t: t, tr: newTrail()}
	opts.Strict = true
	opts.OnViolation = func(id string, err error) { t.Errorf("terminal %s: %v", id, err) }
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 50 * time.Millisecond
	}
	var lo Options
	switch transport {
	case "mqtt":
		br, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := br.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { br.Close() })
		lo = Options{MQTT: []string{dev}, Bus: br}
		r.start = func() *sim.Terminal {
			f, err := sim.StartMQTT("mqtt://"+br.Addr(), []string{dev}, opts)
			if err != nil {
				t.Fatal(err)
			}
			r.fleet = f
			return f.Terminal(dev)
		}
	case "serial":
		p, err := serial.OpenPTY()
		if err != nil {
			t.Skipf("no pseudo-terminals here: %v", err)
		}
		t.Cleanup(func() { p.Close() })
		lo = Options{Serial: []Serial{{DeviceID: dev, Port: p.Path, Baud: 115200}}}
		r.start = func() *sim.Terminal {
			f, err := sim.StartSerial([]sim.SerialPort{{DeviceID: dev, Port: p.Master}}, opts)
			if err != nil {
				t.Fatal(err)
			}
			r.fleet = f
			return f.Terminal(dev)
		}
	}
	l, err := Open(lo)
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.Open(t.TempDir(), recordingSender{l, r.tr}, &outbox.Options{
		Journal: journal.Options{Sync: journal.SyncNone}, Settings: settings})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	r.ob = ob
	l.Start(Sinks{Outbox: recordingOutbox{ob, r.tr}, Forwarder: nopForwarder{}, State: nopState{}})
	t.Cleanup(func() {
		if r.fleet != nil {
			r.fleet.Close() // first: a terminal's last ack must find the links open
		}
		ob.Close()
		l.Close()
		l.Wait()
	})
	return r
}

// reply is what a query's Done got.
type reply struct {
	ack face.Ack
	err error
}

// query asks dev for the page after `after`, at most limit persons; the reply comes on the
// returned channel.
func (r *rig) query(id, after string, limit int) <-chan reply {
	r.t.Helper()
	payload, err := (&face.Command{MessageID: id, Op: face.ListPersons, After: after, Limit: limit}).AppendMsg(nil)
	if err != nil {
		r.t.Fatal(err)
	}
	c := make(chan reply, 1)
	err = r.ob.Query(outbox.Query{MessageID: id, DeviceID: dev, Op: string(face.ListPersons), Payload: payload,
		Done: func(ack face.Ack, err error) { r.tr.add("done %s", id); c <- reply{ack, err} }})
	if err != nil {
		r.t.Fatalf("Query %s: %v", id, err)
	}
	return c
}

func (r *rig) enqueue(id string, p face.Person) {
	r.t.Helper()
	payload, err := (&face.Command{MessageID: id, Op: face.AddPerson, Person: p}).AppendMsg(nil)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.ob.Enqueue(outbox.Task{MessageID: id, TaskID: "task-" + id, DeviceID: dev, Op: string(face.AddPerson),
		PersonID: p.ID, Payload: payload}); err != nil {
		r.t.Fatalf("Enqueue %s: %v", id, err)
	}
}

func wait(t *testing.T, c <-chan reply) reply {
	t.Helper()
	select {
	case x := <-c:
		return x
	case <-time.After(10 * time.Second):
		t.Fatal("the query's Done was not called")
		return reply{}
	}
}

func eachTransport(t *testing.T, f func(t *testing.T, transport string)) {
	for _, tp := range []string{"mqtt", "serial"} {
		t.Run(tp, func(t *testing.T) { f(t, tp) })
	}
}

// A terminal's pages reach the query's Done intact, persons, revs and next, page after
// page to the end of the list.
func TestQueryPagesReachDone(t *testing.T) {
	eachTransport(t, func(t *testing.T, tp string) {
		r := newRig(t, tp, sim.Options{Seed: 1}, outbox.Settings{RetryInterval: time.Second})
		term := r.start()
		var want []face.PersonRev
		for i := range 5 {
			p := face.Person{ID: fmt.Sprintf("p%d", i), Name: "N", Rev: fmt.Sprintf("%016x", 0xabc0+i)}
			if err := term.TamperAdd(p); err != nil {
				t.Fatal(err)
			}
			want = append(want, face.PersonRev{ID: p.ID, Rev: p.Rev})
		}
		var got []face.PersonRev
		after := ""
		for page := 0; ; page++ {
			x := wait(t, r.query(fmt.Sprintf("list-%d", page), after, 2))
			if x.err != nil {
				t.Fatalf("page %d: %v", page, x.err)
			}
			if x.ack.Code != 0 || len(x.ack.Persons) > 2 {
				t.Fatalf("page %d: %+v", page, x.ack)
			}
			got = append(got, x.ack.Persons...)
			if x.ack.Next == "" {
				break
			}
			if x.ack.Next != x.ack.Persons[len(x.ack.Persons)-1].ID || page > 5 {
				t.Fatalf("page %d: next %q after %+v", page, x.ack.Next, x.ack.Persons)
			}
			after = x.ack.Next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("listed %+v, want %+v", got, want)
		}
		if st := term.Stats(); st.Lists != 3 {
			t.Fatalf("terminal answered %d lists, want 3", st.Lists)
		}
	})
}

// A query in flight holds the terminal's one slot: a task taken in meanwhile is sent only
// after the query's ack came back (and the terminal, strict, saw one command at a time).
func TestQueryInFlightBlocksTheNextCommand(t *testing.T) {
	eachTransport(t, func(t *testing.T, tp string) {
		r := newRig(t, tp, sim.Options{Seed: 2, AckLatency: sim.Latency{Kind: sim.Fixed, A: 100 * time.Millisecond}},
			outbox.Settings{RetryInterval: 5 * time.Second})
		r.start()
		c := r.query("list-0", "", 10)
		r.tr.waitFor(t, "send list-0 1")
		r.enqueue("add-1", face.Person{ID: "p1"})
		if x := wait(t, c); x.err != nil || len(x.ack.Persons) != 0 || x.ack.Next != "" {
			t.Fatalf("Done got %+v", x)
		}
		sent := r.tr.waitFor(t, "send add-1 1")
		if acked := r.tr.waitFor(t, "ack list-0"); acked > sent {
			t.Fatalf("the task was sent before the query's ack: %v", r.tr.list())
		}
		r.tr.waitFor(t, "ack add-1")
	})
}

// A query whose ack is late is sent again with the same message id; the terminal acks
// the copies, and Done gets the page once.
func TestQueryRetriedKeepsItsMessageID(t *testing.T) {
	eachTransport(t, func(t *testing.T, tp string) {
		r := newRig(t, tp, sim.Options{Seed: 3, AckLatency: sim.Latency{Kind: sim.Fixed, A: 400 * time.Millisecond}},
			outbox.Settings{RetryInterval: 100 * time.Millisecond, MaxTries: 20, BreakerThreshold: 100})
		term := r.start()
		if err := term.TamperAdd(face.Person{ID: "p1", Rev: "00000000000000aa"}); err != nil {
			t.Fatal(err)
		}
		c := r.query("list-0", "", 10)
		r.tr.waitFor(t, "send list-0 2")
		x := wait(t, c)
		if x.err != nil || len(x.ack.Persons) != 1 || x.ack.Persons[0] != (face.PersonRev{ID: "p1", Rev: "00000000000000aa"}) {
			t.Fatalf("Done got %+v", x)
		}
		for _, e := range r.tr.list() {
			if strings.HasPrefix(e, "send ") && !strings.HasPrefix(e, "send list-0 ") {
				t.Fatalf("sent something else than the query: %v", r.tr.list())
			}
		}
		if st := term.Stats(); st.Duplicates == 0 || st.Lists != 1 {
			t.Fatalf("terminal stats %+v: want the resend seen as a duplicate, one list", st)
		}
	})
}

// A query to a terminal that was never heard from waits, then goes once it speaks.
func TestQueryWaitsForAnOfflineTerminal(t *testing.T) {
	eachTransport(t, func(t *testing.T, tp string) {
		r := newRig(t, tp, sim.Options{Seed: 4}, outbox.Settings{RetryInterval: time.Second})
		c := r.query("list-0", "", 10)
		if st, _ := r.ob.DeviceStatus(dev); st.Online || st.Queries != 1 {
			t.Fatalf("status before the terminal runs: %+v", st)
		}
		if got := r.tr.list(); len(got) != 0 {
			t.Fatalf("sent to an offline terminal: %v", got)
		}
		term := r.start()
		if err := term.TamperAdd(face.Person{ID: "p9"}); err != nil {
			t.Fatal(err)
		}
		x := wait(t, c)
		if x.err != nil || x.ack.Code != 0 {
			t.Fatalf("Done got %+v", x)
		}
		if got := r.tr.list(); got[0] != "send list-0 1" {
			t.Fatalf("trail %v", got)
		}
	})
}

// A v1 terminal refuses ListPersons as an unknown op: Done gets the refusal and its code.
func TestQueryRefusedByAV1Terminal(t *testing.T) {
	eachTransport(t, func(t *testing.T, tp string) {
		r := newRig(t, tp, sim.Options{Seed: 5, Protocol: 1}, outbox.Settings{RetryInterval: time.Second})
		r.start()
		x := wait(t, r.query("list-0", "", 10))
		if !errors.Is(x.err, outbox.ErrRefused) || x.ack.Code != sim.UnknownOpCode || !strings.Contains(x.err.Error(), "unknown op") {
			t.Fatalf("Done got %+v", x)
		}
		r.enqueue("add-1", face.Person{ID: "p1"}) // the terminal still takes v1 commands
		r.tr.waitFor(t, "ack add-1")
	})
}

// Close answers the queries still pending with ErrClosed.
func TestCloseCancelsPendingQueries(t *testing.T) {
	eachTransport(t, func(t *testing.T, tp string) {
		r := newRig(t, tp, sim.Options{Seed: 6}, outbox.Settings{RetryInterval: time.Second})
		c0, c1 := r.query("list-0", "", 10), r.query("list-1", "x", 10) // nobody answers: no terminal
		if err := r.ob.Close(); err != nil {
			t.Fatal(err)
		}
		for _, c := range []<-chan reply{c0, c1} {
			if x := wait(t, c); !errors.Is(x.err, outbox.ErrClosed) {
				t.Fatalf("Done got %+v", x)
			}
		}
	})
}
