package agent

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/devstate"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/mqttlink"
	"github.com/seed0e69bba5/faceagent/device/serial"
)

// OutboxDir is the outbox's journal directory inside agent.data_dir.
const OutboxDir = "outbox"

// links holds the device links and routes each device's commands to its link. It is the
// outbox's Sender.
type links struct {
	byDevice    map[string]device.Link
	all         []device.Link
	devices     map[device.Link][]string // the devices each link carries (for Up/Down of a shared connection)
	nonBlocking map[string]bool          // devices whose link's Send only queues (the embedded broker)
	// direct handles acks on the goroutine that received them (mqttlink's
	// Config.Deliver), once the pumps have started; nil before.
	direct atomic.Pointer[func(device.Event)]
	// journal is the outbox's journal, set when the outbox opens it (openOutbox): Send
	// writes out what it has queued before a command leaves.
	journal atomic.Pointer[journal.Journal]
}

var _ outbox.NonBlockingSender = (*links)(nil)

// SendsWithoutBlocking implements outbox.NonBlockingSender: the outbox sends to these
// devices on the goroutine that decided the send (the one that delivered the previous
// ack), with no goroutine per send.
func (l *links) SendsWithoutBlocking(deviceID string) bool { return l.nonBlocking[deviceID] }

// deliver is mqttlink's Config.Deliver: an ack goes straight to the outbox (and the next
// command out) on the terminal's own delivery goroutine, not through the link's Events
// channel and the one pump goroutine behind it.
//
// A heartbeat is left to Events and the pump (false). With the embedded broker the
// delivery goroutine is the terminal's mochi reader, whose stack the GC shrinks to 8 KiB
// between packets: handled there, a heartbeat (every 5 s by default) needed more and grew
// all 64 readers back to 16 KiB (+0.5 MB resident) after every collection. Nothing waits
// for a heartbeat's handling, so the hop costs nothing that matters; acks stay direct,
// each one's next command is on the critical path of the throughput. The pump keeps a
// terminal's heartbeats in order, and after the link's Up queued before them. An ack the
// terminal sent after a heartbeat may be handled before it: both mark the terminal
// online (outbox), so only their order upstream (faceagent/{gw}/devices/{id}/...) can
// differ, on two different topics.
func (l *links) deliver(ev device.Event) bool {
	if ev.Kind != device.Ack {
		return false
	}
	h := l.direct.Load()
	if h == nil {
		return false // not started yet: Events, drained by the pump once it starts
	}
	(*h)(ev)
	return true
}

// Send implements outbox.Sender: the stored payload is the face.Command in msgp. Every
// command to a terminal, over MQTT or serial, first and on a retry alike, passes here.
//
// Before the command goes out, every record the outbox's journal has queued is written to
// the file (no fsync; journal.WriteOut): this command's send record, and the finish of the
// command the terminal acked before it, which the outbox journals lazily. A SIGKILL keeps
// what was written, so after a kill of the process each terminal gets again at most the
// one command it was sent after its last ack: the command in flight. (A power cut can
// still lose the last LazyDelay of them: only the journal's fsync protects against that.)
// If the write fails the command is not sent; the error is the failed send's.
func (l *links) Send(ctx context.Context, deviceID string, cmd outbox.Command) error {
	link := l.byDevice[deviceID]
	if link == nil {
		return fmt.Errorf("device %s: no link", deviceID)
	}
	fc, err := face.ParseCommandMsg(cmd.Payload)
	if err != nil {
		return fmt.Errorf("device %s: stored command: %w", deviceID, err)
	}
	if j := l.journal.Load(); j != nil {
		if err := j.WriteOut(); err != nil {
			return fmt.Errorf("device %s: not sent, journal write-out: %w", deviceID, err)
		}
	}
	return link.Send(ctx, deviceID, fc)
}

func (l *links) close() {
	for _, link := range l.all {
		_ = link.Close()
	}
}

// openLinks creates one MQTT link for all MQTT terminals (through the embedded broker's
// inline client when there is one, else through brokerURL) and one serial link per serial
// terminal. Links connect in the background; Up events follow.
func openLinks(cfg *config.Config, srv *mqtt.Server, brokerURL string, log *slog.Logger) (*links, error) {
	l := &links{byDevice: map[string]device.Link{}, devices: map[device.Link][]string{}, nonBlocking: map[string]bool{}}
	var mqttIDs []string
	for _, d := range cfg.Devices {
		if d.Transport == config.TransportMQTT {
			mqttIDs = append(mqttIDs, d.ID)
		}
	}
	if len(mqttIDs) > 0 {
		lc := mqttlink.Config{
			CommandTopic:   cfg.Topics.DeviceCommand,
			AckTopic:       cfg.Topics.DeviceAck,
			HeartbeatTopic: cfg.Topics.DeviceHeartbeat,
			Devices:        mqttIDs,
			// Acks and heartbeats go to Deliver; Events carries connection changes and what
			// arrives before the pump installs Deliver's handler, and a full buffer only makes
			// a terminal's delivery wait for the pump. 64 events are 10 KB, 1,024 were 164 KB.
			EventBuffer: 64,
			Deliver:     l.deliver,
			Logger:      log.With("part", "mqttlink"),
		}
		if srv != nil {
			lc.Server = srv
		} else {
			lc.URL = brokerURL
			lc.ClientID = "faceagent-" + cfg.Agent.GatewayID + "-devices"
			if u := cfg.Upstream; u != nil {
				lc.Username, lc.Password = u.Username, u.Password
			}
		}
		link, err := mqttlink.New(lc)
		if err != nil {
			return nil, fmt.Errorf("mqtt devices: %w", err)
		}
		l.add(link, mqttIDs)
		for _, id := range mqttIDs {
			l.nonBlocking[id] = link.SendsWithoutBlocking()
		}
	}
	for _, d := range cfg.Devices {
		if d.Transport != config.TransportSerial {
			continue
		}
		link, err := serial.New(serial.Config{
			Port: d.Port, DeviceID: d.ID, Baud: d.Baud, DataBits: d.DataBits, Parity: d.Parity,
			StopBits: fmt.Sprint(d.StopBits), Logger: log.With("part", "serial", "device", d.ID),
		})
		if err != nil {
			l.close()
			return nil, fmt.Errorf("devices %s: %w", d.ID, err)
		}
		l.add(link, []string{d.ID})
	}
	return l, nil
}

