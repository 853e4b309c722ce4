package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/kv"
)

// ControlCommand is the JSON value of faceagent/{gw}/control. Each id is executed once:
// rewriting the key with the same id does nothing, across restarts too.
//
//	{"id":"c-17","command":"pause","device":"2042253"}
//
// Commands: pause and resume (a device), retry-failed and purge-failed (a device, or
// every device when "device" is empty), drain (refuse new tasks: they are dead-lettered
// with the reason, queued ones still go out) and undrain. retry-failed skips a failure a
// later command for the same person has made obsolete: retrying an AddPerson after its
// DeletePerson would put the person back (outbox.RetryFailed). resync (a device, or every
// device when "device" is empty) reconciles a terminal's whitelist now, whatever its last
// heartbeat said (Options.Resync; refused when whitelist sync is off).
type ControlCommand struct {
	ID      string `json:"id"`
	Command string `json:"command"`
	Device  string `json:"device,omitempty"`
}

// Status is the JSON value written to faceagent/{gw}/config/status and
// faceagent/{gw}/control/status.
type Status struct {
	ID      string `json:"id,omitempty"` // control: the command's id
	OK      bool   `json:"ok"`
	Result  string `json:"result,omitempty"`
	Error   string `json:"error,omitempty"`
	At      string `json:"at"`                // RFC 3339, UTC
	Applied string `json:"applied,omitempty"` // config: the effective settings (Options.ApplyConfig)
}

// Outbox is what the control commands act on (agent/outbox's Outbox).
type Outbox interface {
	Pause(deviceID string) error
	Resume(deviceID string) error
	// RetryFailed and PurgeFailed act on one device, or on every device for "".
	RetryFailed(deviceID string) (int, error)
	PurgeFailed(deviceID string) (int, error)
}

// Options configure remote management.
type Options struct {
	// Store holds the keys: Prefix+"config" and Prefix+"control" are read and watched,
	// Prefix+"config/status" and Prefix+"control/status" written.
	Store kv.Store
	// Prefix is faceagent/{gw}/.
	Prefix string
	// DoneLog is the file that keeps the ids of the executed control commands (the last
	// MaxDoneIDs) across restarts.
	DoneLog string
	// Log receives what was applied and executed, and failures. Default: discard.
	Log *slog.Logger

	// ApplyConfig applies the value of the config key as an override of the running
	// configuration (empty or missing: no override) and returns the effective settings,
	// as text for the status; an error refuses it, and the running configuration stays.
	ApplyConfig func(override []byte) (applied string, err error)
	// KnownDevice reports whether id is a configured device (pause and resume of an
	// unknown one are refused).
	KnownDevice func(id string) bool
	// Outbox executes pause, resume, retry-failed and purge-failed.
	Outbox Outbox
	// SetDraining executes drain (true) and undrain (false): while draining, intake
	// dead-letters new tasks.
	SetDraining func(on bool)
	// Resync executes resync: a reconciliation of the terminal's whitelist, or of every
	// configured terminal's for ""; it returns how many were asked. Nil: whitelist sync is
	// off, and resync is refused.
	Resync func(deviceID string) int
}

// MaxDoneIDs is how many executed control ids the done log keeps.
const MaxDoneIDs = 256

// Remote applies faceagent/{gw}/config and executes faceagent/{gw}/control.
type Remote struct {
	o   Options
	log *slog.Logger
	// execMu makes commands run one at a time, from the control key and from Execute.
	execMu sync.Mutex
	done   []string // executed control ids, oldest first; the loop's own
	wg     sync.WaitGroup
}

// New prepares remote management; Start runs it.
func New(o Options) *Remote {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Remote{o: o, log: log}
}

