package agent

import (
	"runtime"
	"time"
)

// registerMetrics declares the agent's series. Parts that land later (outbox, links,
// store writer) add theirs next to these; names are faceagent_<what>[_unit][_total].
func (a *Agent) registerMetrics() {
	r := a.registry
	r.NewGaugeVec("faceagent_build_info", "Always 1; the label is the build's version.", "version").With(a.version).Set(1)
	start := time.Now()
	r.NewGaugeFunc("faceagent_uptime_seconds", "Seconds since the agent started.", func() float64 {
		return time.Since(start).Seconds()
	})
	r.NewGaugeFunc("faceagent_up", "1 while the agent runs and its parts are healthy.", func() float64 {
		if a.Healthy() == nil {
			return 1
		}
		return 0
	})
	r.NewGaugeFunc("faceagent_goroutines", "Goroutines in the process.", func() float64 {
		return float64(runtime.NumGoroutine())
	})
}
