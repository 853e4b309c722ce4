package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/devstate"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
)

// whitelistSync carries the reconciler's decisions out and feeds it its events: its
// ListPersons go through the outbox as queries, its corrections as tasks without a
// result (NoResultDone brings their outcome back), and the terminals' heartbeats, the
// queues' changes and the desired lists' changes come from the links, the outbox and the
// intake. The outbox is opened before the reconciler (its NoResultDone must be set at
// Open), so the reconciler is set once built; until then, and when whitelist sync is off,
// every event is dropped.
type whitelistSync struct {
	ob      *outbox.Outbox
	work    *syncWorker // corrections and reports, off the event's goroutine
	r       atomic.Pointer[whitelist.Reconciler]
	devices []string
	log     *slog.Logger
}

var (
	_ whitelist.Lister    = (*whitelistSync)(nil)
	_ whitelist.Corrector = (*whitelistSync)(nil)
)

// reconcileOptions maps [whitelist] onto the reconciler's options; ListLimit is the
// configured page for MQTT terminals and, for serial ones, the largest page whose ack one
// frame carries. The window of corrections queued at once takes at most a quarter of a
// terminal's queue ([dispatch] max_queue_per_device), so that tasks still find room.
func reconcileOptions(cfg *config.Config, m *whitelist.Metrics, log *slog.Logger) whitelist.ReconcileOptions {
	limits := make(map[string]int, len(cfg.Devices))
	for _, d := range cfg.Devices {
		limits[d.ID] = cfg.Whitelist.ListLimit
		if d.Transport == config.TransportSerial {
			limits[d.ID] = face.ListLimitFor(serial.DefaultMaxPayload)
		}
	}
	return whitelist.ReconcileOptions{
		MaxReconciling: cfg.Whitelist.MaxReconciling,
		ListLimit:      func(dev string) int { return limits[dev] },
		BackoffBase:    cfg.Whitelist.BackoffBase.Duration,
		BackoffMax:     cfg.Whitelist.BackoffMax.Duration,
		StepTimeout:    cfg.Whitelist.StepTimeout.Duration,
		Window:         min(whitelist.DefaultWindow, max(1, cfg.Dispatch.MaxQueuePerDevice/4)),
		MaxSetFailures: cfg.Dispatch.MaxTries,
		Metrics:        m,
		Logger:         log,
	}
}

// List implements whitelist.Lister: a query through the terminal's one slot.
func (w *whitelistSync) List(dev string, cmd face.Command) error {
	payload, err := cmd.AppendMsg(nil)
	if err != nil {
		return err
	}
	id := cmd.MessageID
	return w.ob.Query(outbox.Query{MessageID: id, DeviceID: dev, Op: string(cmd.Op), Payload: payload,
		Done: func(ack face.Ack, err error) {
			if r := w.r.Load(); r != nil {
				r.ListReply(dev, id, ack, refusalInAck(err))
			}
		}})
}

// Correct implements whitelist.Corrector: a task without a result, behind the terminal's
// tasks, its outcome told by the outbox's NoResultDone (correctionDone).
func (w *whitelistSync) Correct(dev string, cmd face.Command) error {
	payload, err := cmd.AppendMsg(nil)
	if err != nil {
		return err
	}
	t := outbox.Task{MessageID: cmd.MessageID, DeviceID: dev, Op: string(cmd.Op),
		PersonID: cmd.Person.ID, Payload: payload, NoResult: true}
	if w.work != nil {
		return w.work.correct(t)
	}
	return w.ob.Enqueue(t)
}

// notQueued tells the reconciler that the worker could not queue a correction.
func (w *whitelistSync) notQueued(dev, messageID string, err error) {
	if r := w.r.Load(); r != nil {
		r.CorrectionDone(dev, messageID, face.Ack{}, fmt.Errorf("not queued: %w", err))
	}
}

// correctionDone is the outbox's NoResultDone. A correction a later task for its person
// superseded before it was sent is done: that task carries the person's latest record,
// and the heartbeat after it is judged again.
func (w *whitelistSync) correctionDone(dev, messageID string, ack face.Ack, err error) {
	r := w.r.Load()
	if r == nil {
		return
	}
	if errors.Is(err, outbox.ErrSuperseded) {
		ack, err = face.Ack{MessageID: messageID}, nil
	}
	r.CorrectionDone(dev, messageID, ack, refusalInAck(err))
}

