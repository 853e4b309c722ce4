// faceagent patch (session takeover): tests of sessionLocks.

package mqtt

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// connackBarrier holds the first two CONNECTs that reach OnConnect once armed until both
// have, so that they go on together (to the session's takeover).
type connackBarrier struct {
	HookBase
	armed   atomic.Bool
	mu      sync.Mutex
	waiting int
	both    chan struct{}
}

func (*connackBarrier) ID() string           { return "connack-barrier" }
func (*connackBarrier) Provides(b byte) bool { return b == OnConnect }
func (b *connackBarrier) OnConnect(*Client, packets.Packet) error {
	if !b.armed.Load() {
		return nil
	}
	b.mu.Lock()
	if b.waiting++; b.waiting == 2 {
		close(b.both)
	}
	b.mu.Unlock()
	select {
	case <-b.both:
	case <-time.After(5 * time.Second):
	}
	return nil
}

// Two CONNECTs of one client id at once, while the connection holding its session stopped
// reading (the takeover's DISCONNECT to it waits disconnectWriteGrace): one takes the session
// over, and the other takes it from that one in turn and is sent a DISCONNECT 0x8E (session
// taken over); the one left registered holds the session, the other nothing, and once both
// are gone and the session expired nothing stays counted. Before, both took the old session
// over and both were registered, the second replacing the first in Clients: the first
// stayed connected without being routed anything, and its copy of the session stayed
// counted in the server's total for good.
func TestConcurrentConnectsOfOneClientID(t *testing.T) {
	s := newQuotaServer(t, func(c *Capabilities) { c.MaximumQueuedBytes = 1 << 20 })
	barrier := &connackBarrier{both: make(chan struct{})}
	if err := s.AddHook(barrier, nil); err != nil {
		t.Fatal(err)
	}
	connectKept(t, s, "x", false) // subscribed; never reads again
	if err := s.Publish("out", []byte("m"), false, 1); err != nil {
		t.Fatal(err)
	}
	barrier.armed.Store(true)

	type result struct {
		c          *pipePeer
		disconnect chan byte
	}
	var peers [2]result
	var served [2]net.Conn // the server's ends of the peers' connections
	for i := range peers {
		srv, cli := net.Pipe()
		served[i] = srv
		t.Cleanup(func() { _ = cli.Close() })
		go func() { _ = s.EstablishConnection("pipe", srv) }()
		peers[i] = result{c: &pipePeer{t: t, conn: cli, r: bufio.NewReader(cli)}, disconnect: make(chan byte, 1)}
	}
	var sent sync.WaitGroup
	for i := range peers {
		sent.Add(1)
		go func(p *pipePeer) {
			defer sent.Done()
			var buf = connectBytes(t, "x")
			_ = p.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			_, _ = p.conn.Write(buf)
		}(peers[i].c)
	}
	sent.Wait()
	for i := range peers {
		go func(r result) {
			// CONNACK, the message sent again, then a DISCONNECT for the one taken over
			for {
				_ = r.c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				first, err := r.c.r.ReadByte()
				if err != nil {
					close(r.disconnect)
					return
				}
				n, _, err := packets.DecodeLength(r.c.r)
				if err != nil {
					close(r.disconnect)
					return
				}
				body := make([]byte, n)
				if _, err := io.ReadFull(r.c.r, body); err != nil {
					close(r.disconnect)
					return
				}
				if first>>4 == packets.Disconnect {
					r.disconnect <- body[0]
					return
				}
			}
		}(peers[i])
	}
	var code byte
	var gone int
	select {
	case code = <-peers[0].disconnect:
		gone = 0
	case code = <-peers[1].disconnect:
		gone = 1
	case <-time.After(5 * time.Second):
		t.Fatal("neither connection was taken over by the other: both hold the session")
	}
	if code != packets.ErrSessionTakenOver.Code {
		t.Fatalf("DISCONNECT %#x, want 0x8e", code)
	}
	// The DISCONNECT is written before the connection taking over is registered; until
	// then the client registered for x may still be the one it takes over, or the first
	// connection that held the session.
	waitFor(t, "the connection taking over registered", func() bool {
		cur, ok := s.Clients.Get("x")
		return ok && cur.Net.Conn == served[1-gone]
	})
	cur, ok := s.Clients.Get("x")
	if !ok || cur.IsTakenOver() || cur.Closed() {
		t.Fatalf("the client registered for x: %v, taken over %v, closed %v", ok, ok && cur.IsTakenOver(), ok && cur.Closed())
	}
	_ = peers[gone].c.conn.Close()
	_ = peers[1-gone].c.conn.Close()
	waitFor(t, "both connections to end", func() bool { return atomic.LoadInt64(&s.Info.ClientsConnected) == 0 })
	s.clearExpiredClients(time.Now().Unix() + 2*3600)
	if n, in := s.QueuedBytes(), atomic.LoadInt64(&s.Info.Subscriptions); n != 0 || in != 0 {
		t.Fatalf("after the session expired: %d bytes counted, Info.Subscriptions %d; want 0, 0", n, in)
	}
	if n := s.sessions.held(); n != 0 {
		t.Fatalf("%d client ids' session locks left", n)
	}
}

