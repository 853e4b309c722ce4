package broker

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"

	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
	"github.com/seed0e69bba5/faceagent/resp3"
)

const waitFor = 5 * time.Second

// startBroker starts a broker on a free loopback port; it is closed when the
// test ends.
func startBroker(t testing.TB, o Options, hooks ...mqtt.Hook) *Broker {
	t.Helper()
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.UsersFile == "" && o.Users == nil {
		o.AllowAnonymous = true
	}
	b, err := New(&o)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hooks {
		if err := b.AddHook(h, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// cmd encodes a command as the SDKs do: an array of blob strings.
func cmd(args ...string) []byte {
	b := resp3.AppendArrayHeader(nil, len(args))
	for _, a := range args {
		b = resp3.AppendBlobString(b, a)
	}
	return b
}

// client is a paho client that talks to the state store the way the Go SDK
// does: it subscribes to its response topic with No Local and sends raw RESP3
// with the SDK's request properties (wire fact 9).
type client struct {
	t             testing.TB
	id            string
	c             *paho.Client
	responseTopic string
	clock         *hlc.Clock

	mu      sync.Mutex
	pending map[string]chan *paho.Publish
	seq     atomic.Uint64

	other        chan *paho.Publish // everything that is not a response (notifications)
	disconnected chan *paho.Disconnect
}

type dialOptions struct {
	user, password string
	tls            *tls.Config
	noSubscribe    bool // do not subscribe to the response topic
	cleanStart     *bool
	sessionExpiry  uint32
	subscribe      []string // extra subscriptions (QoS 1)
}

func dial(t testing.TB, addr, id string, o dialOptions) *client {
	t.Helper()
	c, err := tryDial(t, addr, id, o)
	if err != nil {
		t.Fatalf("dial %s as %s: %v", addr, id, err)
	}
	return c
}

func tryDial(t testing.TB, addr, id string, o dialOptions) (*client, error) {
	var conn net.Conn
	var err error
	if o.tls != nil {
		conn, err = tls.Dial("tcp", addr, o.tls)
	} else {
		conn, err = net.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	if o.tls != nil {
		conn = packets.NewThreadSafeConn(conn) // paho: tls.Conn writes are not goroutine-safe
	}
	cl := &client{
		t: t, id: id,
		responseTopic: goResponseTopic(id),
		clock:         hlc.NewClock(id),
		pending:       make(map[string]chan *paho.Publish),
		other:         make(chan *paho.Publish, 1024),
		disconnected:  make(chan *paho.Disconnect, 1),
	}
	cl.c = paho.NewClient(paho.ClientConfig{
		Conn: conn,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			cl.route(pr.Packet)
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case cl.disconnected <- d:
			default:
			}
		},
		OnClientError: func(error) {},
	})
	cp := &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true}
	if o.cleanStart != nil {
		cp.CleanStart = *o.cleanStart
	}
	if o.sessionExpiry > 0 {
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: &o.sessionExpiry}
	}
	if o.user != "" {
		cp.Username, cp.UsernameFlag = o.user, true
		cp.Password, cp.PasswordFlag = []byte(o.password), true
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ack, err := cl.c.Connect(ctx, cp)
	if err != nil {
		_ = conn.Close()
		if ack != nil {
			return nil, fmt.Errorf("connack %d %s: %w", ack.ReasonCode, ack.Properties.ReasonString, err)
		}
		return nil, err
	}
	t.Cleanup(cl.close)
	subs := []paho.SubscribeOptions{}
	if !o.noSubscribe {
		subs = append(subs, paho.SubscribeOptions{Topic: cl.responseTopic, QoS: 1, NoLocal: true})
	}
	for _, f := range o.subscribe {
		subs = append(subs, paho.SubscribeOptions{Topic: f, QoS: 1})
	}
	if len(subs) > 0 {
		if sa, err := cl.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs}); err != nil {
			if sa != nil {
				return nil, fmt.Errorf("subscribe: %v %w", sa.Reasons, err)
			}
			return nil, fmt.Errorf("subscribe: %w", err)
		}
	}
	return cl, nil
}

// goResponseTopic is the Go SDK's response topic for client id.
func goResponseTopic(id string) string {
	return "clients/" + strings.ToUpper(hex.EncodeToString([]byte(id))) + "/" + InvokeTopic + "/response"
}

func (c *client) close() {
	_ = c.c.Disconnect(&paho.Disconnect{})
	select {
	case <-c.c.Done():
	case <-time.After(waitFor):
		c.t.Errorf("client %s did not stop", c.id)
	}
}

func (c *client) route(p *paho.Publish) {
	if p.Properties != nil && p.Topic == c.responseTopic {
		c.mu.Lock()
		ch := c.pending[string(p.Properties.CorrelationData)]
		delete(c.pending, string(p.Properties.CorrelationData))
		c.mu.Unlock()
		if ch != nil {
			ch <- p
			return
		}
	}
	select {
	case c.other <- p:
	default:
		c.t.Errorf("client %s: unexpected message queue full", c.id)
	}
}

