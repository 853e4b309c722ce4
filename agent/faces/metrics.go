package faces

import "github.com/seed0e69bba5/faceagent/agent/metrics"

// Metrics are the face store's series (faceagent_faces_*). A nil *Metrics, or a nil
// field, records nothing.
type Metrics struct {
	Held         *metrics.Gauge      // faces held
	Bytes        *metrics.Gauge      // their sizes, summed
	Puts         *metrics.Counter    // faces stored
	HashFailures *metrics.Counter    // faces refused or removed for not hashing to their sha256
	Removed      *metrics.CounterVec // faces removed, by reason (unreferenced, damaged)
}

// NewMetrics registers the store's series in r.
func NewMetrics(r *metrics.Registry) *Metrics {
	return &Metrics{
		Held:         r.NewGauge("faceagent_faces", "Faces held in the gateway's face store."),
		Bytes:        r.NewGauge("faceagent_faces_bytes", "Bytes of the faces held (their sizes, summed)."),
		Puts:         r.NewCounter("faceagent_faces_puts_total", "Faces stored (a face already held is not stored again)."),
		HashFailures: r.NewCounter("faceagent_faces_hash_failures_total", "Faces refused or removed because their data did not hash to their sha256."),
		Removed: r.NewCounterVec("faceagent_faces_removed_total",
			"Faces removed, by reason: unreferenced (no desired person refers to them), damaged (found changed on disk).", "reason"),
	}
}

func (m *Metrics) held(n int, bytes int64) {
	if m == nil {
		return
	}
	if m.Held != nil {
		m.Held.Set(float64(n))
	}
	if m.Bytes != nil {
		m.Bytes.Set(float64(bytes))
	}
}

func (m *Metrics) put() {
	if m != nil && m.Puts != nil {
		m.Puts.Inc()
	}
}

func (m *Metrics) hashFailure() {
	if m != nil && m.HashFailures != nil {
		m.HashFailures.Inc()
	}
}

func (m *Metrics) removedFace(reason string) {
	if m != nil && m.Removed != nil {
		m.Removed.With(reason).Inc()
	}
}
