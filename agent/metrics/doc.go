// Package metrics is a small Prometheus text-format (0.0.4) registry for faceagent's
// /metrics: counters, gauges, gauge functions, one-label families (per device) and
// fixed-bucket histograms, lock-free on the hot path (atomics); the process's memory series
// (RegisterProcess); and the bounded HTTP server that serves them (NewServer: timeouts, and
// connections beyond a limit closed at accept).
//
// It is hand-written rather than imported: the agent needs a dozen series, the format is a
// page of text, and the client libraries (prometheus/client_golang; even the small
// VictoriaMetrics/metrics) bring dependencies and binary size to an ARM gateway for
// features it does not use (summaries, push, process collectors).
//
// # Tutorial
//
//	reg := metrics.NewRegistry()
//	acks := reg.NewCounterVec("faceagent_acks_total", "Acks received from terminals.", "device")
//	fsync := reg.NewHistogram("faceagent_journal_fsync_seconds", "Journal fsync latency.", metrics.DefaultLatencyBuckets)
//	acks.With("2042253").Inc()
//	fsync.Observe(0.004)
//	http.Handle("/metrics", reg.Handler())
//
// # Caveats
//
//   - One label per family at most; that is all the agent needs (device).
//   - Registering an invalid or duplicate name panics: it is a programming error, caught
//     by any test that builds the agent.
//   - A scrape formats everything into one buffer: fine for hundreds of series, not for
//     hundreds of thousands.
package metrics
