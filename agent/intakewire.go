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
	return intake.NewTaker(intake.Options{
		MaxBatch:       cfg.Intake.MaxBatch,
		MaxMessageSize: int(cfg.Intake.MaxMessageSize),
		Devices:        ids,
		Logger:         log,
	}, m)
}
