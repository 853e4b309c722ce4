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

// deadLetters is the deadletter log as intake's DeadLetters.
type deadLetters struct{ d *deadLetterLog }

func (d deadLetters) Room(n, size int) error         { return d.d.room(n, size) }
func (d deadLetters) Add(deadletters [][]byte) error { return d.d.add(deadletters) }
