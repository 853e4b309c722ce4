package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/eclipse/paho.golang/paho/session/state"
	"github.com/eclipse/paho.golang/paho/store/memory"
)

// defaultPublishWindow is how many reports (results, forwarded acks and heartbeats,
// deadletters) one stream keeps in flight to an external broker when
// upstream.publish_window is not set. Across a 50 ms round
// trip one at a time caps a stream at 20 messages/s; 64 in flight allow about 1,300/s,
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

// asyncPublisher is a publisher that can keep several QoS 1 messages in flight on one
// connection: publishAsync writes a message after every message written before it and
// returns without waiting for its PUBACK. MQTT keeps the order of QoS 1 messages on one
// connection per topic, so the first copies reach subscribers in the order written.
type asyncPublisher interface {
	publisher
	publishWindow() int
	// publishAsync refuses (errSessionLost) when after, a message of the caller still in
	// flight, was dropped with its session: what follows it must wait until it was sent
	// again, or the first copies would arrive out of order.
	publishAsync(ctx context.Context, topic string, payload []byte, after *inFlight) (*inFlight, error)
}

// batchFor is how many messages a stream takes from its backlog per round: at least
// base, and a whole window, so a window larger than the batch is used.
func batchFor(pub publisher, base int) int {
	if ap, ok := pub.(asyncPublisher); ok {
		return max(base, ap.publishWindow())
	}
	return base
}

// inFlight is one message written and not yet acknowledged.
type inFlight struct {
	resp chan packets.ControlPacket // capacity 1: paho sends the PUBACK (or a zero packet at close)
	lost <-chan struct{}            // closed when the session holding the message was dropped
}

// wait returns nil once the broker acknowledged the message with a success code.
func (f *inFlight) wait(ctx context.Context) error {
	if f == nil {
		return nil // nothing was sent (an entry skipped)
	}
	t := time.NewTimer(pubackTimeout)
	defer t.Stop()
	return f.waitWith(ctx, t)
}

// waitWith is wait with the caller's timer, (re)armed for pubackTimeout here: a stream
// waits for its messages one after the other with one timer, not one per message.
func (f *inFlight) waitWith(ctx context.Context, t *time.Timer) error {
	if f == nil {
		return nil
	}
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

// publishInOrder publishes the messages 0..n-1 (msg gives each one's topic and payload;
// skip: nothing to send, it counts as done) in order and returns how many of the first
// ones the broker accepted — a contiguous prefix, so a caller marks exactly those
// reported — and the error that stopped it. With an asyncPublisher up to its window are
// in flight; on the first failure nothing more is written, the messages before it are
// still waited for, and the caller sends everything from the first unaccepted one again
// (duplicates possible, no loss, no reordering of first copies). Any other publisher
// (the embedded broker's, whose drop detection needs one publish at a time) publishes
// one by one.
func publishInOrder(ctx context.Context, pub publisher, n int, msg func(i int) (topic string, payload []byte, skip bool)) (int, error) {
	ap, ok := pub.(asyncPublisher)
	if !ok {
		for i := range n {
			topic, payload, skip := msg(i)
			if skip {
				continue
			}
			if err := pub.Publish(ctx, topic, payload); err != nil {
				return i, err
			}
		}
		return n, nil
	}
	window := max(1, ap.publishWindow())
	queue := make([]*inFlight, 0, min(n, window))
	t := time.NewTimer(pubackTimeout)
	defer t.Stop()
	var err error
	acked, sent := 0, 0
	for sent < n {
		if sent-acked >= window {
			if err := queue[0].waitWith(ctx, t); err != nil {
				return acked, err // the prefix ends here; what follows is sent again
			}
			queue[0] = nil
			queue = queue[1:]
			acked++
			continue
		}
		topic, payload, skip := msg(sent)
		var f *inFlight
		if !skip {
			if f, err = ap.publishAsync(ctx, topic, payload, oldest(queue)); err != nil {
				break
			}
		}
		queue = append(queue, f)
		sent++
	}
	// Wait for what is in flight, in order: the messages before a failure may still be
	// accepted (after a reconnect the session sends them again).
	for _, f := range queue {
		if werr := f.waitWith(ctx, t); werr != nil {
			if err == nil {
				err = werr
			}
			break
		}
		acked++
	}
	return acked, err
}

// oldest is the first message of queue that was sent (nil: none).
func oldest(queue []*inFlight) *inFlight {
	for _, f := range queue {
		if f != nil {
			return f
		}
	}
	return nil
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
}

var _ session.SessionManager = (*pipeSession)(nil)

func newPipeSession(expiry uint32) *pipeSession {
	sent := &sentStore{Store: memory.New()}
	return &pipeSession{State: state.New(sent, memory.New()), expiry: expiry, lost: make(chan struct{}), sent: sent}
}

// sentStore is paho's in-memory store of the messages we publish (kept until their
// PUBACK, resent after a reconnect) that also remembers the encoding of the message put
// last, for publish to write: a message is encoded once, for the store and the wire,
// instead of once each (paho's encoder allocates about ten times per message).
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

// ConAckReceived records the new connection. A CONNACK without a session present makes
// paho drop what was in flight without answering it: the waiters learn it through lost.
func (s *pipeSession) ConAckReceived(conn io.Writer, cp *packets.Connect, ca *packets.Connack) error {
	// Unblocks a publish waiting for a send slot of the old connection (paho does the
	// same first thing inside ConAckReceived, but publish holds mu while it waits).
	_ = s.State.ConnectionLost(nil)
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

// publish stores a QoS 1 message in the session (waiting for a send slot under the
// broker's Receive Maximum) and writes it. A write error leaves it stored: it is sent
// again on the next connection, or reported lost. It refuses when after (if set) was
// dropped with its session: the caller sends after again first.
func (s *pipeSession) publish(ctx context.Context, topic string, payload []byte, after *inFlight) (*inFlight, error) {
	pb := (&paho.Publish{QoS: 1, Topic: topic, Payload: payload}).Packet()
	f := &inFlight{resp: make(chan packets.ControlPacket, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if after != nil && after.lost != s.lost {
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
