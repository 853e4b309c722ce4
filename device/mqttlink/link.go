package mqttlink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// Config chooses the broker and the topics. Exactly one of Bus and URL is set. The zero
// value of every other field means its default.
type Config struct {
	// Bus is an in-process broker (agent/broker's Broker); the link publishes and subscribes
	// through it (no network, no extra connection).
	Bus Bus
	// URL is an external broker, e.g. mqtt://127.0.0.1:1883 or tls://host:8883, reached with
	// one autopaho connection (reconnected automatically).
	URL string

	ClientID string // URL only; default "faceagent-devices-<pid>-<n>"
	Username string // URL only
	Password string // URL only
	// SessionExpiry keeps the broker session (and QoS 1 acks queued for us) across a
	// reconnect when > 0. URL only; default 0: the session ends with the connection.
	SessionExpiry time.Duration
	KeepAlive     time.Duration // URL only; default 30s
	// ReconnectMax bounds autopaho's reconnect backoff. URL only; default 5s.
	ReconnectMax time.Duration

	// Topic templates; "{id}" is one whole topic level. Defaults DefaultCommandTopic,
	// DefaultAckTopic, DefaultHeartbeatTopic.
	CommandTopic, AckTopic, HeartbeatTopic string
	// QoS of commands: 1 (the default) or 2. QoS 0 is not offered: QoS 0 loses commands
	// inside the broker (the field report's did: docs/design.md "The field report"), and
	// each such loss costs a retry interval.
	QoS byte
	// Devices, when not empty, restricts the link to these terminals: Send refuses others
	// with device.ErrUnknownDevice, and their messages become Error events.
	Devices []string
	// SubscriptionID names the inline subscriptions (Bus only); default: unique per link.
	SubscriptionID int
	EventBuffer    int // capacity of Events(); default 256
	// Deliver, when set, is offered every Ack and Heartbeat event on the goroutine that
	// received the message (the broker's delivery to the inline client, or paho's), before
	// Events: when it returns true the event is taken and not put on Events. It lets a
	// consumer act on an ack with no hand-off to another goroutine. It must not block for
	// long: it holds back that connection's delivery (Bus: the terminal's own
	// connection). It may return false while it is not ready yet; Up, Down and Error events
	// always go to Events.
	Deliver func(device.Event) bool
	Logger  *slog.Logger // default: discard
}

var linkSeq atomic.Int64

