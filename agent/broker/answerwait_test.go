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
// with nothing due does not wait, nor does one whose request needed no snapshot after all.
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

	notDue := newConn("not-due")
	s.answers.answered(s.answers.due(notDue)) // the request needed no snapshot after all
	if err := result("not due after all", wait(notDue), waitFor); err != nil {
		t.Fatalf("not due after all: %v", err)
	}

	answered := newConn("answered")
	first, second := s.answers.due(answered), s.answers.due(answered)
	done := wait(answered)
	s.answers.answered(first)
	select {
	case err := <-done:
		t.Fatalf("returned (%v) with one answer still due", err)
	case <-time.After(bound / 4):
	}
	s.answers.answered(second)
	if err := result("answers published", done, waitFor); err != nil {
		t.Fatalf("answers published: %v", err)
	}

	unanswered := newConn("unanswered")
	s.answers.due(unanswered)
	if err := result("never answered", wait(unanswered), bound+waitFor); !errors.Is(err, errAnswersPending) {
		t.Fatalf("never answered: %v, want %v", err, errAnswersPending)
	}

	closed := newConn("closed")
	s.answers.due(closed)
	closed.Stop(errors.New("gone"))
	if err := result("closed connection", wait(closed), bound/2); !errors.Is(err, errAnswersPending) {
		t.Fatalf("closed connection: %v, want %v", err, errAnswersPending)
	}

	closing := newConn("closing")
	s.answers.due(closing)
	done = wait(closing)
	s.shutdown()
	if err := result("broker closing", done, bound/2); !errors.Is(err, errAnswersPending) {
		t.Fatalf("broker closing: %v, want %v", err, errAnswersPending)
	}
}
