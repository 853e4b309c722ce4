package outbox

import (
	"errors"
	"testing"
	"time"
)

// A batch whose Send fails counts a failed try for its tasks at once, also when its first
// task was finished meanwhile by a late ack of its own earlier single send (the slot then
// holds the batch's second task): the batch does not wait for its ack timeout.
func TestBatchFailedSendAfterItsFirstTaskWasAckedAlone(t *testing.T) {
	be := newBatchEnv(t, Settings{MaxBatch: 30, RetryInterval: time.Second, MaxTries: 5}, 0, DeviceConfig{}, nil)
	be.add("m1", "AddPerson", "p1", "")
	be.hello() // no batch announced: m1 goes alone
	if first := be.snd.next(t); first.MessageID != "m1" || first.Op != "AddPerson" {
		t.Fatalf("sent %s %s, want m1 alone", first.MessageID, first.Op)
	}
	be.add("m2", "AddPerson", "p2", "")
	be.add("m3", "AddPerson", "p3", "")
	be.batch = 30
	be.hello()

	// m1's ack is lost; its retry goes with m2 and m3. While that batch is on its way, m1's
	// first ack arrives after all, and then the batch's Send fails.
	be.snd.mu.Lock()
	be.snd.during = func(c Command) error {
		if c.Op != "AddPersons" {
			return nil
		}
		be.o.Ack("d", "m1", 0, "")
		return errors.New("link down")
	}
	be.snd.mu.Unlock()
	batch := be.advanceUntilSent(10 * time.Second)
	if got := shape(t, []Command{batch}); got != "AddPersons(p1,p2,p3)" {
		t.Fatalf("sent %s, want the batch of the three", got)
	}
	be.snd.mu.Lock()
	be.snd.during = nil
	be.snd.mu.Unlock()
	if st := be.status("d"); st.InFlightTasks != 0 || st.Queued != 2 {
		t.Fatalf("after the batch's failed Send: %d tasks in flight, %d queued; want its two tasks back in the queue",
			st.InFlightTasks, st.Queued)
	}
	again := be.advanceUntilSent(10 * time.Second)
	if got := shape(t, []Command{again}); got != "AddPersons(p2,p3)" {
		t.Fatalf("then sent %s, want the batch of the two left", got)
	}
	a, ok := be.term.handle(again)
	if !ok {
		t.Fatal("the terminal did not answer the batch")
	}
	be.o.AckMessage("d", a)
	res := be.resultsByID()
	if r := res["m1"]; r.Status != Succeeded {
		t.Errorf("m1: %+v", r)
	}
	for _, id := range []string{"m2", "m3"} {
		if r := res[id]; r.Status != Succeeded || r.Tries != 2 {
			t.Errorf("%s: %+v, want succeeded at its second try (the failed Send counted)", id, r)
		}
	}
}
