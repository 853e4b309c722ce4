package agent

import (
	"log/slog"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/intake"
)

// newTaker maps [intake] and the configured terminals onto the taker's options.
func newTaker(cfg *config.Config, m *intake.Metrics, log *slog.Logger) *intake.Taker {
	ids := make([]string, len(cfg.Devices))
	for i, d := range cfg.Devices {
		ids[i] = d.ID
	}
	maxWhitelist := cfg.Intake.MaxWhitelist
	if !cfg.Whitelist.Reconcile {
		maxWhitelist = 0 // nothing would bring a SetWhitelist to its result
	}
	return intake.NewTaker(intake.Options{
		MaxBatch:       cfg.Intake.MaxBatch,
		MaxMessageSize: int(cfg.Intake.MaxMessageSize),
		MaxWhitelist:   maxWhitelist,
		Devices:        ids,
		Logger:         log,
	}, m)
}
