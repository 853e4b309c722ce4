package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// engineSetter writes keys straight into the embedded broker's state store engine: the
// same store clients reach over MQTT, without a connection of our own (and so without
// TLS or credentials for the agent itself). Do never blocks on I/O.
//
// Like every client, the agent stamps its requests with an HLC timestamp (__ts); the store
// refuses requests without one.
func engineSetter(st *statestore.Store, clock *hlc.Clock) func(context.Context, string, []byte, time.Duration) error {
	return func(_ context.Context, key string, value []byte, px time.Duration) error {
		cmd := resp3.AppendArrayHeader(nil, 5)
		cmd = resp3.AppendBlobString(cmd, "SET")
		cmd = resp3.AppendBlobString(cmd, key)
		cmd = resp3.AppendBlob(cmd, value)
		cmd = resp3.AppendBlobString(cmd, "PX")
		cmd = resp3.AppendBlobString(cmd, strconv.FormatInt(px.Milliseconds(), 10))
		// Owner: the device-state keys are reserved to this writer (newBroker).
		reply, version := st.Do(&statestore.Request{Payload: cmd, Timestamp: clock.Now().String(), HasTimestamp: true,
			Owner: true}, nil)
		if !version.IsZero() {
			clock.Observe(version)
		}
		v, _, err := resp3.ReadValue(reply)
		if err != nil {
			return fmt.Errorf("state store reply: %w", err)
		}
		if v.Kind == resp3.SimpleError || v.Kind == resp3.BlobError {
			text, _ := strings.CutPrefix(string(v.Str), "ERR ")
			return &store.ServerError{Text: text} // as the store client reports a refusal
		}
		return nil
	}
}

// refusalReason is the label of faceagent_store_write_refused_total for a refusal.
func refusalReason(err error) string {
	switch {
	case errors.Is(err, store.ErrFencingTokenRequired), errors.Is(err, store.ErrFencingTokenLowerVersion),
		errors.Is(err, store.ErrFencingTokenSkew):
		return "fencing"
	case errors.Is(err, store.ErrQuotaExceeded):
		return "quota"
	case errors.Is(err, store.ErrNotAuthorized):
		return "not_authorized"
	}
	return "other"
}

// refusalWarnEvery bounds the warnings of refused state writes: one a minute, with the
// count since the last one.
const refusalWarnEvery = time.Minute

// stateWriter keeps faceagent/{gw}/devices/{id} current: it writes a device's state when
// something about it changed, at most once per write_interval per device, and rewrites
// an unchanged state once per heartbeat_timeout so that its expiry (PX = 3 ×
// heartbeat_timeout) only lapses when the gateway is gone. Callers only mark devices
// dirty (never blocking); the writes happen on the writer's goroutine, so a slow or
// absent store delays nothing but the next state write.
type stateWriter struct {
	set      func(ctx context.Context, key string, value []byte, px time.Duration) error
	ob       *outbox.Outbox
	prefix   string // faceagent/{gw}/devices/
	interval time.Duration
	refresh  time.Duration
	px       time.Duration
	timeout  time.Duration
	log      *slog.Logger
	m        *agentMetrics

	mu      sync.Mutex
	devs    map[string]*devState
	wake    chan struct{}
	wg      sync.WaitGroup
	written uint64 // writes done (tests, metrics)
	failed  uint64
	scans   uint64 // writeDue rounds: wake-ups of the writer (tests, benchmarks)
	// refused counts writes the store refused (an -ERR answer, not a lost link);
	// refusedWarned is refused at the last warning, logged at warnedAt.
	refused, refusedWarned uint64
	warnedAt               time.Time
}

type devState struct {
	dirty     bool
	lastWrite time.Time
	last      []byte // what was last written
	hb        face.Heartbeat
	hbAt      time.Time
	lastErr   string
	// refusal is the store's answer to the device's last write when it refused it ("" once a
	// write succeeds), refusedSince when that started.
	refusal      string
	refusedSince time.Time
}

func newStateWriter(ids []string, set func(context.Context, string, []byte, time.Duration) error, ob *outbox.Outbox,
	gw string, interval, heartbeatTimeout, timeout time.Duration, log *slog.Logger) *stateWriter {
	w := &stateWriter{
		set: set, ob: ob, prefix: upstreamTopics(gw).devices, interval: interval,
		refresh: heartbeatTimeout, px: 3 * heartbeatTimeout, timeout: timeout, log: log,
		devs: map[string]*devState{}, wake: make(chan struct{}, 1),
	}
	for _, id := range ids {
		w.devs[id] = &devState{dirty: true} // write every device once at start
	}
	return w
}

// touch marks a device's state as changed.
//
// Only a device turning dirty wakes the writer: one already dirty is in the writer's
// next wake-up (its write_interval timer, or a write in progress that re-marked it). At
// thousands of acks a second, waking for each only to find every device inside its
// write_interval was a scan of all devices per ack on two shared cores.
func (w *stateWriter) touch(id string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	wake := markDirty(w.devs[id])
	w.mu.Unlock()
	if wake {
		w.poke()
	}
}

// markDirty marks d dirty and reports whether it was clean (the writer must be woken).
// Called with mu held.
func markDirty(d *devState) bool {
	if d == nil || d.dirty {
		return false
	}
	d.dirty = true
	return true
}

