package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// mqttTerm is one terminal's own MQTT connection, as a real terminal has.
type mqttTerm struct {
	t                           *Terminal
	g                           *group
	server                      *url.URL
	cmdTopic, ackTopic, hbTopic string
	ready                       chan struct{} // closed after the first subscription
	readyOnce                   sync.Once
	// subscribed is true once the current connection's SUBSCRIBE was acknowledged. A
	// terminal announces itself only then: a heartbeat sent between CONNACK and SUBACK
	// after a reconnect would have the agent send a command that the broker drops for
	// want of a subscription (and resend it a retry interval later).
	subscribed atomic.Bool

	// ctx ends when the fleet closes (a child of the group's): publishes derive their
	// timeouts from it, not from the group's own context, whose lock every terminal's
	// publishes would share.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	cm     *autopaho.ConnectionManager // nil while offline
	closed bool                        // close ran: connect must not start a connection
}

func newMQTTTerm(t *Terminal, g *group, server *url.URL) *mqttTerm {
	sub := func(tmpl string) string { return strings.ReplaceAll(tmpl, "{id}", t.id) }
	ctx, cancel := context.WithCancel(g.ctx)
	return &mqttTerm{t: t, g: g, server: server, ready: make(chan struct{}), ctx: ctx, cancel: cancel,
		cmdTopic: sub(t.opts.CommandTopic), ackTopic: sub(t.opts.AckTopic), hbTopic: sub(t.opts.HeartbeatTopic)}
}

func (m *mqttTerm) connect() error {
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{m.server},
		KeepAlive:                     20,
		CleanStartOnInitialConnection: true, // a terminal coming back has forgotten everything
		ReconnectBackoff:              autopaho.NewConstantBackoff(200 * time.Millisecond),
		ConnectTimeout:                5 * time.Second,
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			m.subscribed.Store(false)
			m.g.run(func() { // OnConnectionUp must not block
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: m.cmdTopic, QoS: 1}}}); err != nil {
					m.t.opts.Logger.Warn("terminal subscribe failed", "device", m.t.id, "err", err)
					return
				}
				m.subscribed.Store(true)
				m.readyOnce.Do(func() { close(m.ready) })
				m.t.heartbeat()
			})
		},
		OnConnectionDown: func() bool {
			m.subscribed.Store(false)
			return true // reconnect
		},
		ClientConfig: paho.ClientConfig{
			ClientID:          "facesim-" + m.t.id,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){m.onPublish},
		},
	}
	switch strings.ToLower(m.server.Scheme) {
	case "mqtt", "tcp", "":
		cfg.AttemptConnection = dialPacketConn // buffered reads; other schemes: autopaho's own
	}
	// Under m.mu, so that a reconnect racing with close (a terminal's "back online" timer
	// firing as the fleet closes) either starts before close, which then stops it, or not
	// at all. A connection started after close would outlive the fleet, and its reconnects
	// would hold a broker's Close forever. NewConnection only starts goroutines.
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	cm, err := autopaho.NewConnection(context.Background(), cfg)
	if err != nil {
		return err
	}
	m.cm = cm
	return nil
}

func (m *mqttTerm) onPublish(pr paho.PublishReceived) (bool, error) {
	if !m.g.enter() {
		return true, nil
	}
	defer m.g.exit()
	cmd, err := face.ParseCommandJSON(pr.Packet.Payload)
	if err != nil {
		// A real terminal ignores what it cannot read; the agent's retry notices.
		m.t.opts.Logger.Warn("terminal got a bad command", "device", m.t.id, "err", err)
		return true, nil
	}
	m.t.receive(cmd)
	return true, nil
}

func (m *mqttTerm) publish(topic string, qos byte, payload []byte) error {
	m.mu.Lock()
	cm := m.cm
	m.mu.Unlock()
	if cm == nil {
		return errors.New("offline")
	}
	// Bounded, and cut short when the fleet closes (m.ctx ends then).
	ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
	defer cancel()
	_, err := cm.Publish(ctx, &paho.Publish{Topic: topic, QoS: qos, Payload: payload})
	return err
}

func (m *mqttTerm) sendAck(a *face.Ack) error {
	b, err := a.AppendJSON(nil)
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
		if err := m.connect(); err != nil {
			m.t.opts.Logger.Error("terminal reconnect failed", "device", m.t.id, "err", err)
		}
		return
	}
	m.mu.Lock()
	cm := m.cm
	m.cm = nil
	m.mu.Unlock()
	if cm != nil {
		stop(cm, m.g)
	}
}

// stop cancels an autopaho connection without waiting (this may run inside its own
// callback), and lets the group wait for it to finish.
func stop(cm *autopaho.ConnectionManager, g *group) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = cm.Disconnect(ctx) // cancels at once; returns ctx.Err() without waiting
	if !g.run(func() { <-cm.Done() }) {
		<-cm.Done()
	}
}

func (m *mqttTerm) close() {
	defer m.cancel()
	m.mu.Lock()
	cm := m.cm
	m.cm = nil
	m.closed = true
	m.mu.Unlock()
	if cm != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = cm.Disconnect(ctx)
	}
}

// StartMQTT starts one simulated terminal per id, each with its own connection to the
// broker at brokerURL (mqtt://host:port). Use WaitReady before sending commands.
func StartMQTT(brokerURL string, ids []string, opts Options) (*Fleet, error) {
	u, err := url.Parse(brokerURL)
	if err != nil {
		return nil, fmt.Errorf("sim: broker url: %w", err)
	}
	f, err := newFleet(ids, opts)
	if err != nil {
		return nil, err
	}
	for _, t := range f.terms {
		m := newMQTTTerm(t, f.g, u)
		t.tr = m
		f.ready = append(f.ready, m.ready)
		if err := m.connect(); err != nil {
			f.Close()
			return nil, fmt.Errorf("sim: %s: %w", t.id, err)
		}
	}
	f.start()
	return f, nil
}