func (c *Config) fill() error {
	if (c.Bus == nil) == (c.URL == "") {
		return errors.New("set exactly one of Bus and URL")
	}
	if c.CommandTopic == "" {
		c.CommandTopic = DefaultCommandTopic
	}
	if c.AckTopic == "" {
		c.AckTopic = DefaultAckTopic
	}
	if c.HeartbeatTopic == "" {
		c.HeartbeatTopic = DefaultHeartbeatTopic
	}
	if c.AckTopic == c.HeartbeatTopic || c.AckTopic == c.CommandTopic || c.HeartbeatTopic == c.CommandTopic {
		return errors.New("command, ack and heartbeat topics must differ")
	}
	switch c.QoS {
	case 0:
		c.QoS = 1
	case 1, 2:
	default:
		return fmt.Errorf("qos %d: want 1 or 2", c.QoS)
	}
	for _, id := range c.Devices {
		if !validDeviceID(id) {
			return fmt.Errorf("device id %q cannot stand in a topic level", id)
		}
	}
	n := linkSeq.Add(1)
	if c.SubscriptionID == 0 {
		c.SubscriptionID = 0x7A00 + int(n)
	}
	if c.ClientID == "" {
		c.ClientID = fmt.Sprintf("faceagent-devices-%d-%d", pid, n)
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = 30 * time.Second
	}
	if c.ReconnectMax <= 0 {
		c.ReconnectMax = 5 * time.Second
	}
	c.ReconnectMax = max(c.ReconnectMax, 200*time.Millisecond) // autopaho's backoff needs max > min (100ms)
	if c.EventBuffer <= 0 {
		c.EventBuffer = 256
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// transport is the part that differs between the inline mochi client and autopaho.
type transport interface {
	publish(ctx context.Context, topic string, payload []byte) error
	close()
}

// Link is a device.Link for any number of terminals on one MQTT broker connection: one
// wildcard subscription per message kind, messages routed to terminals by topic.
type Link struct {
	cfg             Config
	cmdT, ackT, hbT template
	devices         map[string]bool // nil: every terminal
	events          chan device.Event
	done            chan struct{}
	tr              transport
	closeOnce       sync.Once
	mu              sync.Mutex // guards closed, and Add on work
	closed          bool
	work            sync.WaitGroup // message handlers and our goroutines
	state           connState
	stateChanged    chan struct{}
}

// connState is the latest connection state, coalesced: callbacks that must not block record
// it and poke the status goroutine, which emits Up/Down only on a change.
type connState struct {
	sync.Mutex
	up      bool
	err     error
	emitted int8 // 0 nothing yet, 1 up, -1 down
}

var _ device.Link = (*Link)(nil)

// New validates cfg, connects (Bus: subscribes at once; URL: starts autopaho, which
// connects in the background) and returns. An Up event follows once the subscriptions are
// in place.
func New(cfg Config) (*Link, error) {
	if err := cfg.fill(); err != nil {
		return nil, &Error{Code: device.ErrConfig, Err: err}
	}
	l := &Link{cfg: cfg, events: make(chan device.Event, cfg.EventBuffer), done: make(chan struct{}),
		stateChanged: make(chan struct{}, 1)}
	var err error
	for _, t := range []struct {
		dst        *template
		name, text string
	}{{&l.cmdT, "command", cfg.CommandTopic}, {&l.ackT, "ack", cfg.AckTopic}, {&l.hbT, "heartbeat", cfg.HeartbeatTopic}} {
		if *t.dst, err = parseTemplate(t.name, t.text); err != nil {
			return nil, &Error{Code: device.ErrConfig, Err: err}
		}
	}
	if len(cfg.Devices) > 0 {
		l.devices = make(map[string]bool, len(cfg.Devices))
		for _, id := range cfg.Devices {
			l.devices[id] = true
		}
	}
	l.work.Add(1)
	go l.statusLoop()
	if cfg.Bus != nil {
		l.tr, err = newInline(l)
	} else {
		l.tr, err = newPaho(l)
	}
	if err != nil {
		l.shutdown()
		return nil, err
	}
	return l, nil
}

// Events implements device.Link.
func (l *Link) Events() <-chan device.Event { return l.events }

// SendsWithoutBlocking reports whether Send returns without waiting for I/O: true with
// Config.Bus, whose inline publish only queues the command for the subscribers; false
// with Config.URL, where Send waits for the broker's PUBACK.
func (l *Link) SendsWithoutBlocking() bool { return l.cfg.Bus != nil }

// Send implements device.Link: it publishes cmd as JSON on the terminal's command topic
// with the configured QoS and, for QoS 1, returns after the broker's PUBACK.
func (l *Link) Send(ctx context.Context, deviceID string, cmd face.Command) error {
	select {
	case <-l.done:
		return &Error{Code: device.ErrClosed, DeviceID: deviceID}
	default:
	}
	if !validDeviceID(deviceID) || (l.devices != nil && !l.devices[deviceID]) {
		return &Error{Code: device.ErrUnknownDevice, DeviceID: deviceID}
	}
	payload, err := cmd.AppendJSON(make([]byte, 0, 256))
	if err != nil {
		return &Error{Code: device.ErrInvalid, DeviceID: deviceID, Err: err}
	}
	topic := l.cmdT.topic(deviceID)
	if err := l.tr.publish(ctx, topic, payload); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.DeviceID, e.Topic = deviceID, topic
			return e
		}
		return &Error{Code: device.ErrTransport, DeviceID: deviceID, Topic: topic, Err: err}
	}
	return nil
}

// Close implements device.Link: it unsubscribes or disconnects, waits for handlers in flight
// and closes Events.
func (l *Link) Close() error {
	l.closeOnce.Do(l.shutdown)
	return nil
}

