package outbox

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// answers collects what queries' Done functions got.
type answers struct {
	mu  sync.Mutex
	got map[string]answer
	c   chan string
}

type answer struct {
	ack face.Ack
	err error
	n   int // calls
}

func newAnswers() *answers { return &answers{got: map[string]answer{}, c: make(chan string, 100)} }

func (a *answers) done(id string) func(face.Ack, error) {
	return func(ack face.Ack, err error) {
		a.mu.Lock()
		x := a.got[id]
		x.ack, x.err, x.n = ack, err, x.n+1
		a.got[id] = x
		a.mu.Unlock()
		a.c <- id
	}
}

func (a *answers) get(id string) (answer, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	x, ok := a.got[id]
	return x, ok
}

// wait returns the answer of id once its Done ran.
func (a *answers) wait(t *testing.T, id string) answer {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		if x, ok := a.get(id); ok {
			return x
		}
		select {
		case <-a.c:
		case <-deadline:
			t.Fatalf("query %s: Done not called", id)
		}
	}
}

func (e *env) query(id, dev string, a *answers) {
	e.t.Helper()
	if err := e.o.Query(Query{MessageID: id, DeviceID: dev, Op: "ListPersons", Payload: []byte("list " + id), Done: a.done(id)}); err != nil {
		e.t.Fatalf("Query %s: %v", id, err)
	}
}

// advanceUntilSent moves the clock in steps of 10 ms until a command is sent, at most by
// limit, and returns it: the ack deadline of what is sent has not passed yet. The env's
// sender must be non-blocking (newEnvSender): its sends are made within Advance.
func (e *env) advanceUntilSent(limit time.Duration) Command {
	e.t.Helper()
	for waited := time.Duration(0); waited < limit; waited += 10 * time.Millisecond {
		e.clock.Advance(10 * time.Millisecond)
		select {
		case c := <-e.snd.sent:
			return c
		default:
		}
	}
	e.t.Fatalf("nothing sent within %v", limit)
	return Command{}
}

// expectNothingSent fails if a command was sent.
func (e *env) expectNothingSent() {
	e.t.Helper()
	select {
	case c := <-e.snd.sent:
		e.t.Fatalf("sent %s try %d, want nothing", c.MessageID, c.Try)
	default:
	}
}

// A query goes behind the tasks queued before it and the tasks taken in while it waits,
// takes the device's one slot once sent (the next task waits for its ack), and its ack
// reaches Done whole.
func TestQueryTakesTheSlotBehindTasks(t *testing.T) {
	e := newEnvSender(t, Options{Journal: fastJournal()}, true)
	a := newAnswers()
	e.o.Heartbeat("d")
	e.enqueue("t1", "d", "p1")
	e.expectSend("t1", 1)
	e.query("q1", "d", a)
	e.expectNothingSent()
	e.enqueue("t2", "d", "p2") // taken in while q1 waits: goes first
	e.o.Ack("d", "t1", 0, "")
	e.expectSend("t2", 1)
	e.o.Ack("d", "t2", 0, "")
	c := e.snd.next(t)
	if c.MessageID != "q1" || c.Try != 1 || c.Op != "ListPersons" || string(c.Payload) != "list q1" || c.TaskID != "" {
		t.Fatalf("sent %+v, want the query", c)
	}
	if st := e.status("d"); st.Queries != 1 || st.InFlight != "" || st.Queued != 0 {
		t.Fatalf("status with the query in flight: %+v", st)
	}
	e.enqueue("t3", "d", "p3")
	e.expectNothingSent() // one in flight: the query's
	page := face.Ack{MessageID: "q1", Persons: []face.PersonRev{{ID: "p1", Rev: "0123456789abcdef"}, {ID: "p2", Rev: "fedcba9876543210"}}, Next: "p2"}
	e.o.AckMessage("d", page)
	got := a.wait(t, "q1")
	if got.err != nil || got.n != 1 || got.ack.Next != "p2" || len(got.ack.Persons) != 2 || got.ack.Persons[1] != page.Persons[1] {
		t.Fatalf("Done got %+v", got)
	}
	e.expectSend("t3", 1)
	if st := e.status("d"); st.Queries != 0 || st.InFlight != "t3" {
		t.Fatalf("status after the query: %+v", st)
	}
	// The query has no result: t1 and t2 do.
	if res := e.results(); len(res) != 2 || res[0].MessageID != "t1" || res[1].MessageID != "t2" {
		t.Fatalf("results: %+v", res)
	}
}

