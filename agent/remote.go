package agent

import (
	"fmt"
	"path/filepath"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/agent/kv"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/remote"
)

// newRemote maps the configuration onto remote management (agent/remote): the remote
// override goes to setOverride, the control commands to the outbox and the taker.
func (a *Agent) newRemote(cfg *config.Config, keys kv.Store, ob *outbox.Outbox, take *intake.Taker, ws *whitelistSync) *remote.Remote {
	var resync func(string) int
	if cfg.Whitelist.Reconcile {
		resync = ws.resync
	}
	return remote.New(remote.Options{
		Store:   keys,
		Prefix:  "faceagent/" + cfg.Agent.GatewayID + "/",
		DoneLog: filepath.Join(cfg.Agent.DataDir, "control-done.json"),
		Log:     a.log.With("part", "remote"),
		ApplyConfig: func(override []byte) (string, error) {
			if err := a.setOverride(override); err != nil {
				return "", err
			}
			d := a.Config().Dispatch
			return fmt.Sprintf("retry_interval=%s max_tries=%d heartbeat_timeout=%s backoff_max=%s",
				d.RetryInterval.Duration, d.MaxTries, d.HeartbeatTimeout.Duration, d.BackoffMax.Duration), nil
		},
		KnownDevice: func(id string) bool { return a.Config().Device(id) != nil },
		Outbox:      ob,
		SetDraining: take.SetDraining,
		Resync:      resync,
	})
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
	for i := range a.cfg.Devices {
		ob.SetDevice(a.cfg.Devices[i].ID, deviceConfig(a.cfg, &a.cfg.Devices[i]))
	}
}
