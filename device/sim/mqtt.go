package sim

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/internal/mqttwire"
)

// A terminal's MQTT connection behaves as the autopaho client it replaced (written with
// internal/mqttwire, whose doc says why): keepalive 20 s, a new attempt 200 ms after a failed one or
// a lost connection, clean start on the first connection of an online period (a terminal
// coming back has forgotten everything) and a session that ends with the connection,
// QoS 1 publishes bounded by 5 s, a DISCONNECT when it goes offline or the fleet closes.
const (
	keepAlive        = 20 // seconds
	reconnectBackoff = 200 * time.Millisecond
	connectTimeout   = 5 * time.Second
	readBuffer       = 4 << 10 // holds a few commands: a terminal gets one at a time
)

// publishTimeout bounds a QoS 1 publish's wait for its PUBACK (a variable for tests).
var publishTimeout = 5 * time.Second

var (
	errOffline        = errors.New("sim: offline")
	errConnectionLost = errors.New("sim: connection lost before the PUBACK")
	errPublishTimeout = errors.New("sim: no PUBACK in time")
)

// mqttTerm is one terminal's own MQTT connection, as a real terminal has.
type mqttTerm struct {
	t                           *Terminal
	g                           *group
	addr                        string      // host:port
	tls                         *tls.Config // nil: plain TCP
	clientID, username          string
	cmdTopic, ackTopic, hbTopic string
	ready                       chan struct{} // closed after the first subscription
	readyOnce                   sync.Once
	// subscribed is true once the current connection's SUBSCRIBE was acknowledged. A
	// terminal announces itself only then: a heartbeat sent between CONNACK and SUBACK
	// after a reconnect would have the agent send a command that the broker drops for
	// want of a subscription (and resend it a retry interval later).
	subscribed atomic.Bool

	mu     sync.Mutex
	conn   *termConn          // the connection up; nil while offline or reconnecting
	cancel context.CancelFunc // ends the online period's connection loop; nil while offline
	closed bool               // close ran: connect must not start a connection
}

func newMQTTTerm(t *Terminal, g *group, addr string, tlsConfig *tls.Config) *mqttTerm {
	sub := func(tmpl string) string { return strings.ReplaceAll(tmpl, "{id}", t.id) }
	return &mqttTerm{t: t, g: g, addr: addr, tls: tlsConfig, clientID: "facesim-" + t.id,
		username: sub(t.opts.Username), ready: make(chan struct{}),
		cmdTopic: sub(t.opts.CommandTopic), ackTopic: sub(t.opts.AckTopic), hbTopic: sub(t.opts.HeartbeatTopic)}
}

// connect starts an online period: a goroutine that connects, and reconnects after a
// loss, until setOnline(false) or close. Under m.mu, so that a reconnect racing with close
// (a terminal's "back online" timer firing as the fleet closes) either starts before
// close, which then stops it, or not at all: a connection started after close would
// outlive the fleet and hold a broker's Close.
func (m *mqttTerm) connect() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	if !m.g.run(func() { m.run(ctx) }) {
		cancel()
		return
	}
	m.cancel = cancel
}