// connectBytes returns an MQTT 5 CONNECT resuming id's session, kept an hour.
func connectBytes(t *testing.T, id string) []byte {
	t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 60, ClientIdentifier: id},
		Properties: packets.Properties{SessionExpiryInterval: 3600, SessionExpiryIntervalFlag: true}}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A SUBSCRIBE or UNSUBSCRIBE handled on a connection after another took its session over
// (its reader finishing a packet read before the takeover) changes nothing: the new
// connection's subscriptions stay as they are in the index, and the old connection's
// session counts nothing. Before, the SUBSCRIBE put a subscription in the index under the
// client id that no session held (routed to the new connection, never removed, and counted
// in the old session's bytes for good), and the UNSUBSCRIBE removed the new connection's.
func TestTakenOverConnectionChangesNoSubscription(t *testing.T) {
	s := newQuotaServer(t, func(c *Capabilities) { c.MaximumQueuedBytes = 1 << 20 })
	old := connectKept(t, s, "a", false) // subscribed to "out"
	go func() { _, _ = io.Copy(io.Discard, old.conn) }()
	oldCl, _ := s.Clients.Get("a")
	connectKept(t, s, "a", true)
	if !oldCl.IsTakenOver() {
		t.Fatal("the first connection was not taken over")
	}
	base := s.QueuedBytes()
	sub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 5,
		Filters: packets.Subscriptions{{Filter: "late", Qos: 1}}}
	_ = s.processSubscribe(oldCl, &sub)
	unsub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, PacketID: 6,
		Filters: packets.Subscriptions{{Filter: "out"}}}
	_ = s.processUnsubscribe(oldCl, &unsub)
	if got := s.QueuedBytes(); got != base || oldCl.State.Subscriptions.Len() != 0 {
		t.Fatalf("total %d (was %d); the old connection holds %d subscriptions", got, base, oldCl.State.Subscriptions.Len())
	}
	if n := particleSubscriptions(s.Topics.root); n != 1 {
		t.Fatalf("%d subscriptions in the index, want 1 (the new connection's to out)", n)
	}
	if subs := s.Topics.Subscribers("out"); len(subs.Subscriptions) != 1 {
		t.Fatalf("subscribers of out: %v, want the new connection", subs.Subscriptions)
	}
	if n := atomic.LoadInt64(&s.Info.Subscriptions); n != 1 {
		t.Fatalf("Info.Subscriptions %d, want 1", n)
	}
}

// At MaximumClients connected, a CONNECT taking over a connected client's session is let
// in (the connection it replaces goes: the count does not grow), as the bound's
// documentation says, and a new client id is still refused. Before, every CONNECT was
// refused once as many clients were connected: a client whose old connection was left
// half-open (a gateway's terminal after a network fault) could not come back until that
// connection's keepalive ran out.
func TestTakeoverAtMaximumClients(t *testing.T) {
	s := newQuotaServer(t, func(c *Capabilities) { c.MaximumClients = 1 })
	old := connectKept(t, s, "a", false)
	go func() { _, _ = io.Copy(io.Discard, old.conn) }()
	connectKept(t, s, "a", true) // expects CONNACK 0
	srv, cli := net.Pipe()
	t.Cleanup(func() { _ = cli.Close() })
	go func() { _ = s.EstablishConnection("pipe", srv) }()
	_ = cli.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := cli.Write(connectBytes(t, "b")); err != nil {
		t.Fatal(err)
	}
	if code := readConnack(t, cli, bufio.NewReader(cli)); code != packets.ErrQuotaExceeded.Code {
		t.Fatalf("a new client id at the bound: CONNACK %#x, want 0x97", code)
	}
}
