package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// taker turns task messages into journalled outbox tasks and dead-letters the rest.
// accept returns an error only when nothing could be stored for reasons that a retry may
// cure (journal failure, shutting down): the message must then not be acknowledged.
type taker struct {
	ob     atomic.Pointer[outbox.Outbox]
	limits wire.Limits
	// dead journals the deadletters; they are durable before the message is acknowledged.
	dead *report.DeadLetters
	log  *slog.Logger
	m    *agentMetrics
	// touched is told which devices got new tasks (the state writer's queue depth).
	touched func(deviceID string)
	// draining refuses new tasks (control command "drain"): they are dead-lettered.
	draining atomic.Bool
}

func newTaker(cfg *config.Config, m *agentMetrics, log *slog.Logger) *taker {
	known := map[string]bool{}
	for _, d := range cfg.Devices {
		known[d.ID] = true
	}
	return &taker{
		limits: wire.Limits{
			MaxBatch:       cfg.Intake.MaxBatch,
			MaxMessageSize: int(cfg.Intake.MaxMessageSize),
			KnownDevice:    func(id string) bool { return known[id] },
		},
		log: log,
		m:   m,
	}
}

// errNotReady is returned while the outbox is not open (start-up, shutdown).
var errNotReady = errors.New("agent: not accepting tasks right now")

// accept stores one task message: its tasks in the outbox, its rejects in the deadletter
// log. It keeps nothing of payload once it returns (parsing copies the strings, a reject
// its payload): the embedded broker's hook hands it the packet's own buffer.
func (t *taker) accept(ctx context.Context, payload []byte) error {
	ob := t.ob.Load()
	if ob == nil {
		return errNotReady
	}
	batch := wire.Parse(payload, t.limits)
	rejects := batch.Rejects
	if t.draining.Load() {
		for _, task := range batch.Tasks {
			raw, _ := json.Marshal(task)
			rejects = append(rejects, wire.NewReject("gateway draining: not taking new tasks", raw))
		}
		batch.Tasks = nil
	}
	// The deadletters known before anything is stored must fit in the backlog, or none of
	// the message is taken: it is not acknowledged and comes again later, when the
	// upstream broker has taken the backlog. (Checking first keeps its good tasks from
	// being stored by a message that is then refused.)
	dead := make([][]byte, 0, len(rejects))
	size := 0
	for _, r := range rejects {
		b, _ := json.Marshal(r)
		dead = append(dead, b)
		size += len(b)
	}
	if len(dead) > 0 {
		if err := t.dead.Room(len(dead), size); err != nil {
			return err
		}
	}
	if len(batch.Tasks) > 0 {
		tasks := make([]outbox.Task, len(batch.Tasks))
		// The commands are encoded into one buffer for the batch (the outbox copies the
		// payloads it keeps), sized for all of them: one allocation, not one per task.
		size := 0
		for i := range batch.Tasks {
			cmd := batch.Command(i)
			size += cmd.Msgsize()
		}
		buf := make([]byte, 0, size)
		for i := range batch.Tasks {
			task := &batch.Tasks[i]
			cmd := batch.Command(i) // the id Parse computed: each task is hashed once
			start := len(buf)
			var err error
			if buf, err = cmd.AppendMsg(buf); err != nil { // Parse validated the task; this would be a bug in one of them
				return fmt.Errorf("encoding task %s: %w", task.TaskID, err)
			}
			tasks[i] = outbox.Task{
				MessageID: cmd.MessageID, TaskID: task.TaskID, DeviceID: task.DeviceID,
				Op: string(task.Op), PersonID: task.Person.ID, Payload: buf[start:len(buf):len(buf)],
			}
		}
		errs := ob.EnqueueBatch(tasks)
		accepted := 0
		for i, err := range errs {
			switch {
			case err == nil:
				accepted++
				if t.touched != nil {
					t.touched(tasks[i].DeviceID)
				}
			case errors.Is(err, outbox.ErrDuplicate):
				// Already stored (a redelivery): acknowledging it again is right.
			case errors.Is(err, outbox.ErrDeviceFull), errors.Is(err, outbox.ErrFull), errors.Is(err, outbox.ErrInvalidTask):
				// Admitted past the backlog's bound (at most one message's tasks): the
				// task is in no queue, so the deadletter is all that speaks for it.
				raw, _ := json.Marshal(batch.Tasks[i])
				r := wire.NewReject("over a bound: "+err.Error(), raw)
				b, _ := json.Marshal(r)
				dead = append(dead, b)
				rejects = append(rejects, r)
			default:
				// Journal failed or closed: nothing of this message may be acknowledged.
				return err
			}
		}
		t.m.tasksAccepted.Add(uint64(accepted))
	}
	// Journalled (and fsynced) before the caller acknowledges the message; published in
	// order by the deadletter log's own goroutine.
	if err := t.dead.Add(dead); err != nil {
		return fmt.Errorf("journalling deadletters: %w", err)
	}
	for _, r := range rejects {
		t.m.tasksRejected.Inc()
		t.log.Info("task refused", "reason", r.Reason)
	}
	return nil
}

// intakeHook journals task messages published to the embedded broker inside OnPublish,
// before mochi routes the message or writes its PUBACK (docs/design.md "Intake boundary":
// upstream mochi wrote the PUBACK before routing, so only OnPublish comes early enough;
// our copy now routes first, but OnPublish is still where a message can be refused with
// an error PUBACK). The hook runs on the publisher's read loop: a slow journal slows that
// publisher, which is the backpressure we want.
type intakeHook struct {
	mqtt.HookBase
	srv   *mqtt.Server
	topic string
	take  *taker
}

func (h *intakeHook) ID() string { return "faceagent-intake" }

func (h *intakeHook) Provides(b byte) bool { return b == mqtt.OnPublish }

func (h *intakeHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || pk.TopicName != h.topic {
		return pk, nil
	}
	err := h.take.accept(context.Background(), pk.Payload)
	if err == nil {
		return pk, nil // acknowledged (and routed, so the back office may watch tasks)
	}
	h.take.log.Error("task message not stored; not acknowledged", "client", cl.ID, "err", err)
	if cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos > 0 {
		// MQTT5: a PUBACK with an error reason tells the back office to send it again.
		return pk, packets.ErrImplementationSpecificError
	}
	// MQTT 3.1.1 has no negative PUBACK: withhold it and drop the connection, so the
	// publisher resends the message when it reconnects.
	_ = h.srv.DisconnectClient(cl, packets.ErrServerUnavailable)
	return pk, packets.ErrRejectPacket
}
