package broker

import (
	"errors"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// Answers to changes of persistent keys, before the request's PUBACK.
//
// A request that changes a key kept with aio-persistence is answered by the store's
// persistence goroutine once the snapshot holding the change is fsynced (DoDurable), after
// the requester's read loop has moved on. mochi (patched: PUBACK after storing) asks every
// AckWaiter before it writes a client's held acknowledgements; the service's WaitBeforeAck
// holds them until the answers to that connection's persistent changes are published, then
// waits for the answers' records (the session store's WaitBeforeAck, which the answers
// registered as they were routed). So a PUBACK means the change is on disk and its answer
// stored for the requester's session: after a crash the resumed session gets it. Only the
// requesting connection's read loop waits, for one snapshot and one group commit per burst.
//
// A session that ends with its connection is not waited for: it has no record to keep the
// answer in, and a crash ends the connection that would have read it.

// errAnswersPending ends WaitBeforeAck while answers are still due: mochi writes none of
// the held acknowledgements and disconnects the client, which sends the requests again.
var errAnswersPending = errors.New("state store: answers to persistent changes not yet published")

// answerWaits counts, per connection, the answers to its persistent changes that the
// persistence goroutine has not published yet. An answer's callback holds its count
// (answersDue), never the connection: while snapshot writes fail an answer may wait for
// hours, and a connection that left meanwhile is forgotten (forget) rather than kept with
// its queues until then.
type answerWaits struct {
	mu      sync.Mutex
	pending map[*mqtt.Client]*answersDue
}

type answersDue struct {
	n    int           // answers counted and not yet published
	idle chan struct{} // closed when n comes back to 0; made by the first waiter
}

// due counts one answer due to cl, before the request that needs it is served (the
// persistence goroutine may answer at once), and returns the count for answered.
func (a *answerWaits) due(cl *mqtt.Client) *answersDue {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.pending[cl]
	if w == nil {
		if a.pending == nil {
			a.pending = make(map[*mqtt.Client]*answersDue)
		}
		w = &answersDue{}
		a.pending[cl] = w
	}
	w.n++
	return w
}

// answered takes one answer off w: published, or not due after all (the request needed
// no snapshot).
func (a *answerWaits) answered(w *answersDue) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.n--; w.n == 0 && w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
}

// idle returns a channel closed once cl has no answer due; nil when it has none now (its
// entry then goes).
func (a *answerWaits) idle(cl *mqtt.Client) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.pending[cl]
	if w == nil {
		return nil
	}
	if w.n <= 0 {
		delete(a.pending, cl)
		return nil
	}
	if w.idle == nil {
		w.idle = make(chan struct{})
	}
	return w.idle
}

// forget drops cl's count: cl has left, nothing more is acknowledged to it (mochi flushes
// its held acknowledgements before OnDisconnect).
func (a *answerWaits) forget(cl *mqtt.Client) {
	a.mu.Lock()
	delete(a.pending, cl)
	a.mu.Unlock()
}

// waitsForAnswer reports whether cl's PUBACKs wait for the answers to its persistent
// changes: with a session store, for a session that outlives its connection.
func (s *service) waitsForAnswer(cl *mqtt.Client) bool {
	return s.records != nil && !sessionEndsWithConnection(cl)
}

// WaitBeforeAck returns once the answers to cl's persistent changes are published and
// their records committed. It gives up, with an error, when cl is closed (nothing can be
// written to it), when the broker is closing, or after answerTimeout (the snapshot cannot
// be written): mochi then writes none of the held PUBACKs and the client sends the requests
// again.
func (s *service) WaitBeforeAck(cl *mqtt.Client) error {
	idle := s.answers.idle(cl)
	if idle == nil {
		return nil
	}
	if cl.Closed() {
		return errAnswersPending
	}
	timer := time.NewTimer(s.answerTimeout)
	defer timer.Stop()
	select {
	case <-idle:
	case <-s.closing:
		return errAnswersPending
	case <-timer.C:
		s.log.Error("state store: persistent changes not answered in time (their snapshot is not written); the requester is not acknowledged and is disconnected",
			"client", cl.ID, "timeout", s.answerTimeout)
		return errAnswersPending
	}
	return s.records.WaitBeforeAck(cl)
}

// shutdown ends the waits of WaitBeforeAck: the broker is closing.
func (s *service) shutdown() {
	s.closeOnce.Do(func() { close(s.closing) })
}