// Start runs remote management on its own goroutine until ctx ends; Wait waits for it.
// It reads the done log, watches both keys, then applies the config key and executes
// the control key as they are, and again on every change. Registering the watches is
// retried with backoff (0.1 s doubling up to 30 s) while the store is away (an external
// store), so start-up never waits for it.
func (r *Remote) Start(ctx context.Context) {
	if b, err := os.ReadFile(r.o.DoneLog); err == nil {
		_ = json.Unmarshal(b, &r.done)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		var cfgC, ctlC <-chan struct{}
		for delay := 100 * time.Millisecond; ; delay = min(2*delay, 30*time.Second) {
			var stopCfg, stopCtl func()
			var err error
			if cfgC, stopCfg, err = r.o.Store.Watch(ctx, r.o.Prefix+"config"); err == nil {
				if ctlC, stopCtl, err = r.o.Store.Watch(ctx, r.o.Prefix+"control"); err == nil {
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

// Wait returns once the goroutine Start began has ended.
func (r *Remote) Wait() { r.wg.Wait() }

func (r *Remote) status(ctx context.Context, key string, st Status) {
	st.At = time.Now().UTC().Format(time.RFC3339)
	b, _ := json.Marshal(st)
	if err := r.o.Store.Set(ctx, key, b, 0); err != nil {
		r.log.Warn("writing status failed", "key", key, "err", err)
	}
}

func (r *Remote) applyConfig(ctx context.Context) {
	v, _, err := r.o.Store.Get(ctx, r.o.Prefix+"config")
	if err != nil {
		r.log.Warn("reading remote config failed", "err", err)
		return
	}
	applied, err := r.o.ApplyConfig(v)
	if err != nil {
		r.log.Warn("remote config refused; the running config stays", "err", err.Error())
		r.status(ctx, r.o.Prefix+"config/status", Status{OK: false, Error: err.Error()})
		return
	}
	r.log.Info("remote config applied", "bytes", len(v))
	r.status(ctx, r.o.Prefix+"config/status", Status{OK: true, Applied: applied})
}

func (r *Remote) control(ctx context.Context) {
	v, found, err := r.o.Store.Get(ctx, r.o.Prefix+"control")
	if err != nil || !found {
		if err != nil {
			r.log.Warn("reading control key failed", "err", err)
		}
		return
	}
	var c ControlCommand
	if err := json.Unmarshal(v, &c); err != nil || c.ID == "" {
		r.status(ctx, r.o.Prefix+"control/status", Status{OK: false, Error: fmt.Sprintf("want {\"id\":…,\"command\":…,\"device\":…}: %v", err)})
		return
	}
	if slices.Contains(r.done, c.ID) {
		return // executed already: idempotent by id
	}
	result, err := r.Execute(c)
	st := Status{ID: c.ID, OK: err == nil, Result: result}
	if err != nil {
		st.Error = err.Error()
	}
	r.done = append(r.done, c.ID)
	if len(r.done) > MaxDoneIDs {
		r.done = r.done[len(r.done)-MaxDoneIDs:]
	}
	if err := writeFileAtomic(r.o.DoneLog, r.done); err != nil {
		r.log.Warn("recording executed control ids failed", "err", err)
	}
	r.log.Info("control command", "id", c.ID, "command", c.Command, "device", c.Device, "result", result, "err", err)
	r.status(ctx, r.o.Prefix+"control/status", st)
}

// Execute runs one control command now, as the control key would (its ID is not used:
// the caller logs and answers it), and returns its result text. The operator's page calls
// it; commands run one at a time whoever sends them.
func (r *Remote) Execute(c ControlCommand) (string, error) {
	r.execMu.Lock()
	defer r.execMu.Unlock()
	needDevice := func() error {
		if c.Device == "" {
			return fmt.Errorf("%s needs a device", c.Command)
		}
		if !r.o.KnownDevice(c.Device) {
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
			return "paused", r.o.Outbox.Pause(c.Device)
		}
		return "resumed", r.o.Outbox.Resume(c.Device)
	case "retry-failed":
		n, err := r.o.Outbox.RetryFailed(c.Device)
		return count(n, "command", "commands") + " scheduled again", err
	case "purge-failed":
		n, err := r.o.Outbox.PurgeFailed(c.Device)
		return count(n, "failed command", "failed commands") + " purged", err
	case "drain":
		r.o.SetDraining(true)
		return "draining: new tasks are dead-lettered", nil
	case "undrain":
		r.o.SetDraining(false)
		return "taking tasks again", nil
	case "resync":
		if r.o.Resync == nil {
			return "", errors.New("resync: whitelist sync is off (whitelist.reconcile)")
		}
		if c.Device != "" && !r.o.KnownDevice(c.Device) {
			return "", fmt.Errorf("unknown device %q", c.Device)
		}
		return count(r.o.Resync(c.Device), "terminal", "terminals") + " to reconcile", nil
	}
	return "", fmt.Errorf("unknown command %q (pause, resume, retry-failed, purge-failed, drain, undrain, resync)", c.Command)
}

// count is n with its noun: "1 command", "0 commands", "2 commands".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// writeFileAtomic writes v as JSON to path through a fsynced temporary file renamed over
// it: a crash leaves the old file or the new one, never a torn one.
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
