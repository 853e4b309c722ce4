package store

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/internal/sswire"
)

// Topics of the state store service (protocol document, "State store system topic").
const (
	invokeTopic       = sswire.InvokeTopic
	notifyTopicPrefix = sswire.NotifyTopicPrefix + "/"
)

type connState int

const (
	stateDown        connState = iota // no connection: requests fail with ErrNotConnected
	stateSubscribing                  // connected, waiting for SUBACK: requests wait
	stateReady                        // subscribed: requests go out
	stateClosed                       // Close called
)

// Client talks to the state store over one MQTT5 connection, which it keeps up with
// reconnects. It is safe for concurrent use; any number of requests may be in flight.
type Client struct {
	opts         Options
	clock        *hlc.Clock
	cm           *autopaho.ConnectionManager
	respTopic    string // clients/{clientId}/services/statestore/_any_/command/invoke/response
	notifyPrefix string // clients/statestore/v1/…/{HEX(clientId)}/command/notify/
	ctx          context.Context
	cancel       context.CancelFunc
	wg           sync.WaitGroup // resync goroutines and watch pumps
	closeOnce    sync.Once
	testMutate   func(*paho.Publish) // tests only: edit each request before it is sent

	testRegisterWait func() // tests only: a request starts waiting for the subscription (c.mu held to read)

	mu       sync.Mutex
	state    connState
	gen      uint64        // generation of the connection that is up (or was up last)
	dialGen  uint64        // generation of the latest dialed network connection
	readyCh  chan struct{} // closed when state becomes stateReady; replaced when the link drops
	readyErr error         // why the last connection could not get ready (refused SUBACK)
	downCh   chan struct{} // closed when the link drops; replaced when it comes up
	pending  map[[16]byte]*call
	watches  map[string]*keyWatch
}

// Connect creates a Client and waits until it is connected and subscribed, or ctx ends (then
// the client is closed and the error returned).
func Connect(ctx context.Context, opts *Options) (*Client, error) {
	c, err := New(opts)
	if err != nil {
		return nil, err
	}
	if err := c.WaitReady(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// New creates a Client and starts connecting in the background; it does not block. Requests
// made before the connection is up fail with ErrNotConnected: use WaitReady.
func New(opts *Options) (*Client, error) {
	o, u, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(o.ClientID, "+#") {
		return nil, fmt.Errorf("store: client id %q contains an MQTT wildcard", o.ClientID)
	}
	c := &Client{
		opts:         o,
		clock:        o.Clock,
		respTopic:    "clients/" + o.ClientID + "/services/statestore/_any_/command/invoke/response",
		notifyPrefix: string(sswire.AppendNotifyTopic(nil, []byte(o.ClientID), nil)),
		readyCh:      make(chan struct{}),
		downCh:       closedChan(),
		pending:      make(map[[16]byte]*call),
		watches:      make(map[string]*keyWatch),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		TlsCfg:                        o.TLS,
		KeepAlive:                     o.KeepAlive,
		CleanStartOnInitialConnection: true,
		SessionExpiryInterval:         0, // the store forgets KEYNOTIFY on disconnect anyway
		ReconnectBackoff:              jitterBackoff(o.ReconnectMin, o.ReconnectMax),
		ConnectTimeout:                o.ConnectTimeout,
		AttemptConnection:             c.dial,
		OnConnectionUp:                c.onConnectionUp,
		OnConnectionDown:              func() bool { c.linkDown(0); return true },
		OnConnectError: func(err error) {
			o.Logger.Debug("store: connect failed", "url", o.URL, "err", err)
		},
		ConnectUsername: o.Username,
		ConnectPassword: o.Password,
		ClientConfig: paho.ClientConfig{
			ClientID: o.ClientID,
			// Handlers belong here, not in AddOnPublishReceived, which is lost on reconnect
			// (docs/design.md "Library facts"). They run one at a time on paho's goroutine: they only
			// hand results over and never block.
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){c.onPublish},
			PacketTimeout:     o.Timeout,
		},
	}
	cm, err := autopaho.NewConnection(c.ctx, cfg)
	if err != nil {
		c.cancel()
		return nil, err
	}
	c.cm = cm
	return c, nil
}

// ClientID returns the MQTT client id in use.
func (c *Client) ClientID() string { return c.opts.ClientID }

// Clock returns the clock that stamps requests and observes responses.
func (c *Client) Clock() *hlc.Clock { return c.clock }

// Ready reports whether the client is connected and subscribed.
func (c *Client) Ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state == stateReady
}

// WaitReady blocks until the client is connected and subscribed to its response topic, or ctx
// ends, or the client is closed. It fails at once with ErrNotConnected when the broker
// refused the response topic's subscription on the connection that is up.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		c.mu.Lock()
		st, ch, refused := c.state, c.readyCh, c.readyErr
		c.mu.Unlock()
		switch st {
		case stateReady:
			return nil
		case stateClosed:
			return ErrClosed
		case stateSubscribing:
			if refused != nil {
				return fmt.Errorf("%w: %w", ErrNotConnected, refused)
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("store: waiting for connection to %s: %w", c.opts.URL, ctx.Err())
		}
	}
}

