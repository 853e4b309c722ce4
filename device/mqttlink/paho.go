package mqttlink

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/device"
)

var pid = os.Getpid()

// pahoTransport is one autopaho connection to an external broker.
type pahoTransport struct {
	l  *Link
	cm *autopaho.ConnectionManager
}

func newPaho(l *Link) (transport, error) {
	u, err := url.Parse(l.cfg.URL)
	if err != nil {
		return nil, &Error{Code: device.ErrConfig, Err: err}
	}
	t := &pahoTransport{l: l}
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     uint16(l.cfg.KeepAlive / time.Second),
		CleanStartOnInitialConnection: l.cfg.SessionExpiry == 0,
		SessionExpiryInterval:         uint32(l.cfg.SessionExpiry / time.Second),
		ReconnectBackoff:              autopaho.NewExponentialBackoff(100*time.Millisecond, l.cfg.ReconnectMax, min(500*time.Millisecond, l.cfg.ReconnectMax), 2),
		ConnectTimeout:                5 * time.Second,
		ConnectUsername:               l.cfg.Username,
		ConnectPassword:               []byte(l.cfg.Password),
		// docs/design.md "Library facts": OnConnectionUp must not block, so subscribing happens in
		// a goroutine; handlers live in ClientConfig.OnPublishReceived (AddOnPublishReceived
		// is lost on reconnect).
		OnConnectionUp:   t.connectionUp,
		OnConnectionDown: func() bool { l.setConn(false, errors.New("connection lost")); return true },
		OnConnectError: func(err error) {
			l.cfg.Logger.Debug("mqtt connect failed", "url", l.cfg.URL, "err", err)
			l.setConn(false, err)
		},
		ClientConfig: paho.ClientConfig{
			ClientID: l.cfg.ClientID,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){
				func(pr paho.PublishReceived) (bool, error) {
					// Handlers run one at a time: a full Events channel holds back the
					// connection (backpressure) instead of dropping an ack.
					l.deliver(pr.Packet.Topic, pr.Packet.Payload)
					return true, nil
				},
			},
			OnClientError: func(err error) { l.cfg.Logger.Warn("mqtt client error", "err", err) },
		},
	}
	if l.cfg.Username == "" {
		cfg.ConnectUsername, cfg.ConnectPassword = "", nil
	}
	// The context bounds autopaho's life: cancelled by close.
	cm, err := autopaho.NewConnection(context.Background(), cfg)
	if err != nil {
		return nil, &Error{Code: device.ErrConfig, Err: err}
	}
	t.cm = cm
	return t, nil
}

func (t *pahoTransport) connectionUp(cm *autopaho.ConnectionManager, _ *paho.Connack) {
	l := t.l
	if !l.enter() {
		return
	}
	go func() {
		defer l.work.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		go func() { // give up at once when the link closes
			select {
			case <-l.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		sub := &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
			{Topic: l.ackT.filter(), QoS: 1},
			{Topic: l.hbT.filter(), QoS: 1},
		}}
		ack, err := cm.Subscribe(ctx, sub)
		if err == nil {
			for i, rc := range ack.Reasons {
				if rc >= 0x80 {
					err = fmt.Errorf("subscription %q refused with reason 0x%02x", sub.Subscriptions[i].Topic, rc)
				}
			}
		}
		if err != nil {
			// Connected but deaf: say so; the next reconnect subscribes again.
			l.cfg.Logger.Error("mqtt subscribe failed", "err", err)
			l.emit(device.Event{Kind: device.Error, Err: &Error{Code: device.ErrTransport, Err: err}})
			return
		}
		l.setConn(true, nil)
	}()
}

func (t *pahoTransport) publish(ctx context.Context, topic string, payload []byte) error {
	if !t.l.isUp() {
		return &Error{Code: device.ErrNotConnected}
	}
	_, err := t.cm.Publish(ctx, &paho.Publish{Topic: topic, QoS: t.l.cfg.QoS, Payload: payload})
	if errors.Is(err, autopaho.ConnectionDownError) {
		return &Error{Code: device.ErrNotConnected, Err: err}
	}
	if err != nil {
		return &Error{Code: device.ErrTransport, Err: err}
	}
	return nil
}

func (t *pahoTransport) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = t.cm.Disconnect(ctx) // also ends autopaho's goroutines
	<-t.cm.Done()
}
