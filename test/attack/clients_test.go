package attack

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pahopackets "github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/internal/mqttwire"
	"github.com/seed0e69bba5/faceagent/internal/sswire"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// waitFor bounds every single exchange with the agent (a CONNACK, a PUBACK, a reply).
const waitFor = 10 * time.Second

// dial opens a connection to the broker as a legitimate client does (TLS with the
// client certificate when the setup wants one).
func (s *system) dial() (net.Conn, error) {
	d := &net.Dialer{Timeout: waitFor}
	if s.pki != nil {
		c, err := tls.DialWithDialer(d, "tcp", s.brokerAddr, s.pki.clientTLS())
		if err != nil {
			return nil, err
		}
		return pahopackets.NewThreadSafeConn(c), nil // paho: tls.Conn writes are not goroutine-safe
	}
	return d.Dial("tcp", s.brokerAddr)
}

// clientOpts describe an attacker's (or a victim's) MQTT 5 connection.
type clientOpts struct {
	id   string
	user string // "": anonymous; otherwise a user of the users file (userHashes), with its password
	// password replaces the user's password when not nil.
	password      []byte
	sessionExpiry uint32 // > 0: a kept session (clean start stays true unless resume)
	resume        bool   // clean start off
}

// mqttClient is a paho client with a state store request helper: replies are matched by
// correlation data, everything else arrives on msgs.
type mqttClient struct {
	t             *testing.T
	id            string
	c             *paho.Client
	responseTopic string
	clock         *hlc.Clock
	seq           atomic.Uint64

	mu      sync.Mutex
	pending map[string]chan *paho.Publish

	msgs         chan *paho.Publish
	disconnected chan *paho.Disconnect
}

// connect connects a client; the CONNACK's reason code comes back with the error of a
// refusal. The client is closed when the test ends.
func (s *system) connect(t *testing.T, o clientOpts) (*mqttClient, byte, error) {
	conn, err := s.dial()
	if err != nil {
		return nil, 0, err
	}
	mc := &mqttClient{t: t, id: o.id, clock: hlc.NewClock(o.id), pending: map[string]chan *paho.Publish{},
		msgs: make(chan *paho.Publish, 4096), disconnected: make(chan *paho.Disconnect, 1),
		responseTopic: "clients/" + o.id + "/attack/response"}
	mc.c = paho.NewClient(paho.ClientConfig{
		Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			mc.route(pr.Packet)
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case mc.disconnected <- d:
			default:
			}
		},
		OnClientError: func(error) {},
	})
	cp := &paho.Connect{ClientID: o.id, KeepAlive: 30, CleanStart: !o.resume}
	if o.sessionExpiry > 0 {
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &o.sessionExpiry}
	}
	if o.user != "" {
		cp.Username, cp.UsernameFlag = o.user, true
		cp.Password, cp.PasswordFlag = []byte(password(o.user)), true
	}
	if o.password != nil {
		cp.Password, cp.PasswordFlag = o.password, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ack, err := mc.c.Connect(ctx, cp)
	if err != nil {
		_ = conn.Close()
		if ack != nil {
			return nil, ack.ReasonCode, err
		}
		return nil, 0, err
	}
	t.Cleanup(mc.close)
	return mc, ack.ReasonCode, nil
}

// mustConnect connects or fails the test.
func (s *system) mustConnect(t *testing.T, o clientOpts) *mqttClient {
	t.Helper()
	mc, code, err := s.connect(t, o)
	if err != nil {
		t.Fatalf("connect %s as %q: %v (CONNACK 0x%02x)", o.id, o.user, err, code)
	}
	return mc
}

// storeClient connects and subscribes to the client's response topic, for requests.
func (s *system) storeClient(t *testing.T, o clientOpts) *mqttClient {
	t.Helper()
	mc := s.mustConnect(t, o)
	if code, err := mc.subscribe(mc.responseTopic); err != nil || code >= 0x80 {
		t.Fatalf("subscribe %s: 0x%02x %v", mc.responseTopic, code, err)
	}
	return mc
}

