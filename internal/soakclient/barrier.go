package soakclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/seed0e69bba5/faceagent/internal/mqttwire"
)

// Barrier returns once the broker has stored every acknowledgement the client wrote
// before it: after a restart, no answer acknowledged before a Barrier may come again.
//
// Without a barrier the client can only guess which acknowledgements a crash may lose
// (those written within Options.AckGrace of the drop), and a short run acknowledges
// everything within any sensible grace. The barrier uses the broker's documented
// durability: a QoS 1 message from a network client to a kept session is acknowledged
// once its record is on disk, records are committed in the order they were queued, and a
// client's packets are handled in the order they were sent, so the acknowledgements
// written before the message were queued, and are committed, before its PUBACK. Barrier
// opens a second connection with a kept session subscribed to soak/barrier/{clientId},
// publishes one QoS 1 message there from the client's own connection (an application
// may publish anything on its session client), waits for the PUBACK, and ends the
// second session.
//
// PrepareBarrier opens the second session ahead, so that Barrier itself costs one commit.
func (c *Client) Barrier(ctx context.Context) error {
	topic := c.barrierTopic()
	c.wmu.Lock()
	sink := c.sink
	c.sink = nil
	c.wmu.Unlock()
	if sink == nil {
		var err error
		if sink, err = dialSink(ctx, c.opts.Addr, c.opts.ClientID+"-barrier", topic); err != nil {
			return fmt.Errorf("soakclient: barrier: %w", err)
		}
	}
	defer sink.close()
	var err error
	r := &request{n: -1, op: "barrier", done: make(chan struct{})}
	c.wmu.Lock()
	if c.conn == nil {
		c.wmu.Unlock()
		return errors.New("soakclient: barrier: not connected")
	}
	r.id = c.takeID()
	c.unacked[r.id] = r
	r.pkt = mqttwire.AppendPublish(nil, topic, 1, r.id, []byte("barrier"))
	r.written = true
	r.barrierAt = time.Now().UnixNano()
	err = c.writeLocked(r.pkt)
	c.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("soakclient: barrier: %w", err)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("soakclient: barrier: no PUBACK: %w", ctx.Err())
	}
	if r.failed != "" {
		return fmt.Errorf("soakclient: barrier: %s", r.failed)
	}
	return nil
}

// PrepareBarrier opens the kept session the next Barrier publishes to.
func (c *Client) PrepareBarrier(ctx context.Context) error {
	sink, err := dialSink(ctx, c.opts.Addr, c.opts.ClientID+"-barrier", c.barrierTopic())
	if err != nil {
		return fmt.Errorf("soakclient: barrier: %w", err)
	}
	c.wmu.Lock()
	old := c.sink
	c.sink = sink
	c.wmu.Unlock()
	if old != nil {
		old.close()
	}
	return nil
}

func (c *Client) barrierTopic() string { return "soak/barrier/" + c.opts.ClientID }

// sink is the barrier's kept session: it acknowledges what it gets until closed.
type sink struct {
	conn net.Conn
	done chan struct{}
}

func dialSink(ctx context.Context, addr, id, topic string) (*sink, error) {
	d := net.Dialer{Timeout: connectTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(connectTimeout))
	br := bufio.NewReader(conn)
	pkt := mqttwire.AppendConnect(nil, id, true, 60, 60) // kept for a minute after it leaves
	pkt = mqttwire.AppendSubscribe(pkt, 1, topic)
	if _, err := conn.Write(pkt); err != nil {
		conn.Close()
		return nil, err
	}
	for _, want := range []byte{mqttwire.TypeConnack, mqttwire.TypeSuback} {
		first, body, _, err := mqttwire.ReadPacket(br, nil)
		if err == nil && first>>4 != want {
			err = fmt.Errorf("packet type %d, want %d", first>>4, want)
		}
		if err == nil && want == mqttwire.TypeConnack {
			var code byte
			if code, err = mqttwire.ParseConnack(body); err == nil && code != 0 {
				err = fmt.Errorf("CONNACK %#x", code)
			}
		}
		if err == nil && want == mqttwire.TypeSuback {
			var code byte
			if _, code, err = mqttwire.ParseAck(mqttwire.TypeSuback, body); err == nil && code != 1 {
				err = fmt.Errorf("SUBACK %#x", code)
			}
		}
		if err != nil {
			conn.Close()
			return nil, err
		}
	}
	_ = conn.SetDeadline(time.Time{})
	s := &sink{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		var buf []byte
		for {
			first, body, grown, err := mqttwire.ReadPacket(br, buf)
			if err != nil {
				return
			}
			buf = grown
			if first>>4 == mqttwire.TypePublish {
				if p, err := mqttwire.ParsePublish(first, body); err == nil && p.QoS == 1 {
					if _, err := conn.Write(mqttwire.AppendPuback(nil, p.ID)); err != nil {
						return
					}
				}
			}
		}
	}()
	return s, nil
}

// close ends the sink's session (DISCONNECT with Session Expiry 0) and its connection.
func (s *sink) close() {
	_, _ = s.conn.Write(mqttwire.AppendDisconnectExpiry(nil, 0))
	s.conn.Close()
	<-s.done
}
