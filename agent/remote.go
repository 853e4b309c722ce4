package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// keyStore is what remote management needs of the state store: the embedded engine
// in-process, or an agent/store client for an external store.
type keyStore interface {
	get(ctx context.Context, key string) (value []byte, found bool, err error)
	set(ctx context.Context, key string, value []byte) error
	// watch signals (capacity 1, coalescing) whenever key may have changed.
	watch(ctx context.Context, key string) (changed <-chan struct{}, stop func(), err error)
}

// engineKeys reaches the embedded store engine directly; KEYNOTIFY registers an
// in-process Watcher.
type engineKeys struct {
	st    *statestore.Store
	clock *hlc.Clock
}

func (e engineKeys) do(args ...[]byte) resp3.Value {
	cmd := resp3.AppendArrayHeader(nil, len(args))
	for _, a := range args {
		cmd = resp3.AppendBlob(cmd, a)
	}
	// Owner: the status keys it writes are reserved to the agent (agentOwnedKeys).
	reply, version := e.st.Do(&statestore.Request{Payload: cmd, Timestamp: e.clock.Now().String(), HasTimestamp: true,
		Owner: true}, nil)
	if !version.IsZero() {
		e.clock.Observe(version)
	}
	v, _, err := resp3.ReadValue(reply)
	if err != nil {
		return resp3.Value{Kind: resp3.SimpleError, Str: []byte(err.Error())}
	}
	v.Str = append([]byte(nil), v.Str...) // reply is ours, but keep the value independent
	return v
}

func (e engineKeys) get(_ context.Context, key string) ([]byte, bool, error) {
	v := e.do([]byte("GET"), []byte(key))
	switch {
	case v.IsNull():
		return nil, false, nil
	case v.Kind == resp3.BlobString:
		return v.Str, true, nil
	}
	return nil, false, fmt.Errorf("GET %s: %s", key, v.Str)
}

func (e engineKeys) set(_ context.Context, key string, value []byte) error {
	if v := e.do([]byte("SET"), []byte(key), value); v.Kind == resp3.SimpleError || v.Kind == resp3.BlobError {
		return fmt.Errorf("SET %s: %s", key, v.Str)
	}
	return nil
}

type signalWatcher struct{ c chan struct{} }