// A query not acked in time is sent again with the same message id after a backoff, and
// keeps its turn meanwhile: a task taken in during the backoff waits for it. After
// MaxTries tries Done gets ErrNoAnswer.
func TestQueryRetriedKeepsItsIDAndTurn(t *testing.T) {
	e := newEnvSender(t, Options{Journal: fastJournal(), Settings: Settings{RetryInterval: time.Second, MaxTries: 3, MaxBackoff: 4 * time.Second}}, true)
	a := newAnswers()
	e.o.Heartbeat("d")
	e.query("q1", "d", a)
	e.expectSend("q1", 1)
	e.clock.Advance(time.Second) // ack timeout: backing off
	e.enqueue("t1", "d", "p1")
	e.expectNothingSent()
	for try := 2; try <= 3; try++ {
		c := e.advanceUntilSent(5 * time.Second)
		if c.MessageID != "q1" || c.Try != try || string(c.Payload) != "list q1" {
			t.Fatalf("sent %s try %d, want q1 try %d", c.MessageID, c.Try, try)
		}
		e.clock.Advance(time.Second)
	}
	got := a.wait(t, "q1")
	if !errors.Is(got.err, ErrNoAnswer) || !strings.Contains(got.err.Error(), "after 3 tries") || got.n != 1 {
		t.Fatalf("Done got %+v, want ErrNoAnswer after 3 tries", got)
	}
	e.expectSend("t1", 1)
	e.o.Ack("d", "q1", 0, "") // too late: ignored
	if x, _ := a.get("q1"); x.n != 1 {
		t.Fatalf("Done called %d times", x.n)
	}
}

// An ack that comes while the query waits for its retry answers it all the same.
func TestQueryLateAckAnswers(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), Settings: Settings{RetryInterval: time.Second}})
	a := newAnswers()
	e.o.Heartbeat("d")
	e.query("q1", "d", a)
	e.expectSend("q1", 1)
	e.clock.Advance(time.Second)
	e.o.AckMessage("d", face.Ack{MessageID: "q1", Persons: []face.PersonRev{{ID: "x", Rev: "0123456789abcdef"}}})
	if got := a.wait(t, "q1"); got.err != nil || len(got.ack.Persons) != 1 {
		t.Fatalf("Done got %+v", got)
	}
	if st := e.status("d"); st.Queries != 0 {
		t.Fatalf("status: %+v", st)
	}
	e.clock.Advance(time.Minute)
	e.expectNothingSent()
}

// A query to an offline device waits for it; one in flight when the device goes offline
// goes back without spending its try, and then counts as never sent: tasks go first.
func TestQueryWaitsForAnOfflineDevice(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	a := newAnswers()
	e.query("q1", "d", a)
	e.clock.Advance(time.Minute)
	e.expectNothingSent()
	e.o.Heartbeat("d")
	e.expectSend("q1", 1)
	e.o.LinkDown("d")
	e.enqueue("t1", "d", "p1")
	e.o.LinkUp("d")
	e.o.Heartbeat("d")
	e.expectSend("t1", 1)
	e.o.Ack("d", "t1", 0, "")
	e.expectSend("q1", 1)
	e.o.AckMessage("d", face.Ack{MessageID: "q1"})
	if got := a.wait(t, "q1"); got.err != nil {
		t.Fatalf("Done got %+v", got)
	}
}

// A refusal (a v1 terminal does not know the op) reaches Done with the ack and ErrRefused.
func TestQueryRefused(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	a := newAnswers()
	e.o.Heartbeat("d")
	e.query("q1", "d", a)
	e.expectSend("q1", 1)
	e.o.Ack("d", "q1", 19, `unknown op "ListPersons"`)
	got := a.wait(t, "q1")
	if !errors.Is(got.err, ErrRefused) || got.ack.Code != 19 || !strings.Contains(got.err.Error(), `code 19: unknown op "ListPersons"`) {
		t.Fatalf("Done got %+v", got)
	}
}

// A failed Send counts as a try of the query.
func TestQuerySendErrorIsATry(t *testing.T) {
	// Non-blocking: the failed send is handled before Query returns.
	e := newEnvSender(t, Options{Journal: fastJournal(), Settings: Settings{RetryInterval: time.Second, MaxTries: 2}}, true)
	a := newAnswers()
	e.snd.fail = errors.New("wire cut")
	e.o.Heartbeat("d")
	e.query("q1", "d", a)
	e.expectSend("q1", 1)
	if _, done := a.get("q1"); done {
		t.Fatal("Done called after one failed try of two")
	}
	e.clock.Advance(2 * time.Second)
	e.expectSend("q1", 2)
	got := a.wait(t, "q1")
	if !errors.Is(got.err, ErrNoAnswer) || !strings.Contains(got.err.Error(), "wire cut") {
		t.Fatalf("Done got %+v", got)
	}
}

// Close answers every pending query with ErrClosed, in flight or waiting.
func TestCloseCancelsQueries(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	a := newAnswers()
	e.o.Heartbeat("d1")
	e.query("q1", "d1", a)
	e.expectSend("q1", 1)
	e.query("q2", "d1", a)
	e.query("q3", "d2", a) // offline device
	if err := e.o.Close(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"q1", "q2", "q3"} {
		if got := a.wait(t, id); !errors.Is(got.err, ErrClosed) || got.n != 1 {
			t.Fatalf("%s: Done got %+v", id, got)
		}
	}
	if err := e.o.Query(Query{MessageID: "q4", DeviceID: "d1", Done: a.done("q4")}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Query after Close: %v", err)
	}
}

