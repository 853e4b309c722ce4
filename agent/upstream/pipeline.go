package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/eclipse/paho.golang/paho/session/state"
	"github.com/eclipse/paho.golang/paho/store/memory"

	"github.com/seed0e69bba5/faceagent/agent/publish"
)

// defaultPublishWindow is how many reports (results, forwarded acks and heartbeats,
// deadletters) one stream keeps in flight to an external broker when
// Options.PublishWindow is 0. Across a 50 ms round trip one at a time caps a stream at
// 20 messages/s; 64 in flight allow about 1,300/s,
// enough for what a gateway finishes. The broker's Receive Maximum bounds it further
// (paho waits for a free slot), and it is shared by the streams of one connection.
const defaultPublishWindow = 64

// pubackTimeout is how long a stream waits for the PUBACK of the oldest message in
// flight before it gives up on it and sends it (and everything after it) again.
const pubackTimeout = 30 * time.Second

// Errors of a message in flight that did not end in a PUBACK.
var (
	errSessionLost = errors.New("the upstream broker did not keep the session; messages in flight are sent again")
	errPubackLate  = fmt.Errorf("no PUBACK within %s", pubackTimeout)
	errNotAcked    = errors.New("the upstream session was closed before the PUBACK")
)

// inFlight is one message written and not yet acknowledged.
type inFlight struct {
	resp chan packets.ControlPacket // capacity 1: paho sends the PUBACK (or a zero packet at close)
	lost <-chan struct{}            // closed when the session holding the message was dropped
}

// wait returns nil once the broker acknowledged the message with a success code.
func (f *inFlight) wait(ctx context.Context) error {
	t := time.NewTimer(pubackTimeout)
	defer t.Stop()
	return f.Wait(ctx, t)
}

// Wait implements publish.Pending: it is wait with the caller's timer, (re)armed for
// pubackTimeout here.
func (f *inFlight) Wait(ctx context.Context, t *time.Timer) error {
	t.Reset(pubackTimeout) // Go 1.23 timers: no stale tick survives a Reset
	select {
	case r := <-f.resp:
		if r.Type != packets.PUBACK {
			return errNotAcked
		}
		if pa, ok := r.Content.(*packets.Puback); ok && pa.ReasonCode >= 0x80 {
			return fmt.Errorf("the upstream broker refused the message: %s", pa.Reason())
		}
		return nil
	case <-f.lost:
		return errSessionLost
	case <-t.C:
		return errPubackLate
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pipeSession is the paho session of the upstream connection (the in-memory state of
// paho, which resends unacknowledged messages after a reconnect when the broker kept the
// session) with one addition: publish, which stores and writes a QoS 1 message and
// returns a handle to wait for its PUBACK. paho's Client.Publish waits for the PUBACK
// (one message per round trip per caller), and its asynchronous mode reports nothing;
// concurrent callers of Publish may write in another order than they stored.
//
// mu serialises publish with ConAckReceived: a message is stored and written under mu,
// so it is either resent by the next connection's ConAckReceived (stored before it) or
// written by publish on that connection, never both and never neither; and messages are
// written in the order they were stored.
type pipeSession struct {
	*state.State
	expiry uint32 // the session expiry asked for: 0 ends the session with the connection

	mu   sync.Mutex
	conn io.Writer     // the connection given to ConAckReceived; nil while down
	lost chan struct{} // closed (and replaced) when the session's messages were dropped
	sent *sentStore    // the session's store of our messages, which keeps their encoding

	// refused is set when a message the broker sent on the current connection was not
	// taken, and cleared by the next ConAckReceived: Ack writes no PUBACK while it is set,
	// so that message and every one after it on that connection are delivered again. It
	// is set and read on paho's handler goroutine, cleared before the next connection's
	// handler starts (autopaho waits for the old client to end before it connects again).
	refused atomic.Bool
}

var _ session.SessionManager = (*pipeSession)(nil)

func newPipeSession(expiry uint32) *pipeSession {
	sent := &sentStore{Store: memory.New()}
	return &pipeSession{State: state.New(sent, memory.New()), expiry: expiry, lost: make(chan struct{}), sent: sent}
}

// sentStore is paho's in-memory store of the messages we publish (kept until their
// PUBACK, resent after a reconnect) that also remembers the encoding of the message put
// last, for publish to write: a message is encoded once, for the store and the wire,
// instead of once each (paho's encoder allocates several times per message).
type sentStore struct {
	*memory.Store
	mu   sync.Mutex
	id   uint16 // packet id of last
	last []byte // the encoding Put last; the store keeps its own copy
}

func (s *sentStore) Put(packetID uint16, packetType byte, w io.WriterTo) error {
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		return err
	}
	s.mu.Lock()
	s.id, s.last = packetID, b.Bytes()
	s.mu.Unlock()
	return s.Store.Put(packetID, packetType, encodedPacket(b.Bytes()))
}

// take returns the encoding of the message with packet id put last, once (nil: another
// message was put since, or none).
func (s *sentStore) take(id uint16) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.last
	s.last = nil
	if s.id != id {
		return nil
	}
	return b
}

// encodedPacket is a packet already encoded.
type encodedPacket []byte

func (p encodedPacket) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(p)
	return int64(n), err
}

