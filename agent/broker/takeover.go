package broker

import (
	"bytes"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// takeoverGuard keeps QoS 1/2 messages that mochi loses while a client resumes its session.
//
// When a client reconnects to a persistent session, mochi v2.7.9 (inheritClientSession)
// marks the old client taken over, copies its in-flight messages to the new client, clears
// the old client's, and only then registers the new client. A message published meanwhile
// is routed to the old client: put in its in-flight set after the copy, then cleared or left
// there, and never sent. A back office that reconnects while results flow loses some — the
// field test saw 2 of 1,000 every time. The guard sees those messages in OnQosPublish and
// OnQosDropped of the taken-over client and hands them to the new client once it is
// registered (OnSessionEstablished), or at once when it already is. Redelivered messages
// may arrive after newer ones: at-least-once, not ordering, is what QoS 1 promises. A
// client that starts clean is handed none: they were its discarded session's.
//
// Each message goes to the new client once. OnQosDropped reports what the old set held
// when mochi cleared it, while the takeover is under way: deliver skips what the new
// client copied with the session (its set still holds it, its reader not started).
// OnQosPublish rescues only a message still in the old set (see rescue): a publisher's
// hooks may run long after it put the message in flight, when the new client was sent the
// copy and acknowledged it.
type takeoverGuard struct {
	mqtt.HookBase
	srv   *mqtt.Server
	store *sessionStore // persists redelivered messages; nil without a data dir
	log   *slog.Logger

	mu       sync.Mutex
	incoming map[string]*takeover // client id → a session being taken over
	settling map[string]*settling // client id → any takeover until the new client is registered
}

// settling holds back the old client's cleanup until the takeover has marked it.
//
// mochi v2.7.9 (inheritClientSession) disconnects the old client first and marks it taken
// over only afterwards. The old client's goroutine, woken by that disconnect, removes its
// session unless it is marked (attachClient: "expire && !cl.IsTakenOver()"): its
// subscriptions and its client id's entry in the client list — by then the new client's. The
// new client would then stay connected but receive nothing routed to it
// (TestRegistrationsEndWithTheConnection). The old client's OnDisconnect runs just
// before that check, so the guard makes it wait there until the new client is established.
type settling struct {
	next *mqtt.Client
	done chan struct{}
}

// settleTimeout bounds how long an old client's disconnect waits for its takeover.
const settleTimeout = 2 * time.Second

// takeover is one resumption in progress: the client taking over and what it must get.
type takeover struct {
	next    *mqtt.Client
	pending []packets.Packet
}

func newTakeoverGuard(srv *mqtt.Server, store *sessionStore, log *slog.Logger) *takeoverGuard {
	return &takeoverGuard{srv: srv, store: store, log: log,
		incoming: make(map[string]*takeover), settling: make(map[string]*settling)}
}

func (g *takeoverGuard) ID() string { return "faceagent-takeover" }

func (g *takeoverGuard) Provides(b byte) bool {
	switch b {
	case mqtt.OnSessionEstablish, mqtt.OnSessionEstablished, mqtt.OnQosPublish, mqtt.OnQosDropped, mqtt.OnDisconnect:
		return true
	}
	return false
}

// OnSessionEstablish runs before mochi takes the old session over.
func (g *takeoverGuard) OnSessionEstablish(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline {
		return
	}
	if _, ok := g.srv.Clients.Get(cl.ID); !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if prev := g.settling[cl.ID]; prev != nil {
		close(prev.done) // a takeover of a takeover: the first one's waiters go
	}
	g.settling[cl.ID] = &settling{next: cl, done: make(chan struct{})}
	if !pk.Connect.Clean { // a clean start discards the old session's messages by design
		t := &takeover{next: cl}
		// A takeover of a takeover: what the connection taken over was still to get (routed
		// to the one before it, delivered only once it is established, which it no longer
		// will be) goes to this one, which clones its in-flight set but not these.
		if prev := g.incoming[cl.ID]; prev != nil {
			t.pending = prev.pending
		}
		g.incoming[cl.ID] = t
	}
}

// settled ends the takeover to cl once cl is established or failed.
func (g *takeoverGuard) settled(cl *mqtt.Client) {
	g.mu.Lock()
	if s := g.settling[cl.ID]; s != nil && s.next == cl {
		close(s.done)
		delete(g.settling, cl.ID)
	}
	g.mu.Unlock()
}

// OnQosPublish catches a message routed to a client that was already taken over and that
// OnQosDropped does not report: one put in the old client's in-flight set after mochi
// cleared it (rescue, routed).
func (g *takeoverGuard) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, _ int) {
	if cl.IsTakenOver() && pk.FixedHeader.Type == packets.Publish {
		g.rescue(cl, pk, true)
	}
}

