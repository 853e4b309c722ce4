package agent

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/agent/publish"
)

// upstreamConn is the agent's connection to an external broker ([upstream]): it takes
// task messages with manual acknowledgement — the PUBACK leaves only after the journal
// append returned (docs/design.md "Intake boundary") — and publishes reports with QoS 1.
// The session persists (clean start only on the very first connection, session expiry
// from the config), so task messages not yet acknowledged when the connection or the
// agent died are delivered again.
type upstreamConn struct {
	cm    *autopaho.ConnectionManager
	topic string
	take  *intake.Taker
	log   *slog.Logger
	once  sync.Once
	first chan struct{} // closed once tasks are subscribed for the first time
	m     *agentMetrics
	event chan struct{} // poked on every (re)subscription and connection loss
	// sess is paho's session with pipelined publishing (pipeline.go); window is how many
	// messages each report stream keeps in flight (defaultPublishWindow).
	sess   *pipeSession
	window int
}

// upstreamTLS builds the TLS configuration of [upstream] (nil for a plain url).
func upstreamTLS(u *config.Upstream, host string) (*tls.Config, error) {
	p, err := url.Parse(u.URL)
	if err != nil {
		return nil, err
	}
	switch p.Scheme {
	case "mqtts", "ssl", "tls":
	default:
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	if u.TLSServerName != "" {
		tc.ServerName = u.TLSServerName
	}
	if u.TLSCA != "" {
		pem, err := os.ReadFile(u.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("upstream.tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("upstream.tls_ca: %s holds no PEM certificate", u.TLSCA)
		}
		tc.RootCAs = pool
	}
	if u.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(u.TLSCert, u.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("upstream.tls_cert: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// clientID is upstream.client_id or "faceagent-{gw}".
func clientID(cfg *config.Config) string {
	if cfg.Upstream.ClientID != "" {
		return cfg.Upstream.ClientID
	}
	return "faceagent-" + cfg.Agent.GatewayID
}

func dialUpstream(ctx context.Context, cfg *config.Config, take *intake.Taker, first, event chan struct{}, m *agentMetrics, log *slog.Logger) (*upstreamConn, error) {
	u := cfg.Upstream
	p, err := url.Parse(u.URL)
	if err != nil {
		return nil, fmt.Errorf("upstream.url: %w", err)
	}
	tc, err := upstreamTLS(u, p.Hostname())
	if err != nil {
		return nil, err
	}
	uc := &upstreamConn{topic: upstreamTopics(cfg.Agent.GatewayID).tasks, take: take, log: log, first: first, m: m, event: event,
		sess: newPipeSession(uint32(u.SessionExpiry.Seconds())), window: cmp.Or(u.PublishWindow, defaultPublishWindow)}
	ac := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{p},
		TlsCfg:                        tc,
		KeepAlive:                     uint16(u.KeepAlive.Seconds()),
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         uint32(u.SessionExpiry.Seconds()),
		ConnectTimeout:                u.ConnectTimeout.Duration,
		ReconnectBackoff:              reconnectBackoff(u.ReconnectMax.Duration),
		ConnectUsername:               u.Username,
		ConnectPassword:               []byte(u.Password),
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			// Must not block: subscribe from a goroutine (docs/design.md "Library facts").
			go uc.subscribe(ctx, cm)
		},
		OnConnectError: func(err error) { log.Warn("upstream connect failed", "err", err) },
		OnConnectionDown: func() bool {
			m.upstreamUp.Set(0)
			log.Warn("upstream connection lost; reconnecting")
			uc.poke()
			return true
		},
		ClientConfig: paho.ClientConfig{
			ClientID:                   clientID(cfg),
			Session:                    uc.sess,
			EnableManualAcknowledgment: true,
			SendAcksInterval:           10 * time.Millisecond,
			OnPublishReceived:          []func(paho.PublishReceived) (bool, error){uc.onPublish},
			OnClientError:              func(err error) { log.Warn("upstream connection error", "err", err) },
		},
	}
	cm, err := autopaho.NewConnection(ctx, ac)
	if err != nil {
		return nil, err
	}
	uc.cm = cm
	return uc, nil
}

// reconnectBackoff grows from 100ms to upstream.reconnect_max, randomised so a fleet of
// gateways does not reconnect in step after a broker restart.
func reconnectBackoff(maxDelay time.Duration) autopaho.Backoff {
	const minDelay = 100 * time.Millisecond
	maxDelay = max(maxDelay, 2*minDelay) // autopaho requires max > min
	return autopaho.NewExponentialBackoff(minDelay, maxDelay, 2*minDelay, 2)
}

func (uc *upstreamConn) subscribe(ctx context.Context, cm *autopaho.ConnectionManager) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := cm.Subscribe(sctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: uc.topic, QoS: 1}}}); err != nil {
		uc.log.Error("subscribing to tasks failed", "topic", uc.topic, "err", err)
		return
	}
	uc.log.Info("upstream connected", "tasks", uc.topic)
	uc.m.upstreamUp.Set(1)
	uc.m.upstreamConnects.Inc()
	uc.once.Do(func() { close(uc.first) })
	uc.poke()
}

func (uc *upstreamConn) poke() {
	poke(uc.event)
}

// onPublish runs on paho's handler goroutine, one message at a time, in arrival order,
// which is also the order the manual acks must follow.
func (uc *upstreamConn) onPublish(pr paho.PublishReceived) (bool, error) {
	pk := pr.Packet
	if pk.Topic != uc.topic {
		return true, pr.Client.Ack(pk)
	}
	if err := uc.take.Accept(context.Background(), pk.Payload); err != nil {
		// Not stored: no PUBACK. The broker redelivers it on the next connection; drop this
		// one so that happens (the journal or the outbox is gone or stopping).
		uc.log.Error("task message not stored; not acknowledged", "err", err)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = uc.cm.Disconnect(ctx)
		}()
		return true, nil
	}
	return true, pr.Client.Ack(pk)
}

// Publish implements publish.Publisher: QoS 1, returns after the PUBACK. While the connection is
// down it waits for it (or ctx), so a report goes out the moment the broker is back
// instead of after its sender's retry delay.
func (uc *upstreamConn) Publish(ctx context.Context, topic string, payload []byte) error {
	f, err := uc.publishAsync(ctx, topic, payload, nil)
	if err != nil {
		return err
	}
	return f.wait(ctx)
}

// PublishAsync implements publish.Pipelined: the message is written after those
// published before on this connection; its PUBACK is waited for with the handle. While
// the connection is down it waits for it (or ctx).
func (uc *upstreamConn) PublishAsync(ctx context.Context, topic string, payload []byte, after publish.Pending) (publish.Pending, error) {
	f, err := uc.publishAsync(ctx, topic, payload, after)
	if err != nil {
		return nil, err // not a typed nil: InOrder tests for nil
	}
	return f, nil
}

func (uc *upstreamConn) publishAsync(ctx context.Context, topic string, payload []byte, after publish.Pending) (*inFlight, error) {
	if err := uc.cm.AwaitConnection(ctx); err != nil {
		return nil, err
	}
	return uc.sess.publish(ctx, topic, payload, after)
}

// Window implements publish.Pipelined.
func (uc *upstreamConn) Window() int { return uc.window }

func (uc *upstreamConn) close(ctx context.Context) error {
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