func (w *signalWatcher) Notify(string, statestore.Op, []byte, hlc.Timestamp) {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

func (e engineKeys) watch(_ context.Context, key string) (<-chan struct{}, func(), error) {
	w := &signalWatcher{c: make(chan struct{}, 1)}
	cmd := resp3.AppendArrayHeader(nil, 2)
	cmd = resp3.AppendBlobString(cmd, "KEYNOTIFY")
	cmd = resp3.AppendBlobString(cmd, key)
	reply, _ := e.st.Do(&statestore.Request{Payload: cmd, Timestamp: e.clock.Now().String(), HasTimestamp: true, Watcher: w}, nil)
	if v, _, err := resp3.ReadValue(reply); err != nil || v.Kind != resp3.SimpleString {
		return nil, nil, fmt.Errorf("KEYNOTIFY %s: %q", key, reply)
	}
	return w.c, func() { e.st.Unwatch(w) }, nil
}

// clientKeys reaches an external store through agent/store, whose watches survive
// reconnects (a change missed while away arrives as a Resync notification).
type clientKeys struct{ c *store.Client }

func (k clientKeys) get(ctx context.Context, key string) ([]byte, bool, error) {
	e, err := k.c.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	return e.Value, err == nil, err
}

func (k clientKeys) set(ctx context.Context, key string, value []byte) error {
	_, err := k.c.Set(ctx, key, value, nil)
	return err
}

func (k clientKeys) watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	w, err := k.c.KeyNotify(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	out := make(chan struct{}, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case _, ok := <-w.C():
				if !ok {
					return
				}
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, func() {
		close(done)
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.Stop(sctx)
		cancel()
		wg.Wait()
	}, nil
}

// ControlCommand is the JSON value of faceagent/{gw}/control. Each id is executed once:
// rewriting the key with the same id does nothing, across restarts too.
//
//	{"id":"c-17","command":"pause","device":"2042253"}
//
// Commands: pause and resume (a device), retry-failed and purge-failed (a device, or
// every device when "device" is empty), drain (refuse new tasks: they are dead-lettered
// with the reason, queued ones still go out) and undrain. retry-failed skips a failure a
// later command for the same person has made obsolete: retrying an AddPerson after its
// DeletePerson would put the person back (outbox.RetryFailed).
type ControlCommand struct {
	ID      string `json:"id"`
	Command string `json:"command"`
	Device  string `json:"device,omitempty"`
}

// remoteStatus is written to …/config/status and …/control/status.
type remoteStatus struct {
	ID      string `json:"id,omitempty"`
	OK      bool   `json:"ok"`
	Result  string `json:"result,omitempty"`
	Error   string `json:"error,omitempty"`
	At      string `json:"at"`
	Applied string `json:"applied,omitempty"` // config: the effective [dispatch], as TOML-ish text
}

// remote applies faceagent/{gw}/config and executes faceagent/{gw}/control.
type remote struct {
	keys    keyStore
	a       *Agent
	ob      *outbox.Outbox
	take    *intake.Taker
	prefix  string // faceagent/{gw}/
	doneLog string // file of executed control ids
	log     *slog.Logger
	done    []string
	wg      sync.WaitGroup
}

const maxDoneIDs = 256

// start runs remote management on its own goroutine. Registering the watches is retried
// with backoff while the store is away (an external store), so start-up never waits for it.
func (r *remote) start(ctx context.Context) {
	if b, err := os.ReadFile(r.doneLog); err == nil {
		_ = json.Unmarshal(b, &r.done)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		var cfgC, ctlC <-chan struct{}
		for delay := 100 * time.Millisecond; ; delay = min(2*delay, 30*time.Second) {
			var stopCfg, stopCtl func()
			var err error
			if cfgC, stopCfg, err = r.keys.watch(ctx, r.prefix+"config"); err == nil {
				if ctlC, stopCtl, err = r.keys.watch(ctx, r.prefix+"control"); err == nil {
					defer stopCfg()
					defer stopCtl()
					break
				}
				stopCfg()
			}
			r.log.Warn("remote config and control unavailable; retrying", "err", err, "in", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
		}
		r.applyConfig(ctx)
		r.control(ctx)
		for {
			select {
			case <-ctx.Done():
				return
			case <-cfgC:
				r.applyConfig(ctx)
			case <-ctlC:
				r.control(ctx)
			}
		}
	}()
}

func (r *remote) status(ctx context.Context, key string, st remoteStatus) {
	st.At = time.Now().UTC().Format(time.RFC3339)
	b, _ := json.Marshal(st)
	if err := r.keys.set(ctx, key, b); err != nil {
		r.log.Warn("writing status failed", "key", key, "err", err)
	}
}

func (r *remote) applyConfig(ctx context.Context) {
	v, _, err := r.keys.get(ctx, r.prefix+"config")
	if err != nil {
		r.log.Warn("reading remote config failed", "err", err)
		return
	}
	if err := r.a.setOverride(v); err != nil {
		r.log.Warn("remote config refused; the running config stays", "err", err.Error())
		r.status(ctx, r.prefix+"config/status", remoteStatus{OK: false, Error: err.Error()})
		return
	}
	d := r.a.Config().Dispatch
	r.log.Info("remote config applied", "bytes", len(v))
	r.status(ctx, r.prefix+"config/status", remoteStatus{OK: true, Applied: fmt.Sprintf(
		"retry_interval=%s max_tries=%d heartbeat_timeout=%s backoff_max=%s",
		d.RetryInterval.Duration, d.MaxTries, d.HeartbeatTimeout.Duration, d.BackoffMax.Duration)})
}

func (r *remote) control(ctx context.Context) {
	v, found, err := r.keys.get(ctx, r.prefix+"control")
	if err != nil || !found {
		if err != nil {
			r.log.Warn("reading control key failed", "err", err)
		}
		return
	}
	var c ControlCommand
	if err := json.Unmarshal(v, &c); err != nil || c.ID == "" {
		r.status(ctx, r.prefix+"control/status", remoteStatus{OK: false, Error: fmt.Sprintf("want {\"id\":…,\"command\":…,\"device\":…}: %v", err)})
		return
	}
	if slices.Contains(r.done, c.ID) {
		return // executed already: idempotent by id
	}
	result, err := r.execute(c)
	st := remoteStatus{ID: c.ID, OK: err == nil, Result: result}
	if err != nil {
		st.Error = err.Error()
	}
	r.done = append(r.done, c.ID)
	if len(r.done) > maxDoneIDs {
		r.done = r.done[len(r.done)-maxDoneIDs:]
	}
	if err := writeFileAtomic(r.doneLog, r.done); err != nil {
		r.log.Warn("recording executed control ids failed", "err", err)
	}
	r.log.Info("control command", "id", c.ID, "command", c.Command, "device", c.Device, "result", result, "err", err)
	r.status(ctx, r.prefix+"control/status", st)
}

func (r *remote) execute(c ControlCommand) (string, error) {
	needDevice := func() error {
		if c.Device == "" {
			return fmt.Errorf("%s needs a device", c.Command)
		}
		if r.a.Config().Device(c.Device) == nil {
			return fmt.Errorf("unknown device %q", c.Device)
		}
		return nil
	}
	switch c.Command {
	case "pause", "resume":
		if err := needDevice(); err != nil {
			return "", err
		}
		if c.Command == "pause" {
			return "paused", r.ob.Pause(c.Device)
		}
		return "resumed", r.ob.Resume(c.Device)
	case "retry-failed":
		n, err := r.ob.RetryFailed(c.Device)
		return fmt.Sprintf("%d commands scheduled again", n), err
	case "purge-failed":
		n, err := r.ob.PurgeFailed(c.Device)
		return fmt.Sprintf("%d failed commands purged", n), err
	case "drain":
		r.take.SetDraining(true)
		return "draining: new tasks are dead-lettered", nil
	case "undrain":
		r.take.SetDraining(false)
		return "taking tasks again", nil
	}
	return "", fmt.Errorf("unknown command %q (pause, resume, retry-failed, purge-failed, drain, undrain)", c.Command)
}

func writeFileAtomic(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Clean(path))
}

// setOverride applies a remote override on top of the file's configuration and pushes
// what changed to the running parts. An empty override clears earlier ones.
func (a *Agent) setOverride(v []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	next, err := config.ApplyOverrides(a.fileCfg, v)
	if err != nil {
		return err
	}
	a.override = v
	a.cfg = next
	a.applyLiveLocked()
	return nil
}

// applyLiveLocked pushes the live-changeable settings of a.cfg to the outbox.
func (a *Agent) applyLiveLocked() {
	ob := a.outbox.Load()
	if ob == nil {
		return
	}
	ob.SetSettings(settings(a.cfg.Dispatch))
	for _, d := range a.cfg.Devices {
		ob.SetDevice(d.ID, deviceConfig(&d))
	}
}
