package upstream

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/publish"
)

// Tasks takes the payload of a task message. Accept returns nil once the task is stored
// (or dead-lettered) for good: only then is the message acknowledged.
type Tasks interface {
	Accept(ctx context.Context, payload []byte) error
}

// TLSOptions are the files of a TLS connection (a mqtts://, ssl:// or tls:// URL); they are
// ignored for a plain URL.
type TLSOptions struct {
	// CAFile is a PEM bundle of the CAs that verify the server; "": the system's roots.
	CAFile string
	// CertFile and KeyFile are a client certificate and its key, for mutual TLS.
	CertFile, KeyFile string
	// ServerName is the name verified in the server's certificate; "": the URL's host.
	ServerName string
}

// Options configure a Conn. URL, ClientID, TasksTopic and Tasks are required.
type Options struct {
	// URL is mqtt://host:port or mqtts://host:port (tcp://, ssl:// and tls:// too).
	URL      string
	ClientID string
	TLS      TLSOptions
	Username string
	Password []byte

	// KeepAlive is the MQTT keep-alive (whole seconds, at most 65535s); 0: none.
	KeepAlive time.Duration
	// ConnectTimeout bounds each connection attempt; 0: autopaho's default.
	ConnectTimeout time.Duration
	// SessionExpiry is how long the broker keeps the session while the agent is away; 0
	// ends it with each connection (and with it what was in flight).
	SessionExpiry time.Duration
	// ReconnectMax caps the reconnect backoff, which grows from 100ms.
	ReconnectMax time.Duration
	// PublishWindow is how many messages a stream keeps in flight (Window); 0: 64.
	PublishWindow int

	// TasksTopic is subscribed (QoS 1) on every connection; its messages go to Tasks.
	TasksTopic string
	Tasks      Tasks

	// Connected, if set, is closed once the tasks are subscribed for the first time.
	Connected chan<- struct{}
	// Events, if set, is signalled without blocking (give it capacity 1) on every
	// subscription of the tasks and every loss of the connection.
	Events chan<- struct{}

	// Metrics receives the connection's series; nil: series nobody reads.
	Metrics *Metrics
	// Logger receives the connection's logs; nil: discard.
	Logger *slog.Logger
}

// Conn is the agent's connection to an external broker: it takes task messages — the
// PUBACK leaves only after Tasks.Accept returned nil (docs/design.md "Intake boundary") —
// and
// publishes reports with QoS 1, several in flight (publish.Pipelined). The session
// persists (clean start only on the very first connection, expiry from SessionExpiry), so
// task messages not yet acknowledged when the connection or the agent died are delivered
// again.
type Conn struct {
	cm     *autopaho.ConnectionManager
	topic  string
	tasks  Tasks
	log    *slog.Logger
	m      *Metrics
	once   sync.Once
	first  chan<- struct{} // closed once tasks are subscribed for the first time
	events chan<- struct{} // signalled on every (re)subscription and connection loss
	// sess is paho's session with pipelined publishing (pipeline.go); window is how many
	// messages each report stream keeps in flight.
	sess   *pipeSession
	window int
}

var _ publish.Pipelined = (*Conn)(nil)

// tlsConfig builds the TLS configuration of a connection to u (nil for a plain URL).
func tlsConfig(u *url.URL, o TLSOptions) (*tls.Config, error) {
	switch u.Scheme {
	case "mqtts", "ssl", "tls":
	default:
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
	if o.ServerName != "" {
		tc.ServerName = o.ServerName
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("upstream.tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("upstream.tls_ca: %s holds no PEM certificate", o.CAFile)
		}
		tc.RootCAs = pool
	}
	if o.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("upstream.tls_cert: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Dial starts connecting to the broker at opts.URL and returns at once: autopaho connects
// in the background and reconnects after every loss until Close (or ctx ends). Publish
// waits for the connection; opts.Connected tells when the tasks are first subscribed.
func Dial(ctx context.Context, opts *Options) (*Conn, error) {
	switch {
	case opts.ClientID == "":
		return nil, errors.New("upstream: Options.ClientID is required")
	case opts.TasksTopic == "" || opts.Tasks == nil:
		return nil, errors.New("upstream: Options.TasksTopic and Options.Tasks are required")
	}
	p, err := url.Parse(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("upstream.url: %w", err)
	}
	tc, err := tlsConfig(p, opts.TLS)
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m := opts.Metrics
	if m == nil {
		m = NewMetrics(metrics.NewRegistry())
	}
	expiry := uint32(opts.SessionExpiry.Seconds())
	uc := &Conn{topic: opts.TasksTopic, tasks: opts.Tasks, log: log, first: opts.Connected, m: m, events: opts.Events,
		sess: newPipeSession(expiry), window: cmp.Or(opts.PublishWindow, defaultPublishWindow)}
	ac := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{p},
		TlsCfg:                        tc,
		KeepAlive:                     uint16(opts.KeepAlive.Seconds()),
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         expiry,
		ConnectTimeout:                opts.ConnectTimeout,
		ReconnectBackoff:              reconnectBackoff(opts.ReconnectMax),
		ConnectUsername:               opts.Username,
		ConnectPassword:               opts.Password,
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			// Must not block: subscribe from a goroutine (docs/design.md "Library facts").
			go uc.subscribe(ctx, cm)
		},
		OnConnectError: func(err error) { log.Warn("upstream connect failed", "err", err) },
		PahoDebug:      pahoLogger{log: log, level: slog.LevelDebug},
		PahoErrors:     pahoLogger{log: log, level: slog.LevelWarn},
		OnConnectionDown: func() bool {
			m.Up.Set(0)
			log.Warn("upstream connection lost; reconnecting")
			uc.signal()
			return true
		},
		ClientConfig: paho.ClientConfig{
			ClientID: opts.ClientID,
			Session:  uc.sess,
			// paho acknowledges a message once onPublish returned for it (the session's Ack,
			// which leaves out a refused task and what follows it). Not paho's manual
			// acknowledgement: its Connect clears the client's list of messages to
			// acknowledge after its reader started, so a message the broker resends at once
			// and Accept takes before that clearing never gets its PUBACK, and the broker
			// holds the task in flight until the connection ends.
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){uc.onPublish},
			OnClientError:     func(err error) { log.Warn("upstream connection error", "err", err) },
		},
	}
	cm, err := autopaho.NewConnection(ctx, ac)
	if err != nil {
		return nil, err
	}
	uc.cm = cm
	return uc, nil
}