// req describes one request; the zero value is what the Go SDK sends.
type req struct {
	noTS          bool
	noExpiry      bool   // no Message Expiry (the SDKs always send one)
	ts            string // "" = the client's clock
	ft            string
	persist       bool
	qos           byte // 0 means 1; use qos0 for QoS 0
	qos0          bool
	noCorrelation bool
	responseTopic *string
	timeout       time.Duration // for the PUBACK; default waitFor
	topic         string        // default InvokeTopic
}

func (c *client) publish(payload []byte, r req) (correlation []byte, wait chan *paho.Publish, err error) {
	correlation = fmt.Appendf(nil, "%016d", c.seq.Add(1)) // 16 bytes, like the SDKs' UUIDs
	ts := r.ts
	if ts == "" {
		ts = c.clock.Now().String()
	}
	expiry := uint32(10)
	props := &paho.PublishProperties{
		ContentType:   "application/octet-stream",
		ResponseTopic: c.responseTopic,
		MessageExpiry: &expiry,
		User: paho.UserProperties{
			{Key: "__srcId", Value: c.id},
			{Key: "__protVer", Value: "1.0"},
			{Key: "$partition", Value: c.id},
			{Key: "$high_priority", Value: ""},
		},
	}
	if !r.noCorrelation {
		props.CorrelationData = correlation
	}
	if r.noExpiry {
		props.MessageExpiry = nil
	}
	if r.responseTopic != nil {
		props.ResponseTopic = *r.responseTopic
	}
	if !r.noTS {
		props.User = append(props.User, paho.UserProperty{Key: "__ts", Value: ts})
	}
	if r.ft != "" {
		props.User = append(props.User, paho.UserProperty{Key: "__ft", Value: r.ft})
	}
	if r.persist {
		props.User = append(props.User, paho.UserProperty{Key: "aio-persistence", Value: "true"})
	}
	qos := byte(1)
	if r.qos != 0 {
		qos = r.qos
	}
	if r.qos0 {
		qos = 0
	}
	// The response can arrive before the PUBACK (docs/design.md "Library facts").
	wait = make(chan *paho.Publish, 1)
	c.mu.Lock()
	if r.noCorrelation {
		c.pending[""] = wait
	} else {
		c.pending[string(correlation)] = wait
	}
	c.mu.Unlock()
	timeout := waitFor
	if r.timeout > 0 {
		timeout = r.timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	topic := InvokeTopic
	if r.topic != "" {
		topic = r.topic
	}
	_, err = c.c.Publish(ctx, &paho.Publish{QoS: qos, Topic: topic, Payload: payload, Properties: props})
	return correlation, wait, err
}

// do sends one request and returns its response.
func (c *client) do(payload []byte, r req) *paho.Publish {
	c.t.Helper()
	correlation, wait, err := c.publish(payload, r)
	if err != nil {
		c.t.Fatalf("publish %q: %v", payload, err)
	}
	select {
	case p := <-wait:
		if !r.noCorrelation && !bytes.Equal(p.Properties.CorrelationData, correlation) {
			c.t.Fatalf("correlation data %q, want %q", p.Properties.CorrelationData, correlation)
		}
		if v := p.Properties.User.Get("__ts"); v != "" {
			if ts, err := hlc.ParseString(v); err == nil {
				c.clock.Observe(ts)
			}
		}
		return p
	case <-time.After(waitFor):
		c.t.Fatalf("no response to %q", payload)
		return nil
	}
}

// next returns the next message that is not a response.
func (c *client) next() *paho.Publish {
	c.t.Helper()
	select {
	case p := <-c.other:
		return p
	case <-time.After(waitFor):
		c.t.Fatalf("client %s: no notification", c.id)
		return nil
	}
}

// none asserts that no other message is queued once a later response came
// back (responses and notifications leave the broker in order per client).
func (c *client) none() {
	c.t.Helper()
	c.do(cmd("GET", "\x00barrier"), req{})
	select {
	case p := <-c.other:
		c.t.Fatalf("client %s: unexpected message on %s: %q", c.id, p.Topic, p.Payload)
	default:
	}
}

// logBuffer is a slog handler target the tests read.
type logBuffer struct{ testutil.SyncBuffer }

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// disconnectHook signals each client the broker finished disconnecting
// (after the service's own OnDisconnect, which was added first).
type disconnectHook struct {
	mqtt.HookBase
	ch chan *mqtt.Client
}

func (h *disconnectHook) ID() string { return "test-disconnects" }
func (h *disconnectHook) Provides(b byte) bool {
	return b == mqtt.OnDisconnect
}
func (h *disconnectHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	select {
	case h.ch <- cl:
	default:
	}
}

// closeWithin closes b and fails the test if Close does not return within bound (what
// says what held it up).
func closeWithin(t *testing.T, b *Broker, bound time.Duration, what string) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(bound):
		t.Fatalf("Close did not return within %v %s", bound, what)
	}
}