// refusalInAck drops the outbox's error for a refusal: the reconciler reads the refusal
// from the ack's code (it tells a refused record from a failed step).
func refusalInAck(err error) error {
	if errors.Is(err, outbox.ErrRefused) {
		return nil
	}
	return err
}

// tasksPending reports whether dev's queue holds back office tasks, queued or in flight,
// not counting the reconciler's own corrections.
func (w *whitelistSync) tasksPending(dev string) bool {
	st, ok := w.ob.DeviceStatus(dev)
	if !ok {
		return false
	}
	return st.Queued+st.InFlightTasks-st.NoResult > 0 // a batch in flight may mix both kinds
}

// heartbeat feeds a terminal's heartbeat, after its queue's state as of now.
func (w *whitelistSync) heartbeat(dev string, h face.Heartbeat) {
	if r := w.r.Load(); r != nil {
		r.TasksPending(dev, w.tasksPending(dev))
		r.Heartbeat(dev, h)
	}
}

// touched feeds a change of dev's queue (a task taken in, an ack).
func (w *whitelistSync) touched(dev string) {
	if r := w.r.Load(); r != nil {
		r.TasksPending(dev, w.tasksPending(dev))
	}
}

// setWhitelist feeds a SetWhitelist task that replaced dev's desired list.
func (w *whitelistSync) setWhitelist(dev string) {
	if r := w.r.Load(); r != nil {
		r.SetWhitelist(dev)
	}
}

// desiredChanged feeds a change of dev's desired list.
func (w *whitelistSync) desiredChanged(dev string) {
	if r := w.r.Load(); r != nil {
		r.DesiredChanged(dev)
	}
}

// resync asks for a reconciliation of dev, or of every configured terminal for "", and
// returns how many were asked.
func (w *whitelistSync) resync(dev string) int {
	r := w.r.Load()
	if r == nil {
		return 0
	}
	if dev != "" {
		r.Resync(dev)
		return 1
	}
	for _, d := range w.devices {
		r.Resync(d)
	}
	return len(w.devices)
}

// syncReporter is the reconciler's Reporter: each report goes to the durable sync report
// log, and its status and time to the terminal's device state (lastSync, syncStatus).
type syncReporter struct {
	log *report.SyncReports
	sw  *devstate.Writer
}

func (s syncReporter) SyncReport(r wire.SyncReport) {
	s.log.SyncReport(r)
	at, err := time.Parse(time.RFC3339Nano, r.At)
	if err != nil {
		at = time.Now()
	}
	s.sw.Synced(r.DeviceID, r.Status, at)
}

// syncedState is the links' State sink: the device state writer, and the reconciler told
// of the same heartbeats and queue changes.
type syncedState struct {
	sw *devstate.Writer
	ws *whitelistSync
}

func (s syncedState) Touch(id string) {
	s.sw.Touch(id)
	s.ws.touched(id)
}

func (s syncedState) Heartbeat(id string, h face.Heartbeat) {
	s.sw.Heartbeat(id, h)
	s.ws.heartbeat(id, h)
}

// startReconciler builds the reconciler over the desired lists wl when [whitelist]
// reconcile is on, reporting through reports, and hands it to ws. It is closed before the
// outbox and the reports it uses (stops run in reverse).
func (a *Agent) startReconciler(cfg *config.Config, ws *whitelistSync, wl *whitelist.Store, reports whitelist.Reporter,
	stops *[]func(context.Context) error) error {
	ws.log = a.log.With("part", "sync")
	ws.devices = make([]string, len(cfg.Devices))
	for i, d := range cfg.Devices {
		ws.devices[i] = d.ID
	}
	if !cfg.Whitelist.Reconcile {
		return nil
	}
	ro := reconcileOptions(cfg, a.m.reconcile, ws.log)
	ro.Store, ro.Lister, ro.Corrector = wl, ws, ws
	ro.Reporter = ws.startWorker((ro.Window+8)*max(ro.MaxReconciling, 1), reports.SyncReport)
	r, err := whitelist.NewReconciler(ro)
	if err != nil {
		ws.work.stop()
		return err
	}
	ws.r.Store(r)
	for _, dev := range wl.PendingSets() { // taken before a restart, or before r was set
		r.SetWhitelist(dev)
	}
	*stops = append(*stops, func(context.Context) error { ws.r.Store(nil); r.Close(); ws.work.stop(); return nil })
	return nil
}
