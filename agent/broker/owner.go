package broker

import (
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// sessionOwners keeps a client id to the user whose session holds it.
//
// mochi v2.7.9 hands a session to whoever connects with its client id (inheritClientSession
// compares nothing): a terminal's credentials and the back office's id would get the back
// office's queued results, and the back office then none; any user could disconnect any
// other connection the same way. A CONNECT whose client id is held by another user (a connected
// client, a kept session whose client is offline, one restored from the sessions journal:
// each is in mochi's client list with the user name it connected with) is refused with
// CONNACK 0x85 (3.1.1: 0x02) before mochi takes anything over. Anonymous clients are the
// user "": an anonymous client cannot take an authenticated user's id, nor the reverse.
//
// The check runs in the auth hook's AuthenticateConnect, after the password, and mochi
// adds the client to its list a few calls later on the same goroutine. Two users connecting
// with a free id at the same moment would both pass a check of the list alone; so the first
// to pass claims the id until its client is in the list (OnSessionEstablished) or gone.
type sessionOwners struct {
	srv *mqtt.Server

	mu     sync.Mutex
	claims map[string]*mqtt.Client // client id → a client past the check, not yet in the list
	sweep  int                     // claims at the last sweep; the next comes at twice as many
}

func newSessionOwners(srv *mqtt.Server) *sessionOwners {
	return &sessionOwners{srv: srv, claims: make(map[string]*mqtt.Client)}
}

// admit reports whether cl may use its client id. When it may not, holder is the user
// name of the client or session holding it.
func (o *sessionOwners) admit(cl *mqtt.Client) (holder string, ok bool) {
	user := string(cl.Properties.Username)
	o.mu.Lock()
	defer o.mu.Unlock()
	if held, found := o.srv.Clients.Get(cl.ID); found && held != cl {
		if h := string(held.Properties.Username); h != user {
			return h, false
		}
	}
	if c := o.claims[cl.ID]; c != nil && c != cl && o.live(c) {
		if h := string(c.Properties.Username); h != user {
			return h, false
		}
	}
	o.claims[cl.ID] = cl
	if len(o.claims) > 2*o.sweep+64 {
		o.sweepLocked()
	}
	return "", true
}

// live reports whether a claim still stands: its client neither gone nor in the list (where
// the list itself speaks for it).
func (o *sessionOwners) live(c *mqtt.Client) bool {
	if c.Closed() {
		return false
	}
	held, ok := o.srv.Clients.Get(c.ID)
	return !ok || held != c
}

// sweepLocked drops claims that no longer stand: those of clients whose CONNACK could not
// be written (mochi ends them without OnSessionEstablished or OnDisconnect).
func (o *sessionOwners) sweepLocked() {
	for id, c := range o.claims {
		if !o.live(c) {
			delete(o.claims, id)
		}
	}
	o.sweep = len(o.claims)
}

// release ends cl's claim once it is in mochi's client list, or gone.
func (o *sessionOwners) release(cl *mqtt.Client) {
	o.mu.Lock()
	if o.claims[cl.ID] == cl {
		delete(o.claims, cl.ID)
	}
	o.mu.Unlock()
}