func (l *links) add(link device.Link, ids []string) {
	l.all = append(l.all, link)
	l.devices[link] = ids
	for _, id := range ids {
		l.byDevice[id] = link
	}
}

// openOutbox opens the message table with [dispatch] and [journal] applied. When sender
// is the device links, they get the outbox's journal as it opens (before the outbox's
// first Send: Open resends what was in flight), to write it out before each send.
func openOutbox(cfg *config.Config, sender outbox.Sender, log *slog.Logger) (*outbox.Outbox, error) {
	devs := map[string]outbox.DeviceConfig{}
	for i := range cfg.Devices {
		devs[cfg.Devices[i].ID] = deviceConfig(&cfg.Devices[i])
	}
	jo := syncOptions(cfg.Journal)
	if l, ok := sender.(*links); ok {
		jo.OnOpen = l.journal.Store
	}
	return outbox.Open(filepath.Join(cfg.Agent.DataDir, OutboxDir), sender, &outbox.Options{
		Journal:            jo,
		Settings:           settings(cfg.Dispatch),
		Devices:            devs,
		MaxQueuedPerDevice: cfg.Dispatch.MaxQueuePerDevice,
		MaxQueued:          cfg.Dispatch.MaxQueueTotal,
		Logger:             log.With("part", "outbox"),
	})
}

// deviceConfig maps a [[devices]] entry onto the outbox's per-device configuration: its
// retry_interval, max_tries and heartbeat_timeout override [dispatch] (zero: [dispatch]).
func deviceConfig(d *config.Device) outbox.DeviceConfig {
	return outbox.DeviceConfig{
		NoHeartbeat:      !d.HasHeartbeat(),
		RetryInterval:    d.RetryInterval.Duration,
		MaxTries:         d.MaxTries,
		HeartbeatTimeout: d.HeartbeatTimeout.Duration,
	}
}

// settings maps [dispatch] onto the outbox's settings.
func settings(d config.Dispatch) outbox.Settings {
	return outbox.Settings{
		RetryInterval:    d.RetryInterval.Duration,
		MaxTries:         d.MaxTries,
		HeartbeatTimeout: d.HeartbeatTimeout.Duration,
		MaxBackoff:       d.BackoffMax.Duration,
		FailedRetention:  d.FailedRetention.Duration,
	}
}

// pumps move link events into the outbox and upstream. One goroutine per link; they end
// when the link's Events channel closes (on link Close). MQTT terminals' acks bypass them
// once started (links.deliver): the pumps then carry link Up/Down, errors, MQTT
// terminals' heartbeats, serial links' events, and what arrived before the start.
type pumps struct {
	wg sync.WaitGroup
}

func (p *pumps) start(l *links, ob *outbox.Outbox, fwd *report.Forwarder, sw *devstate.Writer, log *slog.Logger) {
	direct := func(ev device.Event) { handleEvent(ev, nil, ob, fwd, sw, log) }
	l.direct.Store(&direct)
	for _, link := range l.all {
		ids := l.devices[link]
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for ev := range link.Events() {
				handleEvent(ev, ids, ob, fwd, sw, log)
			}
		}()
	}
}

func handleEvent(ev device.Event, ids []string, ob *outbox.Outbox, fwd *report.Forwarder, sw *devstate.Writer, log *slog.Logger) {
	targets := ids
	if ev.DeviceID != "" {
		targets = []string{ev.DeviceID}
	}
	switch ev.Kind {
	case device.Ack:
		ob.Ack(ev.DeviceID, ev.Ack.MessageID, ev.Ack.Code, ev.Ack.Message)
		fwd.Ack(ev.DeviceID, ev.Ack)
		sw.Touch(ev.DeviceID)
	case device.Heartbeat:
		ob.Heartbeat(ev.DeviceID)
		fwd.Heartbeat(ev.DeviceID, ev.Heartbeat)
		sw.Heartbeat(ev.DeviceID, ev.Heartbeat)
	case device.Up:
		for _, id := range targets {
			ob.LinkUp(id)
			sw.Touch(id)
		}
		log.Info("device link up", "devices", len(targets))
	case device.Down:
		for _, id := range targets {
			ob.LinkDown(id)
			sw.Touch(id)
		}
		log.Warn("device link down", "devices", len(targets), "err", ev.Err)
	case device.Error:
		log.Debug("device link error", "device", ev.DeviceID, "err", ev.Err)
	}
}

// stopTimeout bounds how long shutdown waits for one part.
func stopWithin(ctx context.Context, fn func()) {
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(30 * time.Second):
	}
}