// Queries count toward the bounds of unfinished commands and share the message ids'
// namespace with tasks.
func TestQueryBoundsAndDuplicates(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal(), MaxQueuedPerDevice: 2, MaxQueued: 3})
	a := newAnswers()
	e.enqueue("t1", "d", "p1")
	e.query("q1", "d", a)
	if err := e.o.Query(Query{MessageID: "q2", DeviceID: "d", Done: a.done("q2")}); !errors.Is(err, ErrDeviceFull) {
		t.Fatalf("third command on d: %v", err)
	}
	if err := e.o.Enqueue(Task{MessageID: "t2", DeviceID: "d"}); !errors.Is(err, ErrDeviceFull) {
		t.Fatalf("task past the device bound: %v", err)
	}
	e.query("q3", "e", a)
	if err := e.o.Query(Query{MessageID: "q4", DeviceID: "f", Done: a.done("q4")}); !errors.Is(err, ErrFull) {
		t.Fatalf("fourth command: %v", err)
	}
	for _, id := range []string{"q1", "t1"} {
		if err := e.o.Query(Query{MessageID: id, DeviceID: "e", Done: a.done(id)}); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("query %s again: %v", id, err)
		}
	}
	if err := e.o.Enqueue(Task{MessageID: "q1", DeviceID: "e"}); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("task with a pending query's id: %v", err)
	}
	for _, q := range []Query{{DeviceID: "d", Done: a.done("x")}, {MessageID: "x", Done: a.done("x")}, {MessageID: "x", DeviceID: "d"}} {
		if err := e.o.Query(q); !errors.Is(err, ErrInvalidTask) {
			t.Fatalf("Query(%+v): %v", q, err)
		}
	}
}

// A paused device gets no query either.
func TestQueryWaitsWhilePaused(t *testing.T) {
	e := newEnv(t, Options{Journal: fastJournal()})
	a := newAnswers()
	if err := e.o.Pause("d"); err != nil {
		t.Fatal(err)
	}
	e.o.Heartbeat("d")
	e.query("q1", "d", a)
	e.expectNothingSent()
	if err := e.o.Resume("d"); err != nil {
		t.Fatal(err)
	}
	e.expectSend("q1", 1)
}

// Done may ask the next page at once, from the goroutine that delivered the ack.
func TestQueryDoneMayQueryAgain(t *testing.T) {
	e := newEnvSender(t, Options{Journal: fastJournal()}, true)
	e.o.Heartbeat("d")
	pages := make(chan string, 4)
	var done func(face.Ack, error)
	n := 0
	done = func(ack face.Ack, err error) {
		pages <- ack.Next
		if err == nil && ack.Next != "" {
			n++
			if err := e.o.Query(Query{MessageID: "q" + ack.Next, DeviceID: "d", Done: done}); err != nil {
				t.Errorf("Query from Done: %v", err)
			}
		}
	}
	if err := e.o.Query(Query{MessageID: "q0", DeviceID: "d", Done: done}); err != nil {
		t.Fatal(err)
	}
	e.expectSend("q0", 1)
	e.o.AckMessage("d", face.Ack{MessageID: "q0", Next: "a"})
	e.expectSend("qa", 1) // sent before AckMessage returned
	e.o.AckMessage("d", face.Ack{MessageID: "qa"})
	if got := []string{<-pages, <-pages}; got[0] != "a" || got[1] != "" || n != 1 {
		t.Fatalf("pages %v", got)
	}
}

// An ordinary ack passed whole (AckMessage, as the links do) allocates no more than Ack,
// also while a query is pending elsewhere: the whole ack stays off the heap.
func TestAckMessageAllocatesNoMoreThanAck(t *testing.T) {
	snd := &nbNopSender{}
	o, err := Open(t.TempDir(), snd, &Options{Journal: fastJournal(), CompactAfter: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	const n = 300
	tasks := make([]Task, n)
	for i := range tasks {
		tasks[i] = benchTask(i)
		tasks[i].DeviceID, tasks[i].PersonID = "dev", ""
	}
	for _, err := range o.EnqueueBatch(tasks) {
		if err != nil {
			t.Fatal(err)
		}
	}
	o.Heartbeat("dev")
	// A query pending on another device puts the acks through the query lookup.
	if err := o.Query(Query{MessageID: "q", DeviceID: "other", Done: func(face.Ack, error) {}}); err != nil {
		t.Fatal(err)
	}
	measure := func(ack func(id string)) float64 {
		return testing.AllocsPerRun(100, func() { ack(snd.last.MessageID) })
	}
	viaAck := measure(func(id string) { o.Ack("dev", id, 0, "") })
	viaMessage := measure(func(id string) { o.AckMessage("dev", face.Ack{MessageID: id}) })
	if viaMessage > viaAck {
		t.Fatalf("allocations per ack and next send: AckMessage %.2f, Ack %.2f", viaMessage, viaAck)
	}
	t.Logf("allocations per ack and next send: AckMessage %.2f, Ack %.2f", viaMessage, viaAck)
}