func (l *Link) shutdown() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	close(l.done)
	if l.tr != nil {
		l.tr.close()
	}
	l.work.Wait()
	close(l.events)
}

// enter registers one unit of work (a message handler, a goroutine); false once closing.
func (l *Link) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.work.Add(1)
	return true
}

func (l *Link) emit(ev device.Event) {
	ev.At = time.Now()
	select {
	case l.events <- ev:
	case <-l.done:
	}
}

// emitMessage offers an Ack or Heartbeat event to Config.Deliver, then to Events.
func (l *Link) emitMessage(ev device.Event) {
	if l.cfg.Deliver != nil {
		ev.At = time.Now()
		if l.cfg.Deliver(ev) {
			return
		}
	}
	l.emit(ev)
}

// setConn records the connection state; it never blocks.
func (l *Link) setConn(up bool, err error) {
	l.state.Lock()
	l.state.up, l.state.err = up, err
	l.state.Unlock()
	select {
	case l.stateChanged <- struct{}{}:
	default:
	}
}

func (l *Link) isUp() bool {
	l.state.Lock()
	defer l.state.Unlock()
	return l.state.up
}

func (l *Link) statusLoop() {
	defer l.work.Done()
	for {
		select {
		case <-l.done:
			return
		case <-l.stateChanged:
		}
		l.state.Lock()
		up, err, last := l.state.up, l.state.err, l.state.emitted
		switch {
		case up && last != 1:
			l.state.emitted = 1
		case !up && last != -1:
			l.state.emitted = -1
		default:
			l.state.Unlock()
			continue
		}
		l.state.Unlock()
		if up {
			l.emit(device.Event{Kind: device.Up})
		} else {
			l.emit(device.Event{Kind: device.Down, Err: &Error{Code: device.ErrNotConnected, Err: err}})
		}
	}
}

// deliver routes one received message by its topic and emits the Ack, Heartbeat or Error.
func (l *Link) deliver(topic string, payload []byte) {
	if !l.enter() {
		return
	}
	defer l.work.Done()
	if id, ok := l.ackT.match(topic); ok {
		if !l.known(id, topic) {
			return
		}
		a, err := face.ParseAckJSON(payload)
		if err != nil {
			l.emit(device.Event{Kind: device.Error, DeviceID: id, Err: &Error{Code: device.ErrInvalid, DeviceID: id, Topic: topic, Err: err}})
			return
		}
		l.emitMessage(device.Event{Kind: device.Ack, DeviceID: id, Ack: a})
		return
	}
	if id, ok := l.hbT.match(topic); ok {
		if !l.known(id, topic) {
			return
		}
		h, err := face.ParseHeartbeatJSON(payload)
		if err == nil && h.DeviceID != "" && h.DeviceID != id {
			err = fmt.Errorf("heartbeat names device %.64q on the topic of %q", h.DeviceID, id)
		}
		if err != nil {
			l.emit(device.Event{Kind: device.Error, DeviceID: id, Err: &Error{Code: device.ErrInvalid, DeviceID: id, Topic: topic, Err: err}})
			return
		}
		h.DeviceID = id
		l.emitMessage(device.Event{Kind: device.Heartbeat, DeviceID: id, Heartbeat: h})
		return
	}
	l.emit(device.Event{Kind: device.Error, Err: &Error{Code: device.ErrInvalid, Topic: topic, Err: errors.New("message on a topic no template matches")}})
}

// known reports whether id is one of ours, emitting an Error event when it is not.
func (l *Link) known(id, topic string) bool {
	if !validDeviceID(id) {
		l.emit(device.Event{Kind: device.Error, Err: &Error{Code: device.ErrInvalid, Topic: topic,
			Err: fmt.Errorf("device id of %d bytes (at most %d)", len(id), face.MaxIDLen)}})
		return false
	}
	if l.devices == nil || l.devices[id] {
		return true
	}
	l.emit(device.Event{Kind: device.Error, DeviceID: id, Err: &Error{Code: device.ErrUnknownDevice, DeviceID: id, Topic: topic}})
	return false
}