// run connects until ctx ends, waiting reconnectBackoff after every failed attempt or
// lost connection.
func (m *mqttTerm) run(ctx context.Context) {
	first := true
	for {
		c, err := m.dial(ctx, first)
		if err == nil {
			first = false
			m.serve(ctx, c)
		} else if ctx.Err() == nil {
			m.t.opts.Logger.Debug("terminal connect failed", "device", m.t.id, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(reconnectBackoff):
		}
	}
}

// dial opens a connection and makes the CONNECT/CONNACK exchange, within connectTimeout;
// ctx ending cuts it short.
func (m *mqttTerm) dial(ctx context.Context, cleanStart bool) (*termConn, error) {
	dctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var nc net.Conn
	var err error
	if m.tls != nil {
		nc, err = (&tls.Dialer{Config: m.tls}).DialContext(dctx, "tcp", m.addr)
	} else {
		nc, err = (&net.Dialer{}).DialContext(dctx, "tcp", m.addr)
	}
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	c := &termConn{nc: nc, r: bufio.NewReaderSize(nc, readBuffer), inflight: map[uint16]chan error{}}
	err = c.handshake(m.clientID, m.username, m.t.opts.Password, cleanStart)
	if !stop() && err == nil {
		err = ctx.Err() // closed under the handshake's feet
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// serve subscribes on c, reads from it in a second goroutine and sends PINGREQs from this
// one, until the connection ends or ctx does (then it sends a DISCONNECT).
func (m *mqttTerm) serve(ctx context.Context, c *termConn) {
	m.subscribed.Store(false)
	m.mu.Lock()
	m.conn = c
	m.mu.Unlock()
	defer m.down(c)
	readDone := make(chan struct{})
	if !m.g.run(func() { defer close(readDone); m.read(c) }) {
		return
	}
	if id, _, err := c.track(false); err == nil {
		_ = c.subscribe(id, m.cmdTopic) // a failed write ends the reader too
	}
	// A PINGREQ when nothing was written for half the keepalive keeps the broker's timer
	// (1.5 × keepalive) from firing; a PINGREQ not answered by the next tick means a dead
	// connection, as paho's pinger judges.
	tick := time.NewTicker(keepAlive * time.Second / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = c.disconnect()
			c.nc.Close()
			<-readDone
			return
		case <-readDone:
			return
		case <-tick.C:
			if c.pingOut.Load() {
				c.nc.Close() // the reader ends, then readDone
				continue
			}
			if !c.wrote.Swap(false) {
				c.pingOut.Store(true)
				_ = c.pingreq()
			}
		}
	}
}

// down forgets c, which ended: its QoS 1 publishes waiting for a PUBACK fail.
func (m *mqttTerm) down(c *termConn) {
	c.nc.Close()
	m.mu.Lock()
	if m.conn == c {
		m.conn = nil
	}
	m.mu.Unlock()
	m.subscribed.Store(false)
	c.fail()
}

// read handles c's incoming packets until c ends: commands go to the terminal in arrival
// order and are acked (PUBACK) once it took them, as paho's auto-ack did.
func (m *mqttTerm) read(c *termConn) {
	defer c.nc.Close()
	var buf []byte
	for {
		first, body, grown, err := mqttwire.ReadPacket(c.r, buf)
		buf = grown
		if err != nil {
			return
		}
		switch first >> 4 {
		case mqttwire.TypePublish:
			p, err := mqttwire.ParsePublish(first, body)
			if err != nil {
				m.t.opts.Logger.Warn("terminal got a malformed PUBLISH", "device", m.t.id, "err", err)
				return
			}
			m.onPublish(p.Payload)
			if p.QoS > 0 && c.puback(p.ID) != nil { // QoS 2 never comes: the subscription is QoS 1
				return
			}
		case mqttwire.TypePuback:
			if id, code, err := mqttwire.ParseAck(mqttwire.TypePuback, body); err == nil {
				c.acked(id, code)
			}
		case mqttwire.TypeSuback:
			id, code, err := mqttwire.ParseAck(mqttwire.TypeSuback, body)
			if err != nil {
				return
			}
			c.acked(id, code)
			if code >= 0x80 {
				m.t.opts.Logger.Warn("terminal subscribe failed", "device", m.t.id, "reason", code)
				continue
			}
			m.subscribed.Store(true)
			m.readyOnce.Do(func() { close(m.ready) })
			m.g.run(m.t.heartbeat) // announce itself, off the reader
		case mqttwire.TypePingresp:
			c.pingOut.Store(false)
		case mqttwire.TypeDisconnect:
			return
		}
	}
}

func (m *mqttTerm) onPublish(payload []byte) {
	if !m.g.enter() {
		return
	}
	defer m.g.exit()
	cmd, err := face.ParseCommandJSON(payload) // copies what it keeps: payload is reused
	if errors.Is(err, face.ErrUnknownOp) {
		m.t.receive(cmd) // refused by its messageId
		return
	}
	if err != nil {
		// A real terminal ignores what it cannot read; the agent's retry notices.
		m.t.opts.Logger.Warn("terminal got a bad command", "device", m.t.id, "err", err)
		return
	}
	m.t.receive(cmd)
}

// publish sends payload on topic; at QoS 1 it waits for the PUBACK, at most
// publishTimeout, and fails at once when the connection is lost meanwhile.
func (m *mqttTerm) publish(topic string, qos byte, payload []byte) error {
	m.mu.Lock()
	c := m.conn
	m.mu.Unlock()
	if c == nil {
		return errOffline
	}
	if qos == 0 {
		return c.publish(topic, 0, 0, payload)
	}
	id, done, err := c.track(true)
	if err != nil {
		return err
	}
	if err := c.publish(topic, qos, id, payload); err != nil {
		if !c.untrack(id) {
			<-done // acked or fail took it first and sends: let it land before reuse
		}
		donePool.Put(done)
		return err
	}
	t := getTimer(publishTimeout)
	defer timerPool.Put(t)
	defer t.Stop()
	select {
	case err = <-done:
	case <-t.C:
		err = errPublishTimeout
		if !c.untrack(id) {
			err = <-done // the PUBACK (or the loss) came at the last moment
		}
	}
	donePool.Put(done)
	return err
}

// A terminal's QoS 1 publish waits on a channel and a timer; both are reused (a channel
// only once empty: see publish), so that an ack costs neither allocation.
var (
	donePool  = sync.Pool{New: func() any { return make(chan error, 1) }}
	timerPool sync.Pool
)

// getTimer returns a timer firing after d, reused from timerPool when one is there. A
// stopped timer sends nothing stale after Reset (Go 1.23 timers; go.mod says 1.26).
func getTimer(d time.Duration) *time.Timer {
	if t, ok := timerPool.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

func (m *mqttTerm) sendAck(a *face.Ack) error {
	var buf [256]byte // an ack's JSON is short: no allocation
	b, err := a.AppendJSON(buf[:0])
	if err != nil {
		return err
	}
	return m.publish(m.ackTopic, 1, b)
}

func (m *mqttTerm) sendHeartbeat(h *face.Heartbeat) error {
	if !m.subscribed.Load() {
		return nil // not announced until subscribed on this connection
	}
	b, err := h.AppendJSON(nil)
	if err != nil {
		return err
	}
	return m.publish(m.hbTopic, 0, b)
}

func (m *mqttTerm) sendGarbage(r *rand.Rand) error {
	junk := []string{`{"messageId":`, `not json`, `{"code":0}`, `{"messageId":"x","code":"zero"}`}
	return m.publish(m.ackTopic, 1, []byte(junk[r.IntN(len(junk))]))
}

func (m *mqttTerm) crash(*rand.Rand) {}

func (m *mqttTerm) setOnline(up bool) {
	if up {
		m.connect()
		return
	}
	m.stop(false)
}

// stop ends the online period without waiting for it (this may run on the connection's
// own reader); the group waits for its goroutines.
func (m *mqttTerm) stop(closing bool) {
	m.mu.Lock()
	cancel := m.cancel
	m.cancel = nil
	if closing {
		m.closed = true
	}
	m.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (m *mqttTerm) close() { m.stop(true) }

// termConn is one MQTT connection of a terminal.
type termConn struct {
	nc      net.Conn
	r       *bufio.Reader // read by one goroutine only (mqttTerm.read)
	wrote   atomic.Bool   // a packet was written since the last keepalive tick
	pingOut atomic.Bool   // a PINGREQ is waiting for its PINGRESP

	wmu  sync.Mutex // one packet at a time, each written with one call
	wbuf []byte

	mu       sync.Mutex
	lastID   uint16
	inflight map[uint16]chan error // packet ids in use → the publish waiting (nil: SUBSCRIBE)
	lost     bool                  // fail ran: no new packet ids
}

// handshake sends CONNECT and reads the CONNACK.
func (c *termConn) handshake(clientID, username string, password []byte, cleanStart bool) error {
	_ = c.nc.SetDeadline(time.Now().Add(connectTimeout))
	c.wbuf = mqttwire.AppendConnectAuth(c.wbuf[:0], clientID, username, password, cleanStart, keepAlive, 0)
	if _, err := c.nc.Write(c.wbuf); err != nil {
		return err
	}
	first, body, _, err := mqttwire.ReadPacket(c.r, nil)
	if err != nil {
		return err
	}
	if first>>4 != mqttwire.TypeConnack {
		return fmt.Errorf("sim: packet type %d instead of CONNACK", first>>4)
	}
	code, err := mqttwire.ParseConnack(body)
	if err != nil {
		return err
	}
	if code >= 0x80 {
		return fmt.Errorf("sim: connection refused, reason 0x%02x", code)
	}
	return c.nc.SetDeadline(time.Time{})
}

// track takes a packet id not in use [MQTT-2.2.1-3]; with wait, also the channel its
// PUBACK's outcome arrives on.
func (c *termConn) track(wait bool) (uint16, chan error, error) {
	var done chan error
	if wait {
		done = donePool.Get().(chan error) // buffered: acked or fail may send before the publisher waits
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost {
		if done != nil {
			donePool.Put(done)
		}
		return 0, nil, errConnectionLost
	}
	for {
		c.lastID++
		if _, used := c.inflight[c.lastID]; !used && c.lastID != 0 {
			break
		}
	}
	c.inflight[c.lastID] = done
	return c.lastID, done, nil
}

// untrack releases id; false when acked or fail released it first (and sends on its
// channel).
func (c *termConn) untrack(id uint16) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.inflight[id]
	delete(c.inflight, id)
	return ok
}

// acked releases id; a publisher waiting for it learns the reason code's verdict.
func (c *termConn) acked(id uint16, code byte) {
	c.mu.Lock()
	done, ok := c.inflight[id]
	delete(c.inflight, id)
	c.mu.Unlock()
	if !ok || done == nil {
		return
	}
	if code >= 0x80 {
		done <- fmt.Errorf("sim: PUBACK reason 0x%02x", code)
		return
	}
	done <- nil
}

// fail ends every wait for a PUBACK: the connection is gone.
func (c *termConn) fail() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lost = true
	for id, done := range c.inflight {
		if done != nil {
			done <- errConnectionLost
		}
		delete(c.inflight, id)
	}
}

// flush writes the packet in wbuf; called with wmu held.
func (c *termConn) flush() error {
	_, err := c.nc.Write(c.wbuf)
	c.wrote.Store(true)
	if cap(c.wbuf) > 64<<10 { // do not keep a large buffer after a large packet
		c.wbuf = nil
	}
	return err
}

func (c *termConn) publish(topic string, qos byte, id uint16, payload []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = mqttwire.AppendPublish(c.wbuf[:0], topic, qos, id, payload)
	return c.flush()
}

func (c *termConn) puback(id uint16) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = mqttwire.AppendPuback(c.wbuf[:0], id)
	return c.flush()
}

func (c *termConn) subscribe(id uint16, filter string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = mqttwire.AppendSubscribe(c.wbuf[:0], id, filter)
	return c.flush()
}

func (c *termConn) pingreq() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = mqttwire.AppendPingreq(c.wbuf[:0])
	return c.flush()
}

func (c *termConn) disconnect() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = mqttwire.AppendDisconnect(c.wbuf[:0])
	return c.flush()
}

// StartMQTT starts one simulated terminal per id, each with its own connection to the
// broker at brokerURL (mqtt://host:port or tcp://host:port; mqtts://, ssl:// or tls://
// for TLS with opts.TLS). Use WaitReady before sending commands.
func StartMQTT(brokerURL string, ids []string, opts Options) (*Fleet, error) {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return nil, fmt.Errorf("sim: broker url: %w", err)
	}
	var tlsConfig *tls.Config
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "tcp":
	case "mqtts", "ssl", "tls":
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if opts.TLS != nil {
			tlsConfig = opts.TLS.Clone()
		}
		if tlsConfig.ServerName == "" {
			tlsConfig.ServerName = u.Hostname()
		}
	default:
		return nil, fmt.Errorf("sim: broker url %q: want mqtt://, tcp://, mqtts://, ssl:// or tls://", brokerURL)
	}
	f, err := newFleet(ids, opts)
	if err != nil {
		return nil, err
	}
	for _, t := range f.terms {
		m := newMQTTTerm(t, f.g, u.Host, tlsConfig)
		t.tr = m
		f.ready = append(f.ready, m.ready)
		m.connect()
	}
	f.start()
	return f, nil
}
