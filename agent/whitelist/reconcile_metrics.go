package whitelist

import (
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// Metrics are the reconciler's series (faceagent_sync_*). A nil *Metrics, or a nil field,
// records nothing. How many terminals are in sync is the device state's series
// (faceagent_terminals_in_sync, agent/devstate): judged the same way from the heartbeat and
// the queue, and kept whether or not reconciliation runs.
type Metrics struct {
	// Drift counts drift noticed, by reason (serial, digest, count) and requests
	// (setWhitelist): once each time a reason becomes pending, not once a heartbeat.
	Drift *metrics.CounterVec
	// Reconciliations counts the reconciliations that ended, by outcome (done, failed).
	Reconciliations *metrics.CounterVec
	// Seconds is how long reconciliations took, from started to done or failed (time
	// paused for tasks included).
	Seconds *metrics.Histogram
}

// ReconcileBuckets are the duration buckets of Metrics.Seconds, in seconds: a terminal in
// step needs one page, a factory-reset one of 100,000 persons as many commands.
var ReconcileBuckets = []float64{0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400}

// NewMetrics registers the reconciler's series in r.
func NewMetrics(r *metrics.Registry) *Metrics {
	return &Metrics{
		Drift: r.NewCounterVec("faceagent_sync_drift_total",
			"Drift noticed (serial, digest, count) and reconciliations requested (setWhitelist), by reason.", "reason"),
		Reconciliations: r.NewCounterVec("faceagent_sync_reconciliations_total",
			"Reconciliations that ended, by outcome (done, failed).", "outcome"),
		Seconds: r.NewHistogram("faceagent_sync_reconcile_seconds",
			"Duration of reconciliations, from started to done or failed.", ReconcileBuckets),
	}
}

func (m *Metrics) drift(reason wire.SyncReason) {
	if m != nil && m.Drift != nil {
		m.Drift.With(string(reason)).Inc()
	}
}

func (m *Metrics) ended(status wire.SyncStatus, seconds float64) {
	if m == nil {
		return
	}
	if m.Reconciliations != nil {
		m.Reconciliations.With(string(status)).Inc()
	}
	if m.Seconds != nil {
		m.Seconds.Observe(seconds)
	}
}