// reconnectBackoff grows from 100ms to maxDelay, randomised so a fleet of gateways does not
// reconnect in step after a broker restart.
func reconnectBackoff(maxDelay time.Duration) autopaho.Backoff {
	const minDelay = 100 * time.Millisecond
	maxDelay = max(maxDelay, 2*minDelay) // autopaho requires max > min
	return autopaho.NewExponentialBackoff(minDelay, maxDelay, 2*minDelay, 2)
}

func (uc *Conn) subscribe(ctx context.Context, cm *autopaho.ConnectionManager) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := cm.Subscribe(sctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: uc.topic, QoS: 1}}}); err != nil {
		uc.log.Error("subscribing to tasks failed", "topic", uc.topic, "err", err)
		return
	}
	uc.log.Info("upstream connected", "tasks", uc.topic)
	uc.m.Up.Set(1)
	uc.m.Connects.Inc()
	if uc.first != nil {
		uc.once.Do(func() { close(uc.first) })
	}
	uc.signal()
}

// pahoLogger passes paho's log lines to the connection's logger at one level, formatted
// only when the logger takes that level (paho logs a line for every packet).
type pahoLogger struct {
	log   *slog.Logger
	level slog.Level
}

func (l pahoLogger) Println(v ...any) {
	if l.log.Enabled(context.Background(), l.level) {
		l.log.Log(context.Background(), l.level, "paho: "+strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
	}
}

func (l pahoLogger) Printf(format string, v ...any) {
	if l.log.Enabled(context.Background(), l.level) {
		l.log.Log(context.Background(), l.level, "paho: "+strings.TrimSuffix(fmt.Sprintf(format, v...), "\n"))
	}
}

// signal pokes Events without blocking.
func (uc *Conn) signal() {
	if uc.events == nil {
		return
	}
	select {
	case uc.events <- struct{}{}:
	default:
	}
}

// onPublish runs on paho's handler goroutine, one message at a time, in arrival order;
// paho acknowledges each message after onPublish returned for it (pipeSession.Ack), so the
// PUBACKs follow the same order, and a task's leaves only after Accept took it.
func (uc *Conn) onPublish(pr paho.PublishReceived) (bool, error) {
	pk := pr.Packet
	if pk.Topic != uc.topic {
		return true, nil
	}
	if uc.sess.refusing() {
		// A task before this one on this connection was refused: this one is not taken
		// either (its PUBACK could only go out before that one's), and the broker delivers
		// both again on the next connection.
		return true, nil
	}
	if err := uc.tasks.Accept(context.Background(), pk.Payload); err != nil {
		// Not stored: no PUBACK. The broker redelivers it on the next connection; drop this
		// one so that happens (the journal or the outbox is gone or stopping, or the
		// deadletter backlog is full). Only the connection: the manager reconnects.
		uc.log.Error("task message not stored; not acknowledged", "err", err)
		uc.sess.refuse()
		return true, nil
	}
	return true, nil
}

// Publish implements publish.Publisher: QoS 1, returns after the PUBACK. While the
// connection is down it waits for it (or ctx), so a report goes out the moment the broker
// is back instead of after its sender's retry delay.
func (uc *Conn) Publish(ctx context.Context, topic string, payload []byte) error {
	f, err := uc.publishAsync(ctx, topic, payload, nil)
	if err != nil {
		return err
	}
	return f.wait(ctx)
}

// PublishAsync implements publish.Pipelined: the message is written after those published
// before on this connection; its PUBACK is waited for with the handle. While the
// connection is down it waits for it (or ctx).
func (uc *Conn) PublishAsync(ctx context.Context, topic string, payload []byte, after publish.Pending) (publish.Pending, error) {
	f, err := uc.publishAsync(ctx, topic, payload, after)
	if err != nil {
		return nil, err // not a typed nil: InOrder tests for nil
	}
	return f, nil
}

func (uc *Conn) publishAsync(ctx context.Context, topic string, payload []byte, after publish.Pending) (*inFlight, error) {
	if err := uc.cm.AwaitConnection(ctx); err != nil {
		return nil, err
	}
	return uc.sess.publish(ctx, topic, payload, after)
}

// Window implements publish.Pipelined.
func (uc *Conn) Window() int { return uc.window }

// Close disconnects (a DISCONNECT, so the broker keeps the session for SessionExpiry) and
// waits for the connection manager to end, or for ctx.
func (uc *Conn) Close(ctx context.Context) error {
	err := uc.cm.Disconnect(ctx)
	select {
	case <-uc.cm.Done():
	case <-ctx.Done():
	}
	if errors.Is(err, autopaho.ConnectionDownError) {
		return nil
	}
	return err
}
