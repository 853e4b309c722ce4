package intake

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// memDesired is a Desired in memory: device -> person id -> name. maxPersons > 0 refuses a
// list growing past it; flushes counts Flush calls.
type memDesired struct {
	mu         sync.Mutex
	lists      map[string]map[string]string
	maxPersons int
	flushes    int
}

func (d *memDesired) Apply(t *wire.Task) (func() error, *wire.WhitelistCounts, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lists == nil {
		d.lists = map[string]map[string]string{}
	}
	l := d.lists[t.DeviceID]
	if l == nil {
		l = map[string]string{}
		d.lists[t.DeviceID] = l
	}
	prev, had := l[t.Person.ID]
	restore := func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if had {
			l[t.Person.ID] = prev
		} else {
			delete(l, t.Person.ID)
		}
		return nil
	}
	switch t.Op {
	case face.AddPerson:
		if !had && d.maxPersons > 0 && len(l) >= d.maxPersons {
			return nil, nil, fmt.Errorf("%w: too many persons", ErrRefused)
		}
		l[t.Person.ID] = t.Person.Name
	case face.DeletePerson:
		delete(l, t.Person.ID)
	default:
		return nil, nil, fmt.Errorf("%w: op %s", ErrRefused, t.Op)
	}
	return restore, nil, nil
}

func (d *memDesired) Flush() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.flushes++
	return nil
}

func (d *memDesired) list(dev string) map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.lists[dev])
}

func add(task, dev, id, name string) []byte {
	return fmt.Appendf(nil, `{"taskId":%q,"deviceId":%q,"op":"AddPerson","person":{"id":%q,"name":%q}}`, task, dev, id, name)
}

func del(task, dev, id string) []byte {
	return fmt.Appendf(nil, `{"taskId":%q,"deviceId":%q,"op":"DeletePerson","person":{"id":%q}}`, task, dev, id)
}

// The desired whitelists follow the tasks in the order the outbox takes them: a set, a
// change, a delete; a message the outbox took already and that comes again after a later
// task for the same person changes nothing (the outbox keeps the first copy's place, so
// applying it again would leave the desired list unlike what the commands make of the
// terminal); each message's changes are flushed before it is taken.
func TestTakerKeepsDesiredInStepWithTheOutbox(t *testing.T) {
	ob := openOutbox(t, func(context.Context, string, outbox.Command) error { return nil }, "d1")
	take := NewTaker(Options{Devices: []string{"d1"}}, nil)
	d := &memDesired{}
	take.OpenDesired(d)
	take.Open(ob, &deadList{max: 10})
	ctx := context.Background()
	m1 := add("t1", "d1", "951", "Li Lei")
	for _, msg := range [][]byte{m1, add("t2", "d1", "952", "Han Meimei"), add("t3", "d1", "951", "Li Lei Jr"), del("t4", "d1", "952")} {
		if err := take.Accept(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"951": "Li Lei Jr"}
	if got := d.list("d1"); !maps.Equal(got, want) {
		t.Fatalf("desired %v, want %v", got, want)
	}
	if err := take.Accept(ctx, m1); err != nil { // redelivered after t3 changed the person
		t.Fatal(err)
	}
	if got := d.list("d1"); !maps.Equal(got, want) {
		t.Errorf("after a redelivery of t1: desired %v, want %v (t1's command is in the outbox before t3's)", got, want)
	}
	if d.flushes != 5 {
		t.Errorf("%d flushes for 5 messages", d.flushes)
	}
}

// A task the desired whitelists refuse is dead-lettered with their reason and never
// reaches the outbox; a task the outbox refuses over its bound leaves the desired list as
// it was, and the rest of the message is taken.
func TestTakerDesiredRefusalsChangeNothing(t *testing.T) {
	sends := make(chan string, 8)
	devs := map[string]outbox.DeviceConfig{"d1": {}, "d2": {}}
	ob, err := outbox.Open(t.TempDir(), outbox.SenderFunc(func(_ context.Context, _ string, c outbox.Command) error {
		sends <- c.MessageID
		return nil
	}), &outbox.Options{Journal: journal.Options{Sync: journal.SyncNone}, Devices: devs, MaxQueuedPerDevice: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ob.Close() })
	take := NewTaker(Options{Devices: []string{"d1", "d2"}}, nil)
	d := &memDesired{maxPersons: 1}
	dead := &deadList{max: 10}
	take.OpenDesired(d)
	take.Open(ob, dead)
	ctx := context.Background()
	// d1: the first add fits both; the second is over the desired bound.
	msg := fmt.Appendf(nil, "[%s,%s]", add("t1", "d1", "1", "A"), add("t2", "d1", "2", "B"))
	if err := take.Accept(ctx, msg); err != nil {
		t.Fatal(err)
	}
	// d2: the outbox holds one unfinished command per device: the second is refused there,
	// and its change to the desired list undone (a change of person 1 back to "C").
	msg = fmt.Appendf(nil, "[%s,%s]", add("t3", "d2", "1", "C"), add("t4", "d2", "1", "D"))
	if err := take.Accept(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if got, want := d.list("d1"), map[string]string{"1": "A"}; !maps.Equal(got, want) {
		t.Errorf("d1 desired %v, want %v", got, want)
	}
	if got, want := d.list("d2"), map[string]string{"1": "C"}; !maps.Equal(got, want) {
		t.Errorf("d2 desired %v, want %v", got, want)
	}
	dead.mu.Lock()
	defer dead.mu.Unlock()
	if len(dead.list) != 2 {
		t.Fatalf("deadletters %q, want 2", dead.list)
	}
	for i, want := range []string{`"reason":"over a bound: too many persons"`, `"reason":"over a bound: outbox: device queue full: device d2 has 1 unfinished commands`} {
		if !strings.Contains(dead.list[i], want) {
			t.Errorf("deadletter %d: %s, want %s", i, dead.list[i], want)
		}
	}
	if st, _ := ob.DeviceStatus("d1"); st.Queued+len(st.InFlight) != 1 {
		t.Errorf("d1: the refused task reached the outbox: %+v", st)
	}
}