// Ack acknowledges a message the broker sent (paho calls it once the handler returned),
// unless a message on this connection was refused: the PUBACKs of a connection follow the
// order of its messages, and the refused one has none.
func (s *pipeSession) Ack(pb *packets.Publish) error {
	if s.refused.Load() {
		return nil
	}
	return s.State.Ack(pb)
}

// refuse leaves the message being handled, and those after it on this connection,
// unacknowledged, and drops the connection so the broker delivers them again on the next.
// The drop runs on a goroutine of its own: the session's lock may be held by a publish
// waiting for a PUBACK that the handler's return lets paho read.
func (s *pipeSession) refuse() {
	s.refused.Store(true)
	go s.dropConnection()
}

// refusing tells whether a message on this connection was refused.
func (s *pipeSession) refusing() bool { return s.refused.Load() }

// ConAckReceived records the new connection. A CONNACK without a session present makes
// paho drop what was in flight without answering it: the waiters learn it through lost.
func (s *pipeSession) ConAckReceived(conn io.Writer, cp *packets.Connect, ca *packets.Connack) error {
	// Unblocks a publish waiting for a send slot of the old connection (paho does the
	// same first thing inside ConAckReceived, but publish holds mu while it waits).
	_ = s.State.ConnectionLost(nil)
	s.refused.Store(false) // a new connection: the broker sends what was refused again
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ca.SessionPresent {
		close(s.lost)
		s.lost = make(chan struct{})
	}
	err := s.State.ConAckReceived(conn, cp, ca)
	if err == nil {
		s.conn = conn
	}
	return err
}

// ConnectionLost forgets the connection; with a session expiry of 0 paho drops what was
// in flight.
func (s *pipeSession) ConnectionLost(dp *packets.Disconnect) error {
	err := s.State.ConnectionLost(dp) // cancels a publish waiting for a send slot
	s.mu.Lock()
	s.conn = nil
	if s.expiry == 0 {
		close(s.lost)
		s.lost = make(chan struct{})
	}
	s.mu.Unlock()
	return err
}

// dropConnection closes the connection given to ConAckReceived, if it is up: paho reads an
// error, reports it, and autopaho connects again (while ConnectionManager.Disconnect would
// end it for good). The session keeps what it holds, as on any loss of the connection.
func (s *pipeSession) dropConnection() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.conn.(io.Closer); ok {
		_ = c.Close()
	}
}

// publish stores a QoS 1 message in the session (waiting for a send slot under the
// broker's Receive Maximum) and writes it. A write error leaves it stored: it is sent
// again on the next connection, or reported lost. It refuses when after (if set) was
// dropped with its session: the caller sends after again first.
func (s *pipeSession) publish(ctx context.Context, topic string, payload []byte, after publish.Pending) (*inFlight, error) {
	pb := (&paho.Publish{QoS: 1, Topic: topic, Payload: payload}).Packet()
	f := &inFlight{resp: make(chan packets.ControlPacket, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := after.(*inFlight); ok && a != nil && a.lost != s.lost {
		return nil, errSessionLost
	}
	if s.conn == nil {
		return nil, session.ErrNoConnection
	}
	if err := s.State.AddToSession(ctx, pb, f.resp); err != nil {
		return nil, err
	}
	f.lost = s.lost
	// A failed write: paho drops the connection; the session keeps the message.
	if b := s.sent.take(pb.PacketID); b != nil {
		writeEncoded(s.conn, b)
	} else {
		_, _ = pb.WriteTo(s.conn)
	}
	return f, nil
}

// writeEncoded writes an encoded packet in one call, under the connection's lock if it
// has one (as paho's ControlPacket.WriteTo does: its other writers take it too).
func writeEncoded(conn io.Writer, b []byte) {
	if l, ok := conn.(sync.Locker); ok {
		l.Lock()
		defer l.Unlock()
	}
	_, _ = conn.Write(b)
}
