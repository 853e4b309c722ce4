package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/links"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/mqttlink"
	"github.com/seed0e69bba5/faceagent/device/serial"
)

// OutboxDir is the outbox's journal directory inside agent.data_dir.
const OutboxDir = "outbox"

// openLinks maps [[devices]] and [topics] onto the terminal links: the MQTT terminals
// through the embedded broker, bus, when there is one, else through brokerURL.
func openLinks(cfg *config.Config, bus mqttlink.Bus, brokerURL string, log *slog.Logger) (*links.Links, error) {
	o := links.Options{
		CommandTopic:   cfg.Topics.DeviceCommand,
		AckTopic:       cfg.Topics.DeviceAck,
		HeartbeatTopic: cfg.Topics.DeviceHeartbeat,
		Logger:         log,
	}
	if bus != nil {
		o.Bus = bus
	} else {
		o.BrokerURL = brokerURL
		o.ClientID = "faceagent-" + cfg.Agent.GatewayID + "-devices"
		if u := cfg.Upstream; u != nil {
			o.Username, o.Password = u.Username, u.Password
		}
	}
	for _, d := range cfg.Devices {
		switch d.Transport {
		case config.TransportMQTT:
			o.MQTT = append(o.MQTT, d.ID)
		case config.TransportSerial:
			o.Serial = append(o.Serial, links.Serial{DeviceID: d.ID, Port: d.Port, Baud: d.Baud,
				DataBits: d.DataBits, Parity: d.Parity, StopBits: d.StopBits})
		}
	}
	return links.Open(o)
}

// openOutbox opens the message table with [dispatch] and [journal] applied. When sender
// is the device links, they get the outbox's journal as it opens (before the outbox's
// first Send: Open resends what was in flight), to write it out before each send.
// noResultDone is told the outcome of the whitelist sync's corrections, acked of the
// tasks' commands an ack finished, journalFailed of the journal refusing writes (any may
// be nil). fs, when not nil, gives the faces the commands' persons carry: each goes to a
// terminal before the first command that needs it (outbox's face step), in [faces] chunks.
func openOutbox(cfg *config.Config, sender outbox.Sender, log *slog.Logger,
	noResultDone func(dev, messageID string, ack face.Ack, err error), acked func(dev string, cmd outbox.Command, code int),
	journalFailed func(error), fs outbox.FaceSource) (*outbox.Outbox, error) {
	devs := map[string]outbox.DeviceConfig{}
	for i := range cfg.Devices {
		devs[cfg.Devices[i].ID] = deviceConfig(cfg, &cfg.Devices[i])
	}
	jo := syncOptions(cfg.Journal)
	jo.OnFailure = journalFailed
	return outbox.Open(filepath.Join(cfg.Agent.DataDir, OutboxDir), sender, &outbox.Options{
		Journal:            jo,
		Settings:           settings(cfg.Dispatch),
		Devices:            devs,
		MaxQueuedPerDevice: cfg.Dispatch.MaxQueuePerDevice,
		MaxQueued:          cfg.Dispatch.MaxQueueTotal,
		Logger:             log.With("part", "outbox"),
		NoResultDone:       noResultDone,
		Faces:              fs,
		FaceChunk:          int(cfg.Faces.ChunkMQTT),
		Acked:              acked,
	})
}

// deviceConfig maps a [[devices]] entry onto the outbox's per-device configuration: its
// retry_interval, max_tries and heartbeat_timeout override [dispatch] (zero: [dispatch]);
// its face chunk and, for a serial terminal, the frame a command (a batch) must fit.
// Opening the outbox and a remote override's SetDevice both use it, so an override never
// drops what the file set.
func deviceConfig(cfg *config.Config, d *config.Device) outbox.DeviceConfig {
	dc := outbox.DeviceConfig{
		NoHeartbeat:      !d.HasHeartbeat(),
		RetryInterval:    d.RetryInterval.Duration,
		MaxTries:         d.MaxTries,
		HeartbeatTimeout: d.HeartbeatTimeout.Duration,
		FaceChunk:        faceChunk(cfg, d),
	}
	if d.Transport == config.TransportSerial {
		dc.MaxCommandBytes = serial.DefaultMaxPayload
	}
	return dc
}

// settings maps [dispatch] onto the outbox's settings.
func settings(d config.Dispatch) outbox.Settings {
	return outbox.Settings{
		RetryInterval:    d.RetryInterval.Duration,
		MaxTries:         d.MaxTries,
		HeartbeatTimeout: d.HeartbeatTimeout.Duration,
		MaxBackoff:       d.BackoffMax.Duration,
		FailedRetention:  d.FailedRetention.Duration,
		MaxBatch:         d.MaxBatch,
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
