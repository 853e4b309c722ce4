package store

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker"
)

// holdFirstSubscribe holds the read loop of the first client that subscribes until release
// is closed: the client's SUBSCRIBE gets no SUBACK within its timeout.
type holdFirstSubscribe struct {
	mqtt.HookBase
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (h *holdFirstSubscribe) ID() string { return "hold-first-subscribe" }

func (h *holdFirstSubscribe) Provides(b byte) bool { return b == mqtt.OnPacketRead }

func (h *holdFirstSubscribe) OnPacketRead(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Type == packets.Subscribe {
		h.once.Do(func() {
			close(h.entered)
			<-h.release
		})
	}
	return pk, nil
}

// logMessages hands the message of every log record to ch (dropping them when ch is full).
type logMessages struct{ ch chan string }

func (h logMessages) Enabled(context.Context, slog.Level) bool { return true }
func (h logMessages) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h logMessages) WithGroup(string) slog.Handler            { return h }
func (h logMessages) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Message:
	default:
	}
	return nil
}

// TestSubscribeWithoutSubackIsRetried: a SUBSCRIBE whose SUBACK does not come within the
// timeout (a loaded broker) is sent again on the same connection. Taken for the broker's
// refusal, it would make WaitReady fail with ErrNotConnected, and the connection, which
// stays up, could never serve a request.
func TestSubscribeWithoutSubackIsRetried(t *testing.T) {
	hook := &holdFirstSubscribe{entered: make(chan struct{}), release: make(chan struct{})}
	released := sync.OnceFunc(func() { close(hook.release) })
	_, url := startEmbedded(t, "", "", func(b *broker.Broker) {
		if err := b.AddHook(hook, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(released) // registered after the broker's Close, so it runs before it
	logs := logMessages{ch: make(chan string, 64)}
	c, err := New(&Options{URL: url, Timeout: 300 * time.Millisecond, ReconnectMin: 20 * time.Millisecond,
		ReconnectMax: 200 * time.Millisecond, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	select {
	case <-hook.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not subscribe")
	}
	for msg := ""; msg != "store: subscribe failed, retrying"; {
		select {
		case msg = <-logs.ch:
		case <-time.After(10 * time.Second):
			t.Fatal("the client did not retry the SUBSCRIBE that got no SUBACK")
		}
	}
	released()
	if err := c.WaitReady(ctxT(t)); err != nil {
		t.Fatalf("WaitReady after a late SUBACK: %v", err)
	}
}
