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
// persistence goroutine has not published yet.
type answerWaits struct {
	mu      sync.Mutex
	pending map[*mqtt.Client]*answersDue
}

type answersDue struct {
	n    int           // requests counted minus answers published (below 0 only briefly: see add)
	idle chan struct{} // closed when n comes back to 0; made by the first waiter
}

// add counts d answers due to cl (1 on the read loop once DoDurable says it waits, -1 from
// the persistence goroutine once one is published, which may come first).
func (a *answerWaits) add(cl *mqtt.Client, d int) {
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
	w.n += d
	if w.n == 0 {
		if w.idle != nil {
			close(w.idle)
		}
		delete(a.pending, cl)
	}
}

// idle returns a channel closed once cl has no answer due; nil when it has none now. On
// cl's read loop every request it counted came before, so the count is not below 0.
func (a *answerWaits) idle(cl *mqtt.Client) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.pending[cl]
	if w == nil || w.n <= 0 {
		return nil
	}
	if w.idle == nil {
		w.idle = make(chan struct{})
	}
	return w.idle
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