func (mc *mqttClient) close() {
	_ = mc.c.Disconnect(&paho.Disconnect{})
	select {
	case <-mc.c.Done():
	case <-time.After(waitFor):
		mc.t.Errorf("client %s did not stop", mc.id)
	}
}

func (mc *mqttClient) route(p *paho.Publish) {
	if p.Properties != nil && p.Topic == mc.responseTopic {
		mc.mu.Lock()
		ch := mc.pending[string(p.Properties.CorrelationData)]
		delete(mc.pending, string(p.Properties.CorrelationData))
		mc.mu.Unlock()
		if ch != nil {
			ch <- p
			return
		}
	}
	select {
	case mc.msgs <- p:
	default: // an attack floods it; tests that read msgs keep up
	}
}

// subscribe subscribes to filter with QoS 1 and returns the SUBACK's reason code.
func (mc *mqttClient) subscribe(filter string) (byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	sa, err := mc.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1, NoLocal: true}}})
	if sa != nil && len(sa.Reasons) > 0 {
		return sa.Reasons[0], nil
	}
	return 0, err
}

// publish publishes with QoS 1 and returns the PUBACK's reason code.
func (mc *mqttClient) publish(topic string, payload []byte, props *paho.PublishProperties) (byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	pr, err := mc.c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: payload, Properties: props})
	if pr != nil {
		return pr.ReasonCode, nil
	}
	return 0, err
}

// storeReq is one state store request; the zero value is what the Go SDK sends.
type storeReq struct {
	responseTopic string // "" = the client's own
	ft            string // __ft, when set
}

// request sends a state store request and returns its reply's payload; code is the
// PUBACK's reason code (a refused request gets no reply).
func (mc *mqttClient) request(payload []byte, r storeReq) (reply []byte, code byte, err error) {
	correlation := fmt.Appendf(nil, "%016d", mc.seq.Add(1))
	expiry := uint32(10)
	props := &paho.PublishProperties{
		ContentType: "application/octet-stream", ResponseTopic: mc.responseTopic,
		CorrelationData: correlation, MessageExpiry: &expiry,
		User: paho.UserProperties{{Key: "__srcId", Value: mc.id}, {Key: "__protVer", Value: "1.0"},
			{Key: "__ts", Value: mc.clock.Now().String()}},
	}
	if r.responseTopic != "" {
		props.ResponseTopic = r.responseTopic
	}
	if r.ft != "" {
		props.User = append(props.User, paho.UserProperty{Key: "__ft", Value: r.ft})
	}
	wait := make(chan *paho.Publish, 1)
	mc.mu.Lock()
	mc.pending[string(correlation)] = wait
	mc.mu.Unlock()
	code, err = mc.publish(sswire.InvokeTopic, payload, props)
	if err != nil || code >= 0x80 {
		return nil, code, err
	}
	if props.ResponseTopic != mc.responseTopic {
		return nil, code, nil // the reply goes elsewhere
	}
	select {
	case p := <-wait:
		return p.Payload, code, nil
	case <-time.After(waitFor):
		return nil, code, errors.New("no reply")
	}
}

// mustDo sends a request that must be answered, and returns the reply.
func (mc *mqttClient) mustDo(args ...string) string {
	mc.t.Helper()
	reply, code, err := mc.request(command(args...), storeReq{})
	if err != nil || code >= 0x80 {
		mc.t.Fatalf("%q: PUBACK 0x%02x, %v", args, code, err)
	}
	return string(reply)
}

// timestamp is a __ts for a raw request: now, on a clock of its own.
func timestamp() string { return hlc.NewClock("attack").Now().String() }

// command encodes a request as the SDKs do: an array of blob strings.
func command(args ...string) []byte {
	b := resp3.AppendArrayHeader(nil, len(args))
	for _, a := range args {
		b = resp3.AppendBlobString(b, a)
	}
	return b
}