// linkDownSignal returns a channel closed when the current connection is (or was) lost.
func (c *Client) linkDownSignal() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.downCh
}

// Close disconnects and stops every goroutine of the client. Requests in flight fail with
// ErrClosed; watch channels are closed. Safe to call more than once.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.state = stateClosed
		c.failPendingLocked(ErrClosed)
		watches := c.watches
		c.watches = map[string]*keyWatch{}
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = c.cm.Disconnect(ctx)
		cancel()
		c.cancel()
		for _, kw := range watches {
			for _, w := range kw.watchers {
				w.close()
			}
		}
		c.wg.Wait()
	})
	return nil
}

// dial opens the network connection for autopaho and wraps it so the client learns of a dead
// link from the failing read itself, before autopaho tears the session down, and can fail the
// requests in flight at once.
func (c *Client) dial(ctx context.Context, _ autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	var (
		conn net.Conn
		err  error
	)
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "tcp":
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", u.Host)
	case "mqtts", "tls", "ssl":
		cfg := c.opts.TLS
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		d := tls.Dialer{Config: cfg}
		conn, err = d.DialContext(ctx, "tcp", u.Host)
	default:
		return nil, fmt.Errorf("store: unsupported URL scheme %q", u.Scheme)
	}
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.dialGen++
	gen := c.dialGen
	c.mu.Unlock()
	end := &linkEnd{c: c, gen: gen}
	if tcp, ok := conn.(*net.TCPConn); ok {
		return &trackedTCP{TCPConn: tcp, end: end}, nil
	}
	return &trackedConn{Conn: conn, end: end}, nil
}

// linkEnd reports the end of one network connection to the client, once.
type linkEnd struct {
	c    *Client
	gen  uint64
	once sync.Once
}

func (l *linkEnd) down() { l.once.Do(func() { l.c.linkDown(l.gen) }) }

// trackedConn tells the client the moment its connection fails (a read error or Close). It
// implements sync.Locker so paho serialises its writes (required for TLS).
type trackedConn struct {
	net.Conn
	sync.Mutex
	end *linkEnd
}

func (t *trackedConn) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	if err != nil {
		t.end.down()
	}
	return n, err
}

func (t *trackedConn) Close() error {
	t.end.down()
	return t.Conn.Close()
}

// trackedTCP is trackedConn for plain TCP. It embeds the *net.TCPConn itself so that the
// connection's unexported writev method is promoted: paho writes each packet as net.Buffers,
// and behind a net.Conn interface those would go out as one write system call per buffer,
// which costs round trips when many are in flight (BenchmarkRoundTrip, docs/benchmarks.md).
type trackedTCP struct {
	*net.TCPConn
	sync.Mutex
	end *linkEnd
}

func (t *trackedTCP) Read(p []byte) (int, error) {
	n, err := t.TCPConn.Read(p)
	if err != nil {
		t.end.down()
	}
	return n, err
}

func (t *trackedTCP) Close() error {
	t.end.down()
	return t.TCPConn.Close()
}

// onConnectionUp runs on autopaho's goroutine and must not block: the SUBSCRIBE and the
// watch resumption run on a goroutine of their own.
func (c *Client) onConnectionUp(cm *autopaho.ConnectionManager, _ *paho.Connack) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed {
		return
	}
	c.gen = c.dialGen
	c.state = stateSubscribing
	c.downCh = make(chan struct{})
	c.readyErr = nil
	c.wg.Add(1)
	go c.resync(cm, c.gen) // cm: c.cm may not be assigned yet on the first connection
}

// linkDown marks the connection of generation gen as gone (0: whichever is up) and fails
// the requests in flight with ErrConnectionLost, so they do not wait out their timeouts.
func (c *Client) linkDown(gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed || c.state == stateDown || (gen != 0 && gen != c.gen) {
		return
	}
	if c.state == stateReady {
		c.readyCh = make(chan struct{})
	}
	c.state = stateDown
	close(c.downCh)
	c.failPendingLocked(ErrConnectionLost)
	c.opts.Logger.Info("store: connection lost", "url", c.opts.URL)
}

