package broker

import (
	"fmt"
	"log/slog"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
)

// restoreBounds holds the sessions journal's replay to the broker's bounds, so that a
// restart never needs more memory than they allow, whatever the journal holds (one written
// with larger bounds, or without any: then a client with a huge number of subscriptions
// would cost their memory again at every start).
//
// It sees every change as the journal replays it, in the journal's order, and keeps a put
// only if the state so far leaves room for it (mochi's counting, bounds.go in the fork):
//
//   - a client id takes one of MaxClients slots with its first record of any kind, and
//     gives it back when all its records are deleted (the session ended); the records of
//     a client id beyond them are dropped, the whole session;
//   - a subscription beyond a session's MaxSubscriptions, or one, a message or a will
//     (the client record) beyond its MaxSessionBytes or MaxQueuedBytes over all sessions,
//     is dropped: the newest, as a full session drops new messages at run time;
//   - a retained message beyond MaxRetainedBytes is dropped.
//
// A put that replaces a live record and does not fit is dropped, the old record kept. A
// delete frees its record's room. What was dropped is logged once, with counts, and the
// journal is compacted to what was kept, so it does not come back.
//
// In a journal appended to in order, "first" is the oldest; a snapshot's records are in no
// order, so which of a session's records survive then is arbitrary, within the bounds.
type restoreBounds struct {
	maxClients, maxSession, maxQueued, maxRetained int64
	maxSubscriptions                               int

	sessions map[string]*restoreSession
	cost     map[string]int64 // live key → what it counts
	queued   int64            // over all sessions
	retained int64

	dropped restoreDrops
}

// restoreSession is what one client id holds so far.
type restoreSession struct {
	bytes         int64
	subscriptions int
	records       int  // records kept and not deleted since: at 0 the slot is free again
	refused       bool // beyond MaxClients: every record dropped
}

// restoreDrops counts what the replay dropped.
type restoreDrops struct {
	sessions, subscriptions, messages, wills, retained int
	bytes                                              int64
}

func (d restoreDrops) any() bool {
	return d.sessions+d.subscriptions+d.messages+d.wills+d.retained > 0
}

// newRestoreBounds returns the bounds of caps (mochi's: 0 is none).
func newRestoreBounds(caps *mqtt.Capabilities) *restoreBounds {
	return &restoreBounds{
		maxClients: caps.MaximumClients, maxSession: caps.MaximumSessionBytes,
		maxQueued: caps.MaximumQueuedBytes, maxRetained: caps.MaximumRetainedBytes,
		maxSubscriptions: int(caps.MaximumSubscriptions),
		sessions:         make(map[string]*restoreSession), cost: make(map[string]int64),
	}
}

// admit reports whether op, the next change replayed, is applied.
func (r *restoreBounds) admit(op sessionOp) bool {
	kind, client, rest, err := parseKey(op.key)
	if err != nil {
		return true // apply reports nothing either; decoding the value fails later, by name
	}
	old, had := r.cost[op.key]
	if op.value == nil {
		if had {
			r.account(r.sessions[client], kind, -old)
			delete(r.cost, op.key)
			r.forget(client, kind)
		}
		return true // a record never kept: nothing to delete
	}
	var s *restoreSession
	if kind != kindRetained {
		if s = r.session(client); s.refused {
			return false
		}
	}
	cost, err := recordCost(kind, rest, op.value)
	if err != nil {
		return true // kept: mochi's load names the bad record
	}
	if !r.fits(s, kind, had, cost-old) {
		r.countDrop(kind, cost)
		return false
	}
	r.account(s, kind, cost-old)
	r.cost[op.key] = cost
	if !had && s != nil {
		s.records++
	}
	return true
}

// forget notes that a kept record of client was deleted. A session whose records are all
// deleted has ended: its slot goes, as mochi forgets an ended session, so that sessions
// that came and went earlier in the journal do not count against MaxClients.
func (r *restoreBounds) forget(client string, kind byte) {
	if kind == kindRetained {
		return
	}
	if s := r.sessions[client]; s != nil && !s.refused {
		if s.records--; s.records <= 0 {
			delete(r.sessions, client)
		}
	}
}

// session returns client's slot, taking one if it has none and one is free (a client
// beyond them gets one marked refused, so that all its records are dropped).
func (r *restoreBounds) session(client string) *restoreSession {
	s := r.sessions[client]
	if s != nil {
		return s
	}
	s = &restoreSession{}
	if r.maxClients > 0 && int64(r.kept()) >= r.maxClients {
		s.refused = true
		r.dropped.sessions++
	}
	r.sessions[client] = s
	return s
}

// kept returns the number of client ids with a slot.
func (r *restoreBounds) kept() int { return len(r.sessions) - r.dropped.sessions }

// fits reports whether delta more bytes (and, for a new subscription, one more) fit.
func (r *restoreBounds) fits(s *restoreSession, kind byte, replace bool, delta int64) bool {
	if kind == kindRetained {
		return r.maxRetained <= 0 || r.retained+delta <= r.maxRetained
	}
	if kind == kindSubscription && !replace && r.maxSubscriptions > 0 && s.subscriptions >= r.maxSubscriptions {
		return false
	}
	if r.maxSession > 0 && s.bytes+delta > r.maxSession {
		return false
	}
	return r.maxQueued <= 0 || r.queued+delta <= r.maxQueued
}

// account adds delta bytes of a record of kind (a subscription's count with its sign).
func (r *restoreBounds) account(s *restoreSession, kind byte, delta int64) {
	if kind == kindRetained {
		r.retained += delta
		return
	}
	s.bytes += delta
	r.queued += delta
	if kind == kindSubscription {
		switch {
		case delta > 0:
			s.subscriptions++
		case delta < 0:
			s.subscriptions--
		}
	}
}

// countDrop counts a dropped put.
func (r *restoreBounds) countDrop(kind byte, cost int64) {
	r.dropped.bytes += cost
	switch kind {
	case kindSubscription:
		r.dropped.subscriptions++
	case kindInflight:
		r.dropped.messages++
	case kindClient:
		r.dropped.wills++
	case kindRetained:
		r.dropped.retained++
	}
}

// recordCost is what a record counts against the bounds, as mochi counts it once loaded.
func recordCost(kind byte, rest string, value []byte) (int64, error) {
	switch kind {
	case kindClient:
		var c storage.Client
		if err := c.UnmarshalBinary(value); err != nil {
			return 0, err
		}
		w := mqtt.Will(c.Will)
		return mqtt.WillBytes(&w), nil
	case kindSubscription:
		return mqtt.SubscriptionBytes(rest), nil
	case kindInflight, kindRetained:
		var m storage.Message
		if err := m.UnmarshalBinary(value); err != nil {
			return 0, err
		}
		pk := m.ToPacket()
		if kind == kindRetained {
			return mqtt.RetainedBytes(&pk), nil
		}
		return mqtt.MessageBytes(&pk), nil
	}
	return 0, fmt.Errorf("%w: unknown kind %q", errBadSessionRecord, kind)
}

// report logs what was dropped, once.
func (r *restoreBounds) report(log *slog.Logger, dir string) {
	d := r.dropped
	log.Warn("broker: the sessions journal holds more than the broker's bounds allow; dropped at start (max_clients, max_subscriptions, max_session_bytes, max_queued_bytes, max_retained_bytes)",
		"dir", dir, "sessions", d.sessions, "subscriptions", d.subscriptions, "messages", d.messages,
		"wills", d.wills, "retained", d.retained, "bytes", d.bytes)
}