func (w *stateWriter) heartbeat(id string, hb face.Heartbeat) {
	if w == nil {
		return
	}
	w.mu.Lock()
	d := w.devs[id]
	if d != nil {
		d.hb, d.hbAt = hb, time.Now()
	}
	wake := markDirty(d)
	w.mu.Unlock()
	if wake {
		w.poke()
	}
}

func (w *stateWriter) result(r outbox.Result) {
	if w == nil {
		return
	}
	w.mu.Lock()
	d := w.devs[r.DeviceID]
	if d != nil && r.Err != "" && (r.Status == outbox.Failed || r.Status == outbox.Expired) {
		d.lastErr = r.Err
	}
	wake := markDirty(d)
	w.mu.Unlock()
	if wake {
		w.poke()
	}
}

func (w *stateWriter) poke() {
	poke(w.wake)
}

func (w *stateWriter) start(ctx context.Context) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		for {
			next := w.writeDue(ctx)
			timer.Reset(time.Until(next))
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
			case <-timer.C:
			}
		}
	}()
}

// writeDue writes every device that is due and returns when the next one will be.
func (w *stateWriter) writeDue(ctx context.Context) time.Time {
	now := time.Now()
	next := now.Add(w.refresh)
	w.mu.Lock()
	w.scans++
	var due []string
	for id, d := range w.devs {
		refreshAt := d.lastWrite.Add(w.refresh)
		if !d.dirty && now.Before(refreshAt) {
			next = minTime(next, refreshAt)
			continue
		}
		if allowed := d.lastWrite.Add(w.interval); now.Before(allowed) {
			next = minTime(next, allowed)
			continue
		}
		due = append(due, id)
	}
	w.mu.Unlock()
	for _, id := range due {
		if ctx.Err() != nil {
			break
		}
		if w.writeOne(ctx, id, now) {
			// Failed: no touch wakes the writer for a device already dirty, so the retry
			// after write_interval is the writer's own.
			next = minTime(next, now.Add(w.interval))
		}
	}
	return next
}

// writeOne writes one device's state; it reports whether the write failed (the device is
// dirty again and due after write_interval).
func (w *stateWriter) writeOne(ctx context.Context, id string, now time.Time) (failed bool) {
	st := wire.DeviceState{DeviceID: id, UpdatedAt: now.UnixMilli()}
	if s, ok := w.ob.DeviceStatus(id); ok {
		st.Online, st.Paused, st.QueueDepth, st.InFlight = s.Online, s.Paused, s.Queued, s.InFlight
		st.Sent, st.Succeeded, st.Failed, st.Retries = s.Sent, s.Succeeded, s.Failed, s.Retries
		st.LastAck = unixMilli(s.LastAck)
	}
	w.mu.Lock()
	d := w.devs[id]
	st.LastHeartbeat = unixMilli(d.hbAt)
	st.Firmware, st.Persons, st.LastError = d.hb.Firmware, d.hb.Persons, d.lastErr
	prev := d.last
	d.dirty = false
	w.mu.Unlock()

	// Unchanged apart from the timestamp, and not yet due for a refresh: skip the write.
	cmp := st
	cmp.UpdatedAt = 0
	body, _ := cmp.MarshalMsg(nil)
	if bytes.Equal(body, prev) && now.Before(d.lastWrite.Add(w.refresh)) {
		return false
	}
	value, _ := st.MarshalMsg(nil)
	wctx, cancel := context.WithTimeout(ctx, w.timeout)
	start := time.Now()
	err := w.set(wctx, w.prefix+id, value, w.px)
	cancel()
	if w.m != nil {
		w.m.storeWrite.Observe(time.Since(start).Seconds())
		if err != nil {
			w.m.storeWriteErrors.Inc()
		}
	}
	var serr *store.ServerError
	refused := errors.As(err, &serr)
	w.mu.Lock()
	warn, since := false, uint64(0)
	if err != nil {
		w.failed++
		d.dirty = true // try again after the interval
		d.lastWrite = now
		if refused {
			w.refused++
			if d.refusal == "" {
				d.refusedSince = now
			}
			d.refusal = serr.Text
			if now.Sub(w.warnedAt) >= refusalWarnEvery {
				warn, since = true, w.refused-w.refusedWarned
				w.warnedAt, w.refusedWarned = now, w.refused
			}
		}
	} else {
		w.written++
		d.last, d.lastWrite = body, now
		d.refusal = ""
	}
	w.mu.Unlock()
	switch {
	case refused:
		// Not the link: the store answered, and will answer the same until someone acts (a
		// fencing token on the key, a full store, a key rule). Warn, at most once a minute.
		if w.m != nil {
			w.m.storeWriteRefused.With(refusalReason(err)).Inc()
		}
		if warn {
			w.log.Warn("the state store refuses the device state", "device", id, "key", w.prefix+id,
				"answer", serr.Text, "refused_since_last_warning", since)
		}
	case err != nil:
		w.log.Debug("device state not written", "device", id, "err", err)
	}
	return err != nil
}

// refusedWarnings describes the devices whose last state write the store refused, for
// /healthz.
func (w *stateWriter) refusedWarnings() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for id, d := range w.devs {
		if d.refusal != "" {
			out = append(out, fmt.Sprintf("state store refuses the state of device %s (%s%s) since %s: %s",
				id, w.prefix, id, d.refusedSince.UTC().Format(time.RFC3339), d.refusal))
		}
	}
	slices.Sort(out)
	return out
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
