package sim

import (
	"bufio"
	"context"
	"net"
	"net/url"
	"sync"

	"github.com/eclipse/paho.golang/autopaho"
)

// packetConn is an MQTT terminal's TCP connection as paho sees it. paho reads packets
// straight from its Conn: a read syscall for the type byte, one per length byte and one
// for the rest. packetConn reads through a bufio.Reader instead, so a packet costs a
// fraction of one read. Reading ahead is safe because one goroutine (paho's) reads.
//
// It is a sync.Locker: paho takes the lock of a Conn that has one around every packet it
// writes (packets.ControlPacket.WriteTo), and packetConn gathers the parts written while
// it is held and writes them with one call when it is released, so concurrent packets
// (an ack and a PUBACK) never interleave. paho writes every packet that way.
//
// The simulated terminals stand for devices on other machines; this keeps their share of
// the test machine's CPU down without changing what goes over the wire.
type packetConn struct {
	net.Conn
	r      *bufio.Reader
	mu     sync.Mutex
	packet []byte // the packet being written, gathered between Lock and Unlock
	err    error  // the last failed write: the connection is broken, later writes fail
}

// packetConnReadBuffer holds a few commands: a terminal gets one at a time.
const packetConnReadBuffer = 4 << 10

func newPacketConn(c net.Conn) *packetConn {
	return &packetConn{Conn: c, r: bufio.NewReaderSize(c, packetConnReadBuffer)}
}

func (c *packetConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Lock starts a packet.
func (c *packetConn) Lock() { c.mu.Lock() }

// Write gathers a part of the packet being written; called with the lock held.
func (c *packetConn) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	c.packet = append(c.packet, p...)
	return len(p), nil
}

// Unlock writes the gathered packet. A failed write is reported by the next Write; the
// reader sees the broken connection too, and paho reconnects.
func (c *packetConn) Unlock() {
	if len(c.packet) > 0 && c.err == nil {
		_, c.err = c.Conn.Write(c.packet)
	}
	if cap(c.packet) > 64<<10 { // do not keep a large buffer after a large packet
		c.packet = nil
	} else {
		c.packet = c.packet[:0]
	}
	c.mu.Unlock()
}

// dialPacketConn is autopaho's AttemptConnection for mqtt:// and tcp:// brokers.
func dialPacketConn(ctx context.Context, cfg autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
	if cfg.ConnectTimeout > 0 { // autopaho bounds only its own dialling by it
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.ConnectTimeout)
		defer cancel()
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	return newPacketConn(c), nil
}
