// Package report is what the agent reports upstream, each part built on the same drain
// loop (agent/backlog) and published in order through a publish.Publisher:
//
//   - Reporter: each finished task's result on faceagent/{gw}/results, read from the
//     outbox (whose journal is the results' backlog: the outbox is the tasks' durable
//     source of truth) and marked reported there once accepted upstream — and POSTed to
//     the back office too with a Poster.
//   - DeadLetters: what the intake refused, on faceagent/{gw}/deadletter; a durable,
//     bounded backlog in data_dir/deadletter. The intake asks Room, then Adds and waits.
//   - Forwarder: the terminals' acks and heartbeats on faceagent/{gw}/devices/{id}/ack and
//     …/heartbeat; a write-behind backlog in data_dir/forward, keyed by device, where a
//     heartbeat replaces the device's older one and the oldest acks give way at the bound.
//   - SyncReports: whitelist sync reports (started, done, failed) on
//     faceagent/{gw}/devices/{id}/sync; a durable backlog in data_dir/syncreports, keyed by
//     device, whose oldest reports give way at the bound (the reconciler's Reporter).
//
// What a part needs of others is an interface declared here (Outbox, State, Poster); the
// topics and bounds come in each part's Options, and each part has its own Metrics
// (NewDeadLetterMetrics, NewForwardMetrics, NewResultMetrics, NewSyncReportMetrics: the
// faceagent_deadletter_*, faceagent_forward_*, faceagent_forwarded_total,
// faceagent_results_total and faceagent_sync_reports_* series).
//
// # Tutorial
//
//	dead, err := report.OpenDeadLetters(filepath.Join(dataDir, report.DeadLetterDir), report.DeadLetterOptions{
//		Journal: jo, Topic: "faceagent/gw-01/deadletter", Metrics: report.NewDeadLetterMetrics(reg)})
//	fwd, err := report.OpenForwarder(filepath.Join(dataDir, report.ForwardDir), report.ForwardOptions{
//		Journal: jo, Prefix: "faceagent/gw-01/devices/", Metrics: report.NewForwardMetrics(reg)})
//	rep := report.NewReporter(ob, report.ResultOptions{Topic: "faceagent/gw-01/results", State: sw})
//	dead.Start(ctx, pub); fwd.Start(ctx, pub); rep.Start(ctx, pub)
//	// intake: if err := dead.Room(n, size); err == nil { err = dead.Add(payloads) }
//	// device events: fwd.Ack(id, ack); fwd.Heartbeat(id, hb)
//	cancel(); dead.Wait(); fwd.Wait(); rep.Wait(); dead.Close(); fwd.Close()
//
// # What holds
//
//   - Every part publishes in order and marks reported only the prefix the publisher
//     accepted and stored (agent/backlog, "Invariants"): at least once, never lost, first
//     copies in order. A result is marked reported only once the Poster took it too.
//   - A deadletter Add returned nil for survives a crash; the task message is acknowledged
//     only after it. A message whose deadletters do not fit (DeadLetterOptions'
//     MaxCount and MaxBytes: [intake] max_deadletters and max_deadletter_bytes, by
//     default MaxDeadLetters and MaxDeadLetterBytes) is refused whole (ErrDeadLetterBacklog) and delivered again.
//   - Ack and Heartbeat never wait for the disk or the upstream broker. A crash loses the
//     forwarded messages of the last ForwardWriteDelay not yet accepted (the results carry
//     every task's outcome). The backlog holds at most ForwardOptions' MaxCount messages
//     and MaxBytes ([reports] max_forwarded and max_forwarded_bytes, by default
//     MaxForwarded and MaxForwardedBytes); at the bound the oldest acks are dropped, and a heartbeat is
//     refused only when no ack is left (faceagent_forward_dropped_total{reason}).
//   - A sync report is journalled (durable) before SyncReport returns, which never waits
//     for the upstream broker. The backlog holds at most SyncReportOptions' MaxCount and
//     MaxBytes ([reports] max_sync_reports and max_sync_report_bytes); at the bound the
//     oldest reports are dropped (faceagent_sync_reports_dropped_total{reason}).
//
// # Caveats
//
//   - The record formats are agent/backlog's: data_dir/deadletter and data_dir/forward
//     written before this package replay as they are.
//   - A result already accepted upstream may be published again after a crash (the
//     outbox's reported mark is lazy), and so may a deadletter or a forwarded message.
//   - Results are encoded here (resultJSON: byte for byte what encoding/json writes for
//     wire.Result), not in agent/wire: the mapping starts from the outbox's Result.
package report
