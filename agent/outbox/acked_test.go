package outbox

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// ackLog records Options.Acked's calls.
type ackLog struct {
	mu  sync.Mutex
	got []string
}

func (l *ackLog) acked(dev string, cmd Command, code int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintf("%s/%s %s %s %s code %d", dev, cmd.MessageID, cmd.Op, cmd.PersonID, cmd.Payload, code))
}

func (l *ackLog) calls() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

// Acked is told of every command with a result that an ack finished, succeeded or
// refused, with its payload as sent; never of a command without a result, of a second
// ack, of a command that failed for want of an ack, nor of a late ack after a restart
// sent it again (the payload then comes from the table).
func TestAckedTellsAckedTasks(t *testing.T) {
	var l ackLog
	e := newEnv(t, Options{Journal: fastJournal(), Acked: l.acked, Settings: Settings{MaxTries: 1}})
	e.enqueue("t1", "d", "p1")
	e.enqueueSilent("c1", "d", "p2")
	e.enqueue("t2", "d", "p3")
	e.enqueue("t3", "d", "p4")
	e.enqueue("t4", "d", "p5")
	e.o.Heartbeat("d")
	e.expectSend("t1", 1)
	e.o.Ack("d", "t1", 0, "")
	e.o.Ack("d", "t1", 0, "") // a second ack: ignored
	// The tasks go before the correction never sent (see Task.NoResult).
	e.expectSend("t2", 1)
	e.o.Ack("d", "t2", 17, "no")
	e.expectSend("t3", 1)
	e.clock.Advance(e.o.Settings().RetryInterval + 1) // no ack: failed, not told
	e.expectSend("t4", 1)
	e.restart()
	e.o.Ack("d", "t4", 5, "late") // sent before the restart: its payload read from the table
	e.expectSend("c1", 1)
	e.o.Ack("d", "c1", 17, "no")
	want := []string{
		`d/t1 AddPerson p1 {"id":"p1"} code 0`,
		`d/t2 AddPerson p3 {"id":"p3"} code 17`,
		`d/t4 AddPerson p5 {"id":"p5"} code 5`,
	}
	if got := l.calls(); !slices.Equal(got, want) {
		t.Fatalf("Acked calls\n%q\nwant\n%q", got, want)
	}
}
