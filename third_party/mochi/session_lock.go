// SPDX-License-Identifier: MIT

package mqtt

import "sync"

// sessionLocks serialise, for one client id, the changes of which connection holds its
// session: a CONNECT taking a session over or starting one (from OnSessionEstablish to
// the client's registration in Clients), a SUBSCRIBE's or UNSUBSCRIBE's change of the
// session's subscriptions, a clean session ending with its connection, and an expiry.
// Each holder checks, under the lock, that its client still holds the session
// (IsTakenOver, or that it is the one registered).
//
// faceagent patch (session takeover): upstream changed these with nothing between them.
// Two CONNECTs of one client id at once (a client retrying while its first CONNECT waited
// for an old connection's DISCONNECT, up to disconnectWriteGrace, or for the session's
// storage) both took the old session over, and both were registered, the second replacing
// the first in Clients: the first stayed connected, routed nothing, and when it ended its
// session's bytes stayed counted for good (a clean one removed the other's subscriptions
// from the topics index, which are keyed by client id). A SUBSCRIBE handled on the old
// connection after a takeover had copied its subscriptions added one to the index that no
// session held (and counted it in the old session for good); an UNSUBSCRIBE removed the new
// connection's. An expiry racing a resumption removed the resumed session's subscriptions.
//
// A lock is held while the hooks that store sessions wait for storage (ConnackWaiter) and
// while an old connection is sent its DISCONNECT: only other connections of the same id
// wait for it.
type sessionLocks struct {
	mu    sync.Mutex
	locks map[string]*sessionLock
}

// sessionLock is one client id's lock, with the number of its holders and waiters (the map
// entry goes with the last).
type sessionLock struct {
	sync.Mutex
	refs int
}

// lock takes id's lock and returns the function that gives it back.
func (l *sessionLocks) lock(id string) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = make(map[string]*sessionLock)
	}
	k := l.locks[id]
	if k == nil {
		k = new(sessionLock)
		l.locks[id] = k
	}
	k.refs++
	l.mu.Unlock()
	k.Lock()
	return func() {
		k.Unlock()
		l.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(l.locks, id)
		}
		l.mu.Unlock()
	}
}

// held returns the number of client ids whose lock is held or waited for.
func (l *sessionLocks) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.locks)
}
