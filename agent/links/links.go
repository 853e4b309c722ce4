package links

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/mqttlink"
	"github.com/seed0e69bba5/faceagent/device/serial"
)

// Serial is a terminal on a serial line.
type Serial struct {
	DeviceID string
	Port     string
	Baud     int
	DataBits int
	Parity   string // none, even, odd, mark, space
	StopBits int
}

// Options say which terminals there are and how they are reached.
type Options struct {
	// MQTT are the terminals on local MQTT: one link carries them all, through Bus when it
	// is set (the embedded broker), else through BrokerURL.
	MQTT []string
	// Bus is the embedded broker (agent/broker's Broker), or nil.
	Bus mqttlink.Bus
	// BrokerURL, ClientID, Username and Password reach an external broker when Bus is nil.
	BrokerURL, ClientID, Username, Password string
	// The terminals' topic templates ([topics]); "" takes mqttlink's defaults.
	CommandTopic, AckTopic, HeartbeatTopic string
	// Serial are the terminals on serial lines, one link each.
	Serial []Serial
	// Logger receives the links' logs. Default: discard.
	Logger *slog.Logger
}

// Links holds the device links and routes each device's commands to its link. It is the
// outbox's Sender.
type Links struct {
	log         *slog.Logger
	byDevice    map[string]device.Link
	all         []device.Link
	devices     map[device.Link][]string // the devices each link carries (for Up/Down of a shared connection)
	nonBlocking map[string]bool          // devices whose link's Send only queues (the embedded broker)
	// direct handles acks on the goroutine that received them (mqttlink's
	// Config.Deliver), once the pumps have started; nil before.
	direct atomic.Pointer[func(device.Event)]
	pumps  pumps
}

var _ outbox.NonBlockingSender = (*Links)(nil)

// Open creates one MQTT link for all MQTT terminals and one serial link per serial
// terminal. Links connect in the background; Up events follow once Start runs the pumps.
func Open(o Options) (*Links, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Links{log: log, byDevice: map[string]device.Link{}, devices: map[device.Link][]string{}, nonBlocking: map[string]bool{}}
	if len(o.MQTT) > 0 {
		lc := mqttlink.Config{
			CommandTopic:   o.CommandTopic,
			AckTopic:       o.AckTopic,
			HeartbeatTopic: o.HeartbeatTopic,
			Devices:        o.MQTT,
			// Acks and heartbeats go to Deliver; Events carries connection changes and what
			// arrives before the pump installs Deliver's handler, and a full buffer only makes
			// a terminal's delivery wait for the pump, so a short buffer suffices: its
			// memory grows with its length (about 160 bytes an event).
			EventBuffer: 64,
			Deliver:     l.deliver,
			Logger:      log.With("part", "mqttlink"),
		}
		if o.Bus != nil {
			lc.Bus = o.Bus
		} else {
			lc.URL, lc.ClientID, lc.Username, lc.Password = o.BrokerURL, o.ClientID, o.Username, o.Password
		}
		link, err := mqttlink.New(lc)
		if err != nil {
			return nil, fmt.Errorf("mqtt devices: %w", err)
		}
		l.add(link, o.MQTT)
		for _, id := range o.MQTT {
			l.nonBlocking[id] = link.SendsWithoutBlocking()
		}
	}
	for _, d := range o.Serial {
		link, err := serial.New(serial.Config{
			Port: d.Port, DeviceID: d.DeviceID, Baud: d.Baud, DataBits: d.DataBits, Parity: d.Parity,
			StopBits: fmt.Sprint(d.StopBits), Logger: log.With("part", "serial", "device", d.DeviceID),
		})
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("devices %s: %w", d.DeviceID, err)
		}
		l.add(link, []string{d.DeviceID})
	}
	return l, nil
}

func (l *Links) add(link device.Link, ids []string) {
	l.all = append(l.all, link)
	l.devices[link] = ids
	for _, id := range ids {
		l.byDevice[id] = link
	}
}

// SendsWithoutBlocking implements outbox.NonBlockingSender: the outbox sends to these
// devices on the goroutine that decided the send (the one that delivered the previous
// ack), with no goroutine per send.
func (l *Links) SendsWithoutBlocking(deviceID string) bool { return l.nonBlocking[deviceID] }

// deliver is mqttlink's Config.Deliver: an ack goes straight to the outbox (and the next
// command out) on the terminal's own delivery goroutine, not through the link's Events
// channel and the one pump goroutine behind it.
//
// A heartbeat is left to Events and the pump (false). With the embedded broker the
// delivery goroutine is the terminal's connection reader, whose stack the GC shrinks to
// 8 KiB between packets: handled there, a heartbeat (every 5 s by default) would grow
// every reader's stack back to 16 KiB after every collection. Nothing waits for a heartbeat's
// handling, so the hop costs nothing that matters; acks stay direct, each one's next
// command is on the critical path of the throughput. The pump keeps a terminal's
// heartbeats in order, and after the link's Up queued before them. An ack the terminal
// sent after a heartbeat may be handled before it: both mark the terminal online
// (outbox), so only their order upstream (faceagent/{gw}/devices/{id}/...) can differ, on
// two different topics.
func (l *Links) deliver(ev device.Event) bool {
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

// Send implements outbox.Sender: the stored payload is the face.Command in msgp, sent
// under cmd.MessageID (the outbox sends a command again under a new id after the terminal
// answered code 21: its face was missing). Every command to a terminal, over MQTT or
// serial, first and on a retry alike, passes here (the outbox has written its journal out
// before: see outbox's Sender).
func (l *Links) Send(ctx context.Context, deviceID string, cmd outbox.Command) error {
	link := l.byDevice[deviceID]
	if link == nil {
		return fmt.Errorf("device %s: no link", deviceID)
	}
	fc, err := face.ParseCommandMsg(cmd.Payload)
	if err != nil {
		return fmt.Errorf("device %s: stored command: %w", deviceID, err)
	}
	if cmd.MessageID != "" {
		fc.MessageID = cmd.MessageID
	}
	return link.Send(ctx, deviceID, fc)
}

// Close closes every link; their Events channels close, and the pumps end (Wait).
func (l *Links) Close() {
	for _, link := range l.all {
		_ = link.Close()
	}
}