// OnQosDropped catches the messages mochi clears from the old client on takeover. mochi sets
// the taken-over mark before clearing only when the session is kept, so a clean start, whose
// messages are meant to go, never arrives here marked.
func (g *takeoverGuard) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	if cl.IsTakenOver() && pk.FixedHeader.Type == packets.Publish {
		g.rescue(cl, pk, false)
	}
}

// OnSessionEstablished hands the new client what was routed to the old one.
func (g *takeoverGuard) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	g.settled(cl)
	g.mu.Lock()
	t, ok := g.incoming[cl.ID]
	if ok && t.next == cl {
		delete(g.incoming, cl.ID)
	}
	g.mu.Unlock()
	if !ok || t.next != cl {
		return
	}
	for _, pk := range t.pending {
		g.deliver(cl, pk)
	}
}

// OnDisconnect forgets a takeover whose new client failed before it was established (mochi,
// patched, tells the hooks of that end too: "end of a failed connection"), and holds an old
// client whose session mochi would otherwise remove until its takeover marked it (see
// settling).
func (g *takeoverGuard) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	g.settled(cl)
	g.mu.Lock()
	s := g.settling[cl.ID]
	g.mu.Unlock()
	if s != nil && s.next != cl && expire {
		select {
		case <-s.done:
		case <-time.After(settleTimeout):
			g.log.Warn("a session takeover did not finish; the old client's cleanup goes on", "client", cl.ID)
		}
	}
	g.mu.Lock()
	t, ok := g.incoming[cl.ID]
	if ok && t.next == cl {
		delete(g.incoming, cl.ID)
	} else {
		ok = false
	}
	g.mu.Unlock()
	// A client that took a kept session over and ended before it was established (its
	// CONNACK could not be written) holds that session: mochi registered it. What was routed
	// to the connection it took over is the session's, as OnSessionEstablished would have
	// delivered it; it is sent when the client resumes.
	if ok && !expire {
		if held, found := g.srv.Clients.Get(cl.ID); found && held == cl {
			for _, pk := range t.pending {
				g.deliver(cl, pk)
			}
		}
	}
}

