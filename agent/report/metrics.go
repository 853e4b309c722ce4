package report

import (
	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
)

// DeadLetterMetrics are the deadletter log's series.
type DeadLetterMetrics struct {
	Backlog   *metrics.Gauge   // deadletters journalled and not yet accepted upstream
	Published *metrics.Counter // deadletters accepted upstream
	Refused   *metrics.Counter // task messages not acknowledged: their deadletters did not fit
}

// NewDeadLetterMetrics registers the deadletter log's series in r.
func NewDeadLetterMetrics(r *metrics.Registry) *DeadLetterMetrics {
	return &DeadLetterMetrics{
		Backlog:   r.NewGauge("faceagent_deadletter_backlog", "Deadletters journalled and not yet accepted by the upstream broker."),
		Published: r.NewCounter("faceagent_deadletters_published_total", "Deadletters the upstream broker accepted."),
		Refused: r.NewCounter("faceagent_deadletter_backlog_refusals_total",
			"Task messages not acknowledged because their deadletters did not fit in the backlog (they are delivered again)."),
	}
}

func (m *DeadLetterMetrics) backlog() backlog.Metrics {
	if m == nil {
		return backlog.Metrics{}
	}
	return backlog.Metrics{Live: m.Backlog, Published: m.Published, Refused: m.Refused}
}

// ForwardMetrics are the forward log's series.
type ForwardMetrics struct {
	Backlog      *metrics.Gauge      // acks and heartbeats not yet accepted upstream
	BacklogBytes *metrics.Gauge      // their payloads' and device ids' bytes
	Forwarded    *metrics.CounterVec // accepted upstream, by kind: ack, heartbeat
	Dropped      *metrics.CounterVec // not forwarded, by reason: bound, refused, journal
	Coalesced    *metrics.Counter    // heartbeats a newer one of the same terminal replaced
}

// NewForwardMetrics registers the forward log's series in r.
func NewForwardMetrics(r *metrics.Registry) *ForwardMetrics {
	return &ForwardMetrics{
		Backlog: r.NewGauge("faceagent_forward_backlog",
			"Forwarded acks and heartbeats journalled and not yet accepted by the upstream broker."),
		BacklogBytes: r.NewGauge("faceagent_forward_backlog_bytes",
			"Bytes (payload and device id) of the forward backlog."),
		Forwarded: r.NewCounterVec("faceagent_forwarded_total",
			"Terminals' acks and heartbeats the upstream broker accepted, by kind.", "kind"),
		Dropped: r.NewCounterVec("faceagent_forward_dropped_total",
			"Acks and heartbeats not forwarded, by reason: bound (oldest ack dropped for room), refused (no ack left to drop), journal (the forward log failed).", "reason"),
		Coalesced: r.NewCounter("faceagent_forward_heartbeats_coalesced_total",
			"Heartbeats not yet sent that a newer heartbeat of the same terminal replaced."),
	}
}

func (m *ForwardMetrics) backlog() backlog.Metrics {
	if m == nil {
		return backlog.Metrics{}
	}
	return backlog.Metrics{Live: m.Backlog, Bytes: m.BacklogBytes, PublishedByKind: m.Forwarded, Dropped: m.Dropped, Coalesced: m.Coalesced}
}

// ResultMetrics are the reporter's series.
type ResultMetrics struct {
	Results *metrics.CounterVec // results reported upstream, by status
}

// NewResultMetrics registers the reporter's series in r.
func NewResultMetrics(r *metrics.Registry) *ResultMetrics {
	return &ResultMetrics{Results: r.NewCounterVec("faceagent_results_total", "Results reported upstream, by status.", "status")}
}
