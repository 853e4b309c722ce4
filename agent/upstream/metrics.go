package upstream

import "github.com/seed0e69bba5/faceagent/agent/metrics"

// Metrics are the connection's series.
type Metrics struct {
	// Up is 1 while connected and subscribed to the tasks, 0 from a loss until then.
	Up *metrics.Gauge
	// Connects counts connections on which the tasks were subscribed.
	Connects *metrics.Counter
}

// NewMetrics registers the connection's series in r.
func NewMetrics(r *metrics.Registry) *Metrics {
	return &Metrics{
		Up:       r.NewGauge("faceagent_upstream_connected", "1 while connected and subscribed to the external upstream broker."),
		Connects: r.NewCounter("faceagent_upstream_connects_total", "Connections (and subscriptions) to the external upstream broker."),
	}
}