// rescue hands pk, routed to old after old was taken over, to the client taking the session
// over: kept for it until it is established, or delivered at once when it is.
//
// With routed (OnQosPublish), only while old's set still holds pk, under the guard's lock.
// mochi calls OnQosPublish after putting the message in flight, on the publisher's
// goroutine, and the hooks before the guard's (the session store's) take their time: the
// hooks of a message put in the set before the takeover copied it may run after the new
// client was sent that copy and acknowledged it. Rescued then, it was delivered a second
// time as a new message (a new packet id, no DUP): deliver's check finds in the new client's
// set only what it has not acknowledged. Such a message is no longer in old's set: mochi
// cleared it and OnQosDropped reported it while the takeover was under way, before the new
// client was established, which takes this lock to end the takeover: a message still in
// the set here, looked up under the lock, is either to be cleared (then both rescues keep
// one copy in pending) or was put there after the clearing, which nothing else reports.
func (g *takeoverGuard) rescue(old *mqtt.Client, pk packets.Packet, routed bool) {
	g.mu.Lock()
	if routed {
		if held, ok := old.State.Inflight.Get(pk.PacketID); !ok || !samePublish(held, pk) {
			g.mu.Unlock()
			return
		}
	}
	pk = pk.Copy(true)
	if t, ok := g.incoming[old.ID]; ok {
		for _, p := range t.pending {
			if p.PacketID == pk.PacketID && samePublish(p, pk) {
				g.mu.Unlock()
				return // seen twice: published after the mark, then cleared
			}
		}
		t.pending = append(t.pending, pk)
		g.mu.Unlock()
		return
	}
	// A clean start discards the session taken over, and with it what was routed to it
	// (the new client may not even subscribe to its topic): the one taking over, or the
	// one registered already once its takeover is settled.
	startedClean := false
	if s := g.settling[old.ID]; s != nil {
		startedClean = s.next.Properties.Clean
	}
	g.mu.Unlock()
	cl, ok := g.srv.Clients.Get(old.ID)
	registered := ok && cl != old && !cl.IsTakenOver()
	if startedClean || (registered && cl.Properties.Clean) {
		g.log.Debug("a message for a session a clean start discarded is dropped", "client", old.ID, "topic", pk.TopicName)
		return
	}
	// The new client is registered already (the message was routed to the old one just
	// before): deliver now.
	if registered {
		g.deliver(cl, pk)
		return
	}
	g.log.Warn("a message for a session taken over found no client to go to", "client", old.ID, "topic", pk.TopicName)
}

// deliver gives pk to cl unless cl already holds it (copied by mochi with the session).
//
// It runs on the goroutine that routed the message to the old client (a publisher: the
// agent's intake inside OnPublish, a back office's PUBLISH) or on the new client's reader
// (OnSessionEstablished), so it queues pk for cl's writer goroutine and never writes itself:
// a new client that does not read (its socket full, its writer blocked holding the client's
// lock) held that goroutine for the write timeout.
func (g *takeoverGuard) deliver(cl *mqtt.Client, pk packets.Packet) {
	if held, ok := cl.State.Inflight.Get(pk.PacketID); ok && samePublish(held, pk) {
		return
	}
	id, err := cl.NextPacketID()
	if err != nil {
		g.log.Warn("no packet id left to redeliver a message after a takeover", "client", cl.ID, "topic", pk.TopicName)
		return
	}
	pk.PacketID = uint16(id)
	pk.FixedHeader.Dup = false
	pk.Created = time.Now().Unix()
	// Sent now, not waiting for send quota: a copy of a message that waited in the old
	// session (Expiry -1, as OnQosDropped reports it) would otherwise also wait in cl's set,
	// and go out a second time with the next free quota, which it would take twice.
	pk.Expiry = max(pk.Expiry, 0)
	if cl.State.Inflight.Set(pk) {
		if g.store != nil {
			g.store.OnQosPublish(cl, pk, pk.Created, 0)
		}
		// Counted as mochi counts a routed message (its PUBACK counts it out): mochi counts
		// nothing for a message routed to a taken-over connection, and counts the old
		// connection's cleared messages out.
		atomic.AddInt64(&g.srv.Info.Inflight, 1)
		cl.State.Inflight.DecreaseSendQuota()
	}
	// cl taken over meanwhile (before Set, since mochi marks it before copying its set): the
	// connection taking over may have copied and cleared the set already, leaving pk in it,
	// never sent. It goes on as a message routed to cl now would (a copy it holds already is
	// not delivered twice).
	if cl.IsTakenOver() {
		g.rescue(cl, pk, false)
		return
	}
	// A message that finds the client's queue of pending writes full waits in flight for its
	// writer (HoldWrite: sent once the queue is empty); one that finds it closed goes out
	// with the next session (mochi resends in-flight messages on reconnect).
	if !cl.QueueWrite(pk) {
		cl.HoldWrite(pk)
	}
}

func samePublish(a, b packets.Packet) bool {
	return a.TopicName == b.TopicName && a.Origin == b.Origin && bytes.Equal(a.Payload, b.Payload)
}
