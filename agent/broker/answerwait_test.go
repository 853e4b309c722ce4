package broker

import (
	"errors"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// The wait for the answers to a connection's persistent changes ends when they are
// published, and otherwise with errAnswersPending (mochi then writes none of the held
// PUBACKs and disconnects the client): after the bound (WriteTimeout) when the snapshot is
// not written, at once for a closed connection, and when the broker closes. A connection
// with nothing due does not wait, nor does one whose answers came before its requests were
// counted (the persistence goroutine may answer before the read loop counts).
func TestAnswerWaitEnds(t *testing.T) {
	const bound = 200 * time.Millisecond
	b := startBroker(t, Options{DataDir: t.TempDir(), WriteTimeout: bound})
	s := b.service
	if s.records == nil {
		t.Fatal("the service does not wait for the session store")
	}
	newConn := func(id string) *mqtt.Client {
		cl := b.Server().NewClient(nil, "test", id, false)
		cl.Properties.ProtocolVersion = 5
		return cl
	}
	wait := func(cl *mqtt.Client) <-chan error {
		done := make(chan error, 1)
		go func() { done <- s.WaitBeforeAck(cl) }()
		return done
	}
	result := func(what string, done <-chan error, within time.Duration) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(within):
			t.Fatalf("%s: WaitBeforeAck still waiting after %v", what, within)
			return nil
		}
	}

	idle := newConn("idle")
	if err := result("nothing due", wait(idle), waitFor); err != nil {
		t.Fatalf("nothing due: %v", err)
	}

	early := newConn("early")
	s.answers.add(early, -1) // answered before the read loop counted it
	s.answers.add(early, 1)
	if err := result("answered before counted", wait(early), waitFor); err != nil {
		t.Fatalf("answered before counted: %v", err)
	}

	answered := newConn("answered")
	s.answers.add(answered, 1)
	s.answers.add(answered, 1)
	done := wait(answered)
	s.answers.add(answered, -1)
	select {
	case err := <-done:
		t.Fatalf("returned (%v) with one answer still due", err)
	case <-time.After(bound / 4):
	}
	s.answers.add(answered, -1)
	if err := result("answers published", done, waitFor); err != nil {
		t.Fatalf("answers published: %v", err)
	}

	unanswered := newConn("unanswered")
	s.answers.add(unanswered, 1)
	if err := result("never answered", wait(unanswered), bound+waitFor); !errors.Is(err, errAnswersPending) {
		t.Fatalf("never answered: %v, want %v", err, errAnswersPending)
	}

	closed := newConn("closed")
	s.answers.add(closed, 1)
	closed.Stop(errors.New("gone"))
	if err := result("closed connection", wait(closed), bound/2); !errors.Is(err, errAnswersPending) {
		t.Fatalf("closed connection: %v, want %v", err, errAnswersPending)
	}

	closing := newConn("closing")
	s.answers.add(closing, 1)
	done = wait(closing)
	s.shutdown()
	if err := result("broker closing", done, bound/2); !errors.Is(err, errAnswersPending) {
		t.Fatalf("broker closing: %v, want %v", err, errAnswersPending)
	}
}
