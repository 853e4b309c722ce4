package soakclient

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/internal/mqttwire"
	"github.com/seed0e69bba5/faceagent/internal/sswire"
)

// Options configure a Client.
type Options struct {
	// Addr is the broker's host:port.
	Addr string
	// ClientID is the MQTT client id; it must be unique per test (the session is kept).
	ClientID string
	// Timeout is each request's timeout, sent as Message Expiry in whole seconds (rounded
	// up). Default 10 s, the SDK's DefaultTimeout.
	Timeout time.Duration
	// KeepAlive in seconds; default 60, the SDK's.
	KeepAlive uint16
	// Reconnect is how long to keep trying to connect again after the connection is
	// lost (every 50 ms); 0: a lost connection ends the client.
	Reconnect time.Duration
	// AckGrace: an answer acknowledged less than this before the connection dropped may
	// come again after the reconnect without counting as a phantom (the broker may not
	// have stored the acknowledgement). Default 2 s.
	AckGrace time.Duration
}

// ErrSessionLost is returned when the broker answers a reconnect without the session.
var ErrSessionLost = errors.New("soakclient: the broker did not keep the session (CONNACK session present 0 on a reconnect)")

// sdkReceiveMaximum and sdkSessionExpiry are the session client's defaults.
const (
	sdkReceiveMaximum = 65535
	sdkSessionExpiry  = 0xFFFFFFFF
	contentType       = "application/octet-stream"
	connectTimeout    = 5 * time.Second
)

// Client is one session-client connection. Connect it with Dial, drive it with Run, end
// it with Close.
type Client struct {
	opts      Options
	respTopic string
	clock     *hlc.Clock
	prefix    [8]byte // correlation data (a UUID's 16 bytes): prefix, then the request's number

	wmu       sync.Mutex // guards the fields below it, and every write
	conn      net.Conn
	bw        *bufio.Writer
	wbuf      []byte
	lastWrite time.Time
	nextID    uint16
	unacked   map[uint16]*request // requests the broker has not PUBACKed (sent or not)
	serverMax int                 // the broker's Receive Maximum
	closed    bool
	sink      *sink // a prepared barrier's session (barrier.go)

	// used by lost only, which runs for one connection at a time
	lastResume time.Time
	backoff    time.Duration

	// mu guards the tracking below and Run's state (run.go).
	mu         sync.Mutex
	recs       []rec // by request number
	pending    map[int64]*request
	drops      []time.Time
	barrierAt  int64 // unix ns of the last Barrier's write
	resumes    int
	unknown    int
	problems   []string
	nProblems  int
	answered   int
	lastAnswer time.Time     // of the last first answer
	progress   chan struct{} // closed and replaced at every first answer
	down       chan struct{} // closed when the connection is lost for good
	downErr    error
	run        *runState
}

// rec is what the client remembers of every request, answered or not.
type rec struct {
	sent      int64 // unix ns of its first write; 0 until written
	ackedAt   int64 // unix ns its first answer's PUBACK was written
	latency   int64 // ns, first write to first answer; -1 when a reconnect came between
	answers   uint16
	resends   uint16
	graceLeft uint16 // answers allowed for acknowledgements near a drop
	timedOut  bool
	pubacked  bool // the broker acknowledged it: the request is the broker's
	mayBeLost bool // acknowledged, unanswered at a drop, and not covered by a barrier
}

// Dial connects (CONNECT with Clean Start false, as the SDK, and then SUBSCRIBE of the
// response topic with No Local) and starts the client's reader.
func Dial(ctx context.Context, o Options) (*Client, error) {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = 60
	}
	if o.AckGrace <= 0 {
		o.AckGrace = 2 * time.Second
	}
	c := &Client{
		opts:      o,
		respTopic: "clients/" + string(sswire.AppendUpperHex(nil, []byte(o.ClientID))) + "/" + sswire.InvokeTopic + "/response",
		clock:     hlc.NewClock(uuidString()),
		unacked:   make(map[uint16]*request),
		pending:   make(map[int64]*request),
		progress:  make(chan struct{}),
		down:      make(chan struct{}),
	}
	_, _ = rand.Read(c.prefix[:])
	c.prefix[6] = c.prefix[6]&0x0f | 0x40 // a version 4 UUID, with the variant in the number's top bits
	conn, br, _, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	c.wmu.Lock()
	c.install(conn)
	id := c.takeID()
	c.wbuf = mqttwire.AppendSubscribeOptions(c.wbuf[:0], id, c.respTopic, 1|mqttwire.SubNoLocal)
	err = c.writeLocked(c.wbuf)
	c.wmu.Unlock()
	if err == nil {
		err = expectSuback(conn, br, id)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("soakclient: subscribe %s: %w", c.respTopic, err)
	}
	go c.read(conn, br)
	go c.ping()
	return c, nil
}