// rawConn is a connection written byte by byte as the test likes: mochi's encoders for
// well-formed packets, anything for the rest. It is closed when the test ends.
type rawConn struct {
	t    testing.TB
	conn net.Conn
	r    *bufio.Reader
	buf  []byte
}

// rawDial opens a raw connection (TLS with the client certificate when the setup wants
// one).
func (s *system) rawDial(t testing.TB) *rawConn {
	t.Helper()
	c, err := s.tryRawDial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.conn.Close() })
	c.t = t
	return c
}

func (s *system) tryRawDial() (*rawConn, error) {
	d := &net.Dialer{Timeout: waitFor}
	var conn net.Conn
	var err error
	if s.pki != nil {
		conn, err = tls.DialWithDialer(d, "tcp", s.brokerAddr, s.pki.clientTLS())
	} else {
		conn, err = d.Dial("tcp", s.brokerAddr)
	}
	if err != nil {
		return nil, err
	}
	return &rawConn{conn: conn, r: bufio.NewReader(conn)}, nil
}

func newReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// write sends b within waitFor.
func (c *rawConn) write(b []byte) error {
	_ = c.conn.SetWriteDeadline(time.Now().Add(waitFor))
	_, err := c.conn.Write(b)
	return err
}

// send encodes pk (MQTT 5 unless it says otherwise) and sends it.
func (c *rawConn) send(pk packets.Packet) error {
	b, err := wire(pk)
	if err != nil {
		return err
	}
	return c.write(b)
}

// wire is pk's wire form, MQTT 5 unless pk says otherwise.
func wire(pk packets.Packet) ([]byte, error) {
	if pk.ProtocolVersion == 0 {
		pk.ProtocolVersion = 5
	}
	pk.Mods.AllowResponseInfo = true // else mochi's encoder leaves Response Topic and Correlation Data out
	var b bytes.Buffer
	err := brokertest.EncodeClientPacket(&b, pk)
	return b.Bytes(), err
}

// read returns the next packet's type and remaining part, within d.
func (c *rawConn) read(d time.Duration) (byte, []byte, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	first, body, grown, err := mqttwire.ReadPacket(c.r, c.buf)
	c.buf = grown
	return first >> 4, body, err
}

// connectPacket is a CONNECT of client id with clean start and a 30 s keepalive.
func connectPacket(id string) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: id}}
}

// loginPacket is connectPacket with user's name and password ("" for none).
func loginPacket(id, user string) packets.Packet {
	pk := connectPacket(id)
	if user != "" {
		pk.Connect.UsernameFlag, pk.Connect.Username = true, []byte(user)
		pk.Connect.PasswordFlag, pk.Connect.Password = true, []byte(password(user))
	}
	return pk
}

// connack sends pk (a CONNECT) and returns the CONNACK's reason code.
func (c *rawConn) connack(pk packets.Packet) (byte, error) {
	if err := c.send(pk); err != nil {
		return 0, err
	}
	typ, body, err := c.read(waitFor)
	if err != nil {
		return 0, err
	}
	if typ != packets.Connack || len(body) < 2 {
		return 0, fmt.Errorf("packet type %d instead of CONNACK", typ)
	}
	return body[1], nil
}

// closedWithin reads until the agent closes the connection, at most d; it returns the
// reason code of a DISCONNECT (or a CONNACK refusing it) seen on the way, 0 if none, and
// an error if the connection was still open after d.
func (c *rawConn) closedWithin(d time.Duration) (byte, error) {
	deadline := time.Now().Add(d)
	var code byte
	for {
		typ, body, err := c.read(time.Until(deadline))
		var ne net.Error
		switch {
		case err == nil:
			switch {
			case typ == packets.Disconnect && len(body) > 0:
				code = body[0]
			case typ == packets.Connack && len(body) > 1:
				code = body[1]
			}
			continue
		case errors.As(err, &ne) && ne.Timeout():
			return code, fmt.Errorf("connection still open after %v", d)
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
			return code, nil
		default: // reset, or garbage the agent sent back: closed all the same
			return code, nil
		}
	}
}
