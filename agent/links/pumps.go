package links

import (
	"log/slog"
	"sync"

	"github.com/seed0e69bba5/faceagent/device"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// Outbox is what the terminals' events tell the dispatcher (agent/outbox's *Outbox).
type Outbox interface {
	// AckMessage takes a terminal's ack whole, as its link decoded it: the ack of a query
	// (ListPersons) carries the answer (its page) that the dispatcher hands to the query's
	// asker. The ack is passed by value: an ordinary ack costs no allocation on the way.
	AckMessage(deviceID string, a face.Ack)
	// TerminalHeartbeat takes a terminal's heartbeat whole: its protocol version, serial
	// and persons tell the face step what the terminal speaks and when it was reset.
	TerminalHeartbeat(deviceID string, h face.Heartbeat)
	LinkUp(deviceID string)
	LinkDown(deviceID string)
}

// Forwarder forwards the terminals' acks and heartbeats upstream.
type Forwarder interface {
	Ack(deviceID string, a face.Ack)
	Heartbeat(deviceID string, h face.Heartbeat)
}

// State keeps the terminals' state in the state store: Touch marks a terminal's state
// changed, Heartbeat records its last heartbeat.
type State interface {
	Touch(deviceID string)
	Heartbeat(deviceID string, h face.Heartbeat)
}

// Sinks are where the pumps route the terminals' events.
type Sinks struct {
	Outbox    Outbox
	Forwarder Forwarder
	State     State
}

// pumps move link events into the outbox and upstream. One goroutine per link; they end
// when the link's Events channel closes (on Close). MQTT terminals' acks bypass them once
// started (Links.deliver): the pumps then carry link Up/Down, errors, MQTT terminals'
// heartbeats, serial links' events, and what arrived before the start.
type pumps struct {
	wg sync.WaitGroup
}

// Start routes the links' events to s: acks on the delivering goroutine from now on, the
// rest through one pump goroutine per link. Call it once; Close ends the pumps, Wait waits
// for them.
func (l *Links) Start(s Sinks) {
	direct := func(ev device.Event) { handleEvent(ev, nil, s, l.log) }
	l.direct.Store(&direct)
	for _, link := range l.all {
		ids := l.devices[link]
		l.pumps.wg.Add(1)
		go func() {
			defer l.pumps.wg.Done()
			for ev := range link.Events() {
				handleEvent(ev, ids, s, l.log)
			}
		}()
	}
}

// Wait returns once the pumps have ended (after Close).
func (l *Links) Wait() { l.pumps.wg.Wait() }

func handleEvent(ev device.Event, ids []string, s Sinks, log *slog.Logger) {
	targets := ids
	if ev.DeviceID != "" {
		targets = []string{ev.DeviceID}
	}
	switch ev.Kind {
	case device.Ack:
		s.Outbox.AckMessage(ev.DeviceID, ev.Ack)
		s.Forwarder.Ack(ev.DeviceID, ev.Ack)
		s.State.Touch(ev.DeviceID)
	case device.Heartbeat:
		s.Outbox.TerminalHeartbeat(ev.DeviceID, ev.Heartbeat)
		s.Forwarder.Heartbeat(ev.DeviceID, ev.Heartbeat)
		s.State.Heartbeat(ev.DeviceID, ev.Heartbeat)
	case device.Up:
		for _, id := range targets {
			s.Outbox.LinkUp(id)
			s.State.Touch(id)
		}
		log.Info("device link up", "devices", len(targets))
	case device.Down:
		for _, id := range targets {
			s.Outbox.LinkDown(id)
			s.State.Touch(id)
		}
		log.Warn("device link down", "devices", len(targets), "err", ev.Err)
	case device.Error:
		log.Debug("device link error", "device", ev.DeviceID, "err", ev.Err)
	}
}
