package agent

import (
	"io"
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/seed0e69bba5/faceagent/agent/config"
)

// NewLogger builds the slog logger [log] asks for, writing to w. The returned LevelVar
// lets a reload change the level of the running logger; the format needs a restart.
func NewLogger(c config.Log, w io.Writer) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	level.Set(ParseLevel(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if c.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h), level
}

// ParseLevel maps a validated [log] level to slog's.
func ParseLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// ApplyMemoryLimit sets the Go runtime's soft memory limit from agent.gomemlimit (the
// file's or the board's). The GOMEMLIMIT environment variable wins, as the runtime's
// documentation promises operators. It returns the limit in force and where it came from.
func ApplyMemoryLimit(c config.Agent) (limit int64, source string) {
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	}
	if c.GoMemLimit > 0 {
		debug.SetMemoryLimit(int64(c.GoMemLimit))
		return int64(c.GoMemLimit), "config"
	}
	return debug.SetMemoryLimit(-1), "unset"
}
