package devstate

import "github.com/seed0e69bba5/faceagent/agent/metrics"

// Metrics are the writer's series.
type Metrics struct {
	// WriteSeconds is the round trip of each write.
	WriteSeconds *metrics.Histogram
	// WriteErrors counts the writes that failed, refused ones included.
	WriteErrors *metrics.Counter
	// WriteRefused counts the writes the store refused, by reason (fencing, quota, not_authorized, other).
	WriteRefused *metrics.CounterVec
	// DesiredPersons is each terminal's desired whitelist's length as last written, by
	// device.
	DesiredPersons *metrics.GaugeVec
	// InSync is how many terminals their last state said in sync: protocol 2 terminals
	// only, since a protocol 1 terminal is never in sync.
	InSync *metrics.Gauge
	// TerminalInSync is, by device, 1 while its last state said in sync and 0 while not,
	// for terminals whose last heartbeat said protocol 2 or later; a protocol 1 terminal
	// has no series (it cannot say what it holds, so it is never in sync), so an alert on
	// a 0 fires only for terminals that could be in sync and are not.
	TerminalInSync *metrics.GaugeVec
}

// NewMetrics registers the writer's series in r.
func NewMetrics(r *metrics.Registry) *Metrics {
	return &Metrics{
		WriteSeconds: r.NewHistogram("faceagent_store_write_seconds", "Round trip of a device state write to the state store.", metrics.DefaultLatencyBuckets),
		WriteErrors:  r.NewCounter("faceagent_store_write_errors_total", "Device state writes that failed (retried later)."),
		WriteRefused: r.NewCounterVec("faceagent_store_write_refused_total",
			"Device state writes the state store refused (answered -ERR; counted in faceagent_store_write_errors_total too), by reason: fencing, quota, not_authorized, other. /healthz names the devices.", "reason"),
		DesiredPersons: r.NewGaugeVec("faceagent_desired_persons",
			"Persons on the terminal's desired whitelist, as its state last said.", "device"),
		InSync: r.NewGauge("faceagent_terminals_in_sync",
			"Terminals whose last heartbeat (protocol 2) carried their desired whitelist's digest, with nothing queued or in flight for them."),
		TerminalInSync: r.NewGaugeVec("faceagent_terminal_in_sync",
			"1 while the terminal's last heartbeat carried its desired whitelist's digest with nothing queued or in flight for it, else 0; only for terminals whose last heartbeat said protocol 2 or later.", "device"),
	}
}