// ResponseTopic is the topic the client's answers come on.
func (c *Client) ResponseTopic() string { return c.respTopic }

// uuidString is a random UUID's text, the SDK's kind of HLC node id.
func uuidString() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// connect dials and exchanges CONNECT and CONNACK. A reconnect must find the session.
func (c *Client) connect(ctx context.Context) (net.Conn, *bufio.Reader, bool, error) {
	d := net.Dialer{Timeout: connectTimeout}
	conn, err := d.DialContext(ctx, "tcp", c.opts.Addr)
	if err != nil {
		return nil, nil, false, err
	}
	_ = conn.SetDeadline(time.Now().Add(connectTimeout))
	pkt := mqttwire.AppendConnectProps(nil, &mqttwire.Connect{
		ClientID: c.opts.ClientID, KeepAlive: c.opts.KeepAlive, SessionExpiry: sdkSessionExpiry,
		ReceiveMaximum: sdkReceiveMaximum, RequestProblemInfo: true,
		User: []mqttwire.UserProperty{{Key: []byte("metriccategory"), Val: []byte("aiosdk-go")}},
	})
	if _, err := conn.Write(pkt); err != nil {
		conn.Close()
		return nil, nil, false, err
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	first, body, _, err := mqttwire.ReadPacket(br, nil)
	if err != nil {
		conn.Close()
		return nil, nil, false, fmt.Errorf("soakclient: reading CONNACK: %w", err)
	}
	if first>>4 != mqttwire.TypeConnack {
		conn.Close()
		return nil, nil, false, fmt.Errorf("soakclient: packet type %d instead of CONNACK", first>>4)
	}
	ack, err := mqttwire.ParseConnackProps(body)
	if err == nil && ack.Code != 0 {
		err = fmt.Errorf("soakclient: CONNACK reason %#x", ack.Code)
	}
	var props mqttwire.Properties
	if err == nil {
		err = mqttwire.ParseProperties(ack.Props, &props)
	}
	if err != nil {
		conn.Close()
		return nil, nil, false, err
	}
	c.wmu.Lock()
	c.serverMax = 65535
	if props.Present(mqttwire.PropReceiveMaximum) {
		c.serverMax = int(props.ReceiveMaximum)
	}
	c.wmu.Unlock()
	_ = conn.SetDeadline(time.Time{})
	return conn, br, ack.SessionPresent, nil
}

// expectSuback reads the SUBACK of id, before the reader runs: nothing else can come yet
// on a session the client has just made (a stored one brings its messages first, and the
// client subscribes only on its first connection).
func expectSuback(conn net.Conn, br *bufio.Reader, id uint16) error {
	_ = conn.SetReadDeadline(time.Now().Add(connectTimeout))
	defer conn.SetReadDeadline(time.Time{})
	first, body, _, err := mqttwire.ReadPacket(br, nil)
	if err != nil {
		return err
	}
	if first>>4 != mqttwire.TypeSuback {
		return fmt.Errorf("packet type %d instead of SUBACK (a session left from an earlier run? use a new client id)", first>>4)
	}
	got, code, err := mqttwire.ParseAck(mqttwire.TypeSuback, body)
	if err != nil {
		return err
	}
	if got != id || code != 1 {
		return fmt.Errorf("SUBACK id %d reason %#x, want id %d granted QoS 1", got, code, id)
	}
	return nil
}

// install makes conn the connection writes go to. c.wmu held.
func (c *Client) install(conn net.Conn) {
	c.conn = conn
	c.bw = bufio.NewWriterSize(conn, 16<<10)
	c.lastWrite = time.Now()
}

// takeID returns the next packet id in sequence that is not in use. c.wmu held.
func (c *Client) takeID() uint16 {
	for {
		c.nextID++
		if c.nextID == 0 {
			c.nextID = 1
		}
		if _, used := c.unacked[c.nextID]; !used {
			return c.nextID
		}
	}
}

// writeLocked writes one packet and flushes it, as paho writes each packet. Without a
// connection it does nothing: requests wait in unacked for the reconnect. c.wmu held;
// c.wbuf is the scratch buffer for building packets under it (a request's own bytes are
// kept in the request, for resending).
func (c *Client) writeLocked(pkt []byte) error {
	if c.conn == nil {
		return nil
	}
	if _, err := c.bw.Write(pkt); err != nil {
		return err
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	c.lastWrite = time.Now()
	return nil
}

// ping writes PINGREQ when nothing was written for 3/4 of the keep alive.
func (c *Client) ping() {
	ka := time.Duration(c.opts.KeepAlive) * time.Second
	t := time.NewTicker(ka / 4)
	defer t.Stop()
	for {
		select {
		case <-c.down:
			return
		case <-t.C:
		}
		c.wmu.Lock()
		if c.closed {
			c.wmu.Unlock()
			return
		}
		if c.conn != nil && time.Since(c.lastWrite) >= ka*3/4 {
			c.wbuf = mqttwire.AppendPingreq(c.wbuf[:0])
			_ = c.writeLocked(c.wbuf)
		}
		c.wmu.Unlock()
	}
}

// read handles what the broker sends on conn until it fails, then reconnects.
func (c *Client) read(conn net.Conn, br *bufio.Reader) {
	var buf []byte
	var props mqttwire.Properties
	for {
		first, body, grown, err := mqttwire.ReadPacket(br, buf)
		if err != nil {
			c.lost(conn, err)
			return
		}
		buf = grown
		switch first >> 4 {
		case mqttwire.TypePublish:
			p, err := mqttwire.ParsePublish(first, body)
			if err == nil {
				err = mqttwire.ParseProperties(p.Props, &props)
			}
			if err != nil {
				c.problem("malformed PUBLISH from the broker: %v", err)
				conn.Close()
				continue
			}
			c.answer(&p, &props)
		case mqttwire.TypePuback:
			id, code, err := mqttwire.ParseAck(mqttwire.TypePuback, body)
			if err != nil {
				c.problem("malformed PUBACK: %v", err)
				continue
			}
			c.pubacked(id, code)
		case mqttwire.TypePingresp:
		case mqttwire.TypeDisconnect:
			code := byte(0)
			if len(body) > 0 {
				code = body[0]
			}
			if code != 0x8B { // server shutting down: a restart, which the client rides out
				c.problem("the broker sent DISCONNECT, reason %#x", code)
			}
		default:
			c.problem("unexpected packet type %d", first>>4)
		}
	}
}

// pubacked records the broker's PUBACK of a request.
func (c *Client) pubacked(id uint16, code byte) {
	c.wmu.Lock()
	r, ok := c.unacked[id]
	if ok {
		delete(c.unacked, id)
	}
	c.wmu.Unlock()
	if !ok {
		c.problem("PUBACK for packet id %d, which no request in flight has", id)
		return
	}
	if r.n < 0 { // a barrier: in force from here, before the reader sees a drop
		if code >= 0x80 {
			r.failed = fmt.Sprintf("PUBACK %#x", code)
		} else {
			c.mu.Lock()
			c.barrierAt = r.barrierAt
			c.mu.Unlock()
		}
		close(r.done)
		return
	}
	if code >= 0x80 {
		c.problem("request %d (%s) refused: PUBACK reason %#x", r.n, r.op, code)
		c.fail(r, fmt.Sprintf("PUBACK %#x", code))
		return
	}
	c.mu.Lock()
	c.recs[r.n].pubacked = true
	c.mu.Unlock()
}

// lost handles the end of a connection: reconnect within Options.Reconnect, or end.
func (c *Client) lost(conn net.Conn, cause error) {
	conn.Close()
	now := time.Now()
	c.wmu.Lock()
	closed := c.closed
	if c.conn == conn {
		c.conn, c.bw = nil, nil
	}
	c.wmu.Unlock()
	if closed {
		c.end(cause)
		return
	}
	c.mu.Lock()
	// Answers acknowledged just before the drop may come again: those after the last
	// Barrier since the previous drop, or else those within AckGrace.
	cut := now.Add(-c.opts.AckGrace).UnixNano()
	barrier := c.barrierAt != 0 && (len(c.drops) == 0 || c.barrierAt > c.drops[len(c.drops)-1].UnixNano())
	if barrier {
		cut = c.barrierAt
	}
	c.drops = append(c.drops, now)
	for i := range c.recs {
		r := &c.recs[i]
		if r.ackedAt >= cut {
			r.graceLeft++
		}
		// An acknowledged request unanswered now, written after the last barrier: if it is
		// never answered, a crash lost its answer (the report counts those apart).
		if r.answers == 0 && r.pubacked && r.sent != 0 && (!barrier || r.sent >= c.barrierAt) {
			r.mayBeLost = true
		}
	}
	if c.run != nil {
		c.run.dropped()
	}
	c.mu.Unlock()
	if c.opts.Reconnect <= 0 {
		c.end(fmt.Errorf("soakclient: connection lost: %w", cause))
		return
	}
	deadline := now.Add(c.opts.Reconnect)
	// Back off when a resumed connection was lost again at once (the SDK's retry policy
	// is an exponential backoff too): a broker refusing the session must not be hammered.
	if now.Sub(c.lastResume) < time.Second {
		c.backoff = min(2*c.backoff+10*time.Millisecond, time.Second)
		time.Sleep(c.backoff)
	} else {
		c.backoff = 0
	}
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		conn, br, present, err := c.connect(ctx)
		cancel()
		if err == nil && !present {
			conn.Close()
			c.end(ErrSessionLost)
			return
		}
		if err == nil {
			if err = c.resume(conn); err != nil {
				conn.Close()
			}
		}
		if err == nil {
			c.mu.Lock()
			c.resumes++
			c.mu.Unlock()
			c.lastResume = time.Now()
			go c.read(conn, br)
			return
		}
		c.wmu.Lock()
		closed := c.closed
		c.wmu.Unlock()
		if closed || time.Now().After(deadline) {
			c.end(fmt.Errorf("soakclient: no reconnect within %v: %w (connection lost: %v)", c.opts.Reconnect, err, cause))
			return
		}
		time.Sleep(50 * time.Millisecond) // the broker is restarting: poll for it
	}
}

// resume installs a reconnected conn and sends again, in the order they were first
// taken, the requests the broker had not acknowledged (DUP on those written before).
func (c *Client) resume(conn net.Conn) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.install(conn)
	reqs := make([]*request, 0, len(c.unacked))
	for _, r := range c.unacked {
		reqs = append(reqs, r)
	}
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].n < reqs[j].n })
	for _, r := range reqs {
		dup := r.written
		if dup && r.n >= 0 {
			c.mu.Lock()
			c.recs[r.n].resends++
			c.mu.Unlock()
		}
		c.noteWrite(r)
		c.wbuf = c.appendRequest(c.wbuf[:0], r, dup)
		if err := c.writeLocked(c.wbuf); err != nil {
			c.conn, c.bw = nil, nil
			return err
		}
	}
	return nil
}

// end marks the client down for good.
func (c *Client) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.down:
	default:
		c.downErr = err
		close(c.down)
	}
}

// problem records something that went wrong (the first 20 are kept verbatim).
func (c *Client) problem(format string, args ...any) {
	c.mu.Lock()
	c.problemLocked(format, args...)
	c.mu.Unlock()
}

func (c *Client) problemLocked(format string, args ...any) {
	c.nProblems++
	if len(c.problems) < 20 {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	}
}

// Close ends the session as the SDK's Stop does (DISCONNECT with Session Expiry 0) and
// closes the connection.
func (c *Client) Close() error {
	c.wmu.Lock()
	c.closed = true
	if c.sink != nil {
		c.sink.close()
		c.sink = nil
	}
	var err error
	if c.conn != nil {
		c.wbuf = mqttwire.AppendDisconnectExpiry(c.wbuf[:0], 0)
		err = c.writeLocked(c.wbuf)
		c.conn.Close()
	}
	c.wmu.Unlock()
	c.end(errors.New("soakclient: closed"))
	return err
}

// Problems returns the number of problems seen and the first ones.
func (c *Client) Problems() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nProblems, strings.Join(c.problems, "\n")
}