// resync makes a fresh connection usable: subscribe and await the SUBACK (protocol: "SUBSCRIBE
// … and wait for the SUBACK … before sending any KEYNOTIFY"), then re-register every watched
// key, because the store forgets KEYNOTIFY registrations when a client disconnects.
func (c *Client) resync(cm *autopaho.ConnectionManager, gen uint64) {
	defer c.wg.Done()
	backoff := jitterBackoff(c.opts.ReconnectMin, c.opts.ReconnectMax)
	suback, err := c.subscribe(cm, gen, backoff)
	if suback == nil && err == nil {
		return // the connection went away or the client closed
	}
	c.mu.Lock()
	if c.gen != gen || c.state != stateSubscribing {
		c.mu.Unlock()
		return
	}
	if err != nil {
		// This connection can never serve a request: wake WaitReady and the requests
		// waiting in register, which see readyErr, instead of leaving them to their deadlines.
		c.readyErr = err
		close(c.readyCh)
		c.readyCh = make(chan struct{})
		c.mu.Unlock()
		c.opts.Logger.Error("store: subscribe failed", "err", err)
		return
	}
	c.state = stateReady
	close(c.readyCh)
	keys := make([]string, 0, len(c.watches))
	for k := range c.watches {
		keys = append(keys, k)
	}
	c.mu.Unlock()
	c.opts.Logger.Info("store: connected", "url", c.opts.URL, "client", c.opts.ClientID)
	if len(suback.Reasons) > 1 && suback.Reasons[1] >= 0x80 {
		// Not fatal: the real service delivers notifications without it (wire fact 4).
		c.opts.Logger.Warn("store: broker refused the notification subscription", "reason", suback.Reasons[1])
	}
	for _, k := range keys {
		// A failure on a live connection is retried until it succeeds: behind a broker that
		// is not the store's, the store may be unreachable while the broker is up. A dropped
		// connection ends this resync; the next connection's resync starts over.
		for attempt := 1; ; attempt++ {
			err := c.rewatch(c.ctx, k)
			if err == nil {
				break
			}
			c.opts.Logger.Warn("store: resuming watch failed", "key", k, "attempt", attempt, "err", err)
			if errors.Is(err, ErrClosed) || !c.isGen(gen) {
				return
			}
			t := time.NewTimer(backoff(attempt))
			select {
			case <-t.C:
			case <-c.ctx.Done():
				t.Stop()
				return
			}
		}
	}
}

// subscribe subscribes the connection of generation gen to the response and notification
// topics. Only the broker's refusal of the response topic is final (returned as err); a
// SUBSCRIBE that got no SUBACK (timeout under load, a write error) is sent again while the
// connection lives, since that connection could otherwise never serve a request. It returns
// nil, nil when the connection went away or the client closed.
func (c *Client) subscribe(cm *autopaho.ConnectionManager, gen uint64, backoff func(int) time.Duration) (*paho.Suback, error) {
	sub := &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: c.respTopic, QoS: 1},
		// The real service delivers notifications without a subscription (wire fact 4);
		// subscribing makes deployments behind another broker work too.
		{Topic: c.notifyPrefix + "+", QoS: 1},
	}}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.Timeout)
		suback, err := cm.Subscribe(ctx, sub)
		cancel()
		if suback != nil {
			// paho reports any refused topic as an error; the notification topic's refusal
			// is not fatal (resync warns about it), the response topic's is.
			if len(suback.Reasons) == 0 || suback.Reasons[0] >= 0x80 {
				return suback, fmt.Errorf("store: broker refused the subscription to %s (reason %v)", c.respTopic, suback.Reasons)
			}
			return suback, nil
		}
		c.mu.Lock()
		live := c.gen == gen && c.state == stateSubscribing
		c.mu.Unlock()
		if !live || c.ctx.Err() != nil {
			return nil, nil
		}
		c.opts.Logger.Warn("store: subscribe failed, retrying", "attempt", attempt, "err", err)
		t := time.NewTimer(backoff(attempt))
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			return nil, nil
		}
	}
}

// isGen reports whether the connection of generation gen is still the one up.
func (c *Client) isGen(gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen == gen && c.state == stateReady
}

// jitterBackoff waits a random time between min and an exponentially growing ceiling that
// stops at max ("full jitter"), so clients cut off together do not return together.
func jitterBackoff(minDelay, maxDelay time.Duration) func(int) time.Duration {
	return func(attempt int) time.Duration {
		if attempt <= 0 {
			return 0
		}
		ceil := maxDelay
		if attempt < 30 {
			ceil = min(maxDelay, minDelay<<uint(attempt))
		}
		return minDelay + mrand.N(ceil-minDelay+1)
	}
}

func parseURL(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		s = "mqtt://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("store: bad broker URL %q: %w", s, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "tcp", "mqtts", "tls", "ssl":
	default:
		return nil, fmt.Errorf("store: bad broker URL %q: scheme must be mqtt:// or mqtts://", s)
	}
	if u.Port() == "" {
		port := "1883"
		if strings.ToLower(u.Scheme) != "mqtt" && strings.ToLower(u.Scheme) != "tcp" {
			port = "8883"
		}
		u.Host = net.JoinHostPort(u.Hostname(), port)
	}
	return u, nil
}

func closedChan() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
