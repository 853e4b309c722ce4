package intake

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// deadList is a DeadLetters that keeps the deadletters in memory, with room for max.
type deadList struct {
	mu   sync.Mutex
	max  int
	list []string
}

var errNoRoom = errors.New("deadletter backlog full")

func (d *deadList) Room(n, _ int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.list)+n > d.max {
		return errNoRoom
	}
	return nil
}

func (d *deadList) Add(dl [][]byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, b := range dl {
		d.list = append(d.list, string(b))
	}
	return nil
}

// openOutbox opens a real outbox (journal without fsync) for devices, sending with send.
func openOutbox(t *testing.T, send outbox.SenderFunc, devices ...string) *outbox.Outbox {
	t.Helper()
	devs := map[string]outbox.DeviceConfig{}
	for _, id := range devices {
		devs[id] = outbox.DeviceConfig{}
	}
	ob, err := outbox.Open(t.TempDir(), send, &outbox.Options{Journal: journal.Options{Sync: journal.SyncNone}, Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ob.Close() })
	return ob
}

// TestTakerStoresEachTaskCommand: each task of a batch reaches its terminal as its own
// command (the payloads are encoded into one buffer for the batch), byte for byte what
// the task's command encodes to alone.
func TestTakerStoresEachTaskCommand(t *testing.T) {
	sent := make(chan outbox.Command, 8)
	ob := openOutbox(t, func(_ context.Context, _ string, c outbox.Command) error {
		c.Payload = append([]byte(nil), c.Payload...) // the outbox's own, kept for retries
		sent <- c
		return nil
	}, "d1", "d2", "d3")
	take := NewTaker(Options{Devices: []string{"d1", "d2", "d3"}}, nil)
	take.Open(ob, &deadList{max: 10})

	msg := []byte(`[{"taskId":"t1","deviceId":"d1","op":"AddPerson","person":{"id":"1","name":"Li Lei","validFrom":"2026-01-01T00:00:00Z"}},` +
		`{"taskId":"t2","deviceId":"d2","op":"DeletePerson","person":{"id":"22"}},` +
		`{"taskId":"t3","deviceId":"d3","op":"AddPerson","person":{"id":"333","name":"Han Meimei","validTo":"2027-01-01T00:00:00Z"}}]`)
	want := wire.Parse(msg, wire.Limits{})
	if len(want.Tasks) != 3 {
		t.Fatalf("test batch: %+v", want)
	}
	if err := take.Accept(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d1", "d2", "d3"} {
		ob.Heartbeat(id)
	}
	got := map[string]outbox.Command{}
	for range 3 {
		select {
		case c := <-sent:
			got[c.DeviceID] = c
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 3 commands sent within 10 s", len(got))
		}
	}
	for i, task := range want.Tasks {
		c, ok := got[task.DeviceID]
		if !ok {
			t.Fatalf("no command for %s", task.DeviceID)
		}
		cmd := want.Command(i)
		alone, err := cmd.AppendMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(c.Payload) != string(alone) {
			t.Errorf("%s: payload %x, want %x", task.TaskID, c.Payload, alone)
		}
		if back, err := face.ParseCommandMsg(c.Payload); err != nil || !back.Equal(&cmd) {
			t.Errorf("%s: command %+v (%v), want %+v", task.TaskID, back, err, cmd)
		}
	}
}

// A message is taken whole or not at all: its refused tasks' deadletters must fit first, or
// its good tasks are not stored either; before Open, after Close, nothing is taken; while
// draining every task is dead-lettered; the counters count what was taken and refused.
func TestTakerTakesAMessageWholeOrNotAtAll(t *testing.T) {
	ob := openOutbox(t, func(context.Context, string, outbox.Command) error { return nil }, "d1")
	m := NewMetrics(metrics.NewRegistry())
	take := NewTaker(Options{Devices: []string{"d1"}}, m)
	good := []byte(`{"taskId":"g1","deviceId":"d1","op":"AddPerson","person":{"id":"5"}}`)
	if err := take.Accept(context.Background(), good); !errors.Is(err, ErrNotReady) {
		t.Fatalf("before Open: %v", err)
	}
	dead := &deadList{max: 0}
	take.Open(ob, dead)
	mixed := []byte(`[{"taskId":"b1","deviceId":"nope","op":"AddPerson","person":{"id":"1"}},` + string(good) + `]`)
	if err := take.Accept(context.Background(), mixed); !errors.Is(err, errNoRoom) {
		t.Fatalf("no room for the deadletter: %v", err)
	}
	if st, _ := ob.DeviceStatus("d1"); st.Queued+len(st.InFlight) != 0 {
		t.Fatalf("a refused message's good task was stored: %+v", st)
	}
	dead.mu.Lock()
	dead.max = 10
	dead.mu.Unlock()
	var touched []string
	take.OnTouched(func(id string) { touched = append(touched, id) })
	if err := take.Accept(context.Background(), mixed); err != nil {
		t.Fatal(err)
	}
	if st, _ := ob.DeviceStatus("d1"); st.Queued+len(st.InFlight) != 1 {
		t.Errorf("the good task was not stored: %+v", st)
	}
	if len(dead.list) != 1 {
		t.Fatalf("deadletters %q, want one", dead.list)
	}
	if dl, err := wire.ParseDeadLetter([]byte(dead.list[0])); err != nil || dl.Reason != `task 0: unknown device "nope"` {
		t.Errorf("deadletter %s: %+v %v", dead.list[0], dl, err)
	}
	if len(touched) != 1 || touched[0] != "d1" {
		t.Errorf("touched %v, want [d1]", touched)
	}

	take.SetDraining(true)
	if !take.Draining() {
		t.Error("Draining after SetDraining(true)")
	}
	if err := take.Accept(context.Background(), []byte(`{"taskId":"g2","deviceId":"d1","op":"AddPerson","person":{"id":"6"}}`)); err != nil {
		t.Fatal(err)
	}
	if dl, err := wire.ParseDeadLetter([]byte(dead.list[1])); err != nil || dl.Reason != "gateway draining: not taking new tasks" {
		t.Errorf("while draining: deadletter %s: %+v %v", dead.list[1], dl, err)
	}
	if a, r := m.Accepted.Value(), m.Rejected.Value(); a != 1 || r != 2 {
		t.Errorf("accepted %d, rejected %d; want 1 and 2", a, r)
	}
	take.Close()
	if err := take.Accept(context.Background(), good); !errors.Is(err, ErrNotReady) {
		t.Fatalf("after Close: %v", err)
	}
}
