package agent

import (
	"runtime"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/agent/devstate"
	"github.com/seed0e69bba5/faceagent/agent/faces"
	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/ui"
	"github.com/seed0e69bba5/faceagent/agent/upstream"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
)

// agentMetrics are the agent's series; names are faceagent_<what>[_unit][_total].
type agentMetrics struct {
	queued    *metrics.GaugeVec // by device
	inFlight  *metrics.GaugeVec
	online    *metrics.GaugeVec
	sent      *metrics.CounterVec
	succeeded *metrics.CounterVec
	failed    *metrics.CounterVec
	retries   *metrics.CounterVec
	upstream  *upstream.Metrics
	// state are the device state writer's series (faceagent_store_write_*).
	state *devstate.Metrics
	// The embedded state store's bounds (agent/broker/statestore Stats).
	storeBytes      *metrics.Gauge
	storeKeys       *metrics.Gauge
	storeWatches    *metrics.Gauge
	storeRefused    *metrics.CounterVec // by bound
	journalRecords  *metrics.Counter
	journalBytes    *metrics.Counter
	journalBatches  *metrics.Counter
	journalSegments *metrics.Gauge

	// The outbox's payload file (queued commands' payloads kept off the heap).
	payloadFileBytes *metrics.Gauge
	payloadsOnHeap   *metrics.Gauge
	payloadErrors    *metrics.CounterVec // by op: write, read, repair
	payloadRepairs   *metrics.Counter

	// The reports' series (agent/report).
	deadLetters *report.DeadLetterMetrics
	forward     *report.ForwardMetrics
	reports     *report.ResultMetrics
	syncReports *report.SyncReportMetrics
	// The whitelist reconciler's series (faceagent_sync_*).
	reconcile *whitelist.Metrics
	// The face store's series (faceagent_faces_*).
	faces *faces.Metrics
	// The embedded broker's bounds (agent/broker bounds.go): messages dropped for one
	// subscriber, held in a session, packets refused, by reason; bytes held.
	brokerDropped  *metrics.CounterVec
	brokerHeld     *metrics.Counter
	brokerRefused  *metrics.CounterVec
	brokerQueued   *metrics.Gauge
	brokerRetained *metrics.Gauge

	// journalFileBytes is the size of each journal's files, by journal: outbox, forward, syncreports,
	// deadletter, whitelist, broker_sessions.
	journalFileBytes *metrics.GaugeVec
	// The desired whitelists (agent/whitelist Stats).
	whitelistTerminals *metrics.Gauge
	whitelistRecords   *metrics.Gauge
	whitelistSetTasks  *metrics.Gauge

	// The embedded broker's sessions journal (agent/broker, "Persistence").
	sessionsLiveBytes   *metrics.Gauge
	sessionsWritable    *metrics.Gauge
	sessionsFailures    *metrics.Counter
	sessionsResets      *metrics.Counter
	sessionsRefused     *metrics.Counter
	sessionsCompactions *metrics.Counter

	// limits are the configured bounds the usage series are measured against, by config
	// key (faceagent_limit), so alerts compare usage with the bound in force.
	limits *metrics.GaugeVec
}

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
	metrics.RegisterProcess(r)
	a.intakeM = intake.NewMetrics(r)
	if a.cfg != nil && a.cfg.UI.Listen != "" {
		a.uiM = ui.NewMetrics(r)
	}
	a.m = &agentMetrics{
		reports:     report.NewResultMetrics(r),
		syncReports: report.NewSyncReportMetrics(r),
		reconcile:   whitelist.NewMetrics(r),
		faces:       faces.NewMetrics(r),
		queued:      r.NewGaugeVec("faceagent_queue_depth", "Commands waiting per terminal (not counting the one in flight).", "device"),
		inFlight:    r.NewGaugeVec("faceagent_in_flight", "1 while a command is in flight to the terminal.", "device"),
		online:      r.NewGaugeVec("faceagent_device_online", "1 while the terminal is online.", "device"),
		sent:        r.NewCounterVec("faceagent_commands_sent_total", "Commands sent to the terminal, resends included.", "device"),
		succeeded:   r.NewCounterVec("faceagent_commands_succeeded_total", "Commands the terminal acked with code 0.", "device"),
		failed:      r.NewCounterVec("faceagent_commands_failed_total", "Commands refused or out of tries.", "device"),
		retries:     r.NewCounterVec("faceagent_commands_retried_total", "Resends after an ack timeout.", "device"),
		upstream:    upstream.NewMetrics(r),
		state:       devstate.NewMetrics(r),
		storeBytes: r.NewGauge("faceagent_store_bytes",
			"Memory the embedded state store counts against store_max_bytes (keys, values, bookkeeping, KEYNOTIFY registrations)."),
		storeKeys:    r.NewGauge("faceagent_store_keys", "Keys in the embedded state store."),
		storeWatches: r.NewGauge("faceagent_store_registrations", "KEYNOTIFY registrations in the embedded state store."),
		storeRefused: r.NewCounterVec("faceagent_store_refused_total",
			"Requests the embedded state store refused with \"the quota has been exceeded\", by bound: keys, bytes, key_size, value_size, notify.", "bound"),
		journalRecords:  r.NewCounter("faceagent_journal_records_total", "Records appended to the outbox journal."),
		journalBytes:    r.NewCounter("faceagent_journal_bytes_total", "Bytes written to the outbox journal."),
		journalBatches:  r.NewCounter("faceagent_journal_fsyncs_total", "Write+fsync rounds of the journal (records/fsyncs is the group-commit factor)."),
		journalSegments: r.NewGauge("faceagent_journal_segments", "Live journal segment files."),

		payloadFileBytes: r.NewGauge("faceagent_outbox_payload_file_bytes",
			"Size of the outbox's payload file (queued commands' payloads, kept off the heap; rebuilt from the journal at start)."),
		payloadsOnHeap: r.NewGauge("faceagent_outbox_payloads_on_heap",
			"Queued payloads kept on the heap because the payload file could not be written (0 normally)."),
		payloadErrors: r.NewCounterVec("faceagent_outbox_payload_errors_total",
			"Payload file failures, by op: write (the payload stays on the heap), read (the payload is read again from the journal), repair (the journal could not give it back either: the command waits).", "op"),
		payloadRepairs: r.NewCounter("faceagent_outbox_payload_repairs_total",
			"Payloads the payload file failed to give back, read again from the journal while running."),

		deadLetters: report.NewDeadLetterMetrics(r),
		brokerDropped: r.NewCounterVec("faceagent_broker_dropped_total",
			"Messages the embedded broker dropped for one subscriber: pending_writes (a QoS 0 message, its write queue full), session_bytes (a QoS 1/2 message, its session full: max_session_bytes), queued_bytes (all sessions full: max_queued_bytes), inflight_quota (its session holds max_queued_messages).", "reason"),
		brokerHeld: r.NewCounter("faceagent_broker_held_total",
			"QoS 1/2 messages the embedded broker held in a subscriber's session instead of queueing them, its write queue full (max_pending_write_bytes); written once it empties, not lost."),
		brokerRefused: r.NewCounterVec("faceagent_broker_refused_total",
			"What the embedded broker refused for its bounds: clients (CONNECT, max_clients), subscriptions (SUBSCRIBE, max_subscriptions), session_bytes and queued_bytes (a subscription, will or QoS 2 message that did not fit), retained_bytes (a retained message not retained, max_retained_bytes).", "reason"),
		brokerQueued: r.NewGauge("faceagent_broker_queued_bytes",
			"Bytes the embedded broker's sessions hold (messages queued or in flight, subscriptions, wills), against max_queued_bytes."),
		brokerRetained: r.NewGauge("faceagent_broker_retained_bytes",
			"Bytes of the embedded broker's retained messages, against max_retained_bytes."),

		journalFileBytes: r.NewGaugeVec("faceagent_journal_file_bytes",
			"Bytes of each journal's files (snapshot and segments as written; the open segment's preallocated blocks not counted), by journal: outbox, forward, deadletter, syncreports, whitelist, broker_sessions.", "journal"),
		whitelistTerminals: r.NewGauge("faceagent_whitelist_terminals", "Terminals with a desired whitelist (against whitelist.max_terminals)."),
		whitelistSetTasks: r.NewGauge("faceagent_whitelist_set_tasks",
			"SetWhitelist tasks kept: pending, or finished with the result not yet reported (against whitelist.max_set_tasks)."),
		whitelistRecords: r.NewGauge("faceagent_whitelist_records",
			"Distinct person records across the desired whitelists (against whitelist.max_records)."),
		sessionsLiveBytes: r.NewGauge("faceagent_broker_sessions_live_bytes",
			"Bytes the embedded broker's live session records take in a snapshot of its sessions journal (kept sessions' clients, subscriptions, in-flight and queued messages, retained messages)."),
		sessionsWritable: r.NewGauge("faceagent_broker_sessions_journal_writable",
			"1 while the embedded broker's sessions journal takes writes; 0 while it refuses them (a full disk): messages for kept sessions, their subscriptions and connections are refused until it recovers by itself."),
		sessionsFailures: r.NewCounter("faceagent_broker_sessions_journal_failures_total",
			"Times the embedded broker's sessions journal began refusing writes (a failed write or fsync)."),
		sessionsResets: r.NewCounter("faceagent_broker_sessions_journal_recoveries_total",
			"Times the embedded broker's sessions journal was written anew from its live records and took writes again."),
		sessionsRefused: r.NewCounter("faceagent_broker_sessions_refused_writes_total",
			"Session records the embedded broker could not store (their publishers, subscriptions and connections were refused)."),
		sessionsCompactions: r.NewCounter("faceagent_broker_sessions_compactions_total",
			"Snapshots that replaced the embedded broker's sessions journal files."),

		forward: report.NewForwardMetrics(r),
		limits: r.NewGaugeVec("faceagent_limit",
			"The configured bound a usage series is measured against, by config key: dispatch.max_queue_total (sum of faceagent_queue_depth), intake.max_deadletters (faceagent_deadletter_backlog), reports.max_forwarded (faceagent_forward_backlog), reports.max_forwarded_bytes (faceagent_forward_backlog_bytes), reports.max_sync_reports (faceagent_sync_reports_backlog), whitelist.max_terminals and whitelist.max_records (faceagent_whitelist_*), and with [broker] broker.store_max_bytes (faceagent_store_bytes), broker.max_queued_bytes and broker.max_retained_bytes (faceagent_broker_*_bytes).", "key"),
	}
	r.NewGaugeFunc("faceagent_upstream_configured", "1 when the agent is configured with an external upstream broker ([upstream]); faceagent_upstream_connected means something only then.", func() float64 {
		cfg := a.Config()
		return b2f(cfg != nil && cfg.Upstream != nil)
	})
	r.OnScrape(a.scrapeLimits)
	r.OnScrape(a.scrapeOutbox)
	r.OnScrape(a.scrapeStore)
	r.OnScrape(a.scrapeJournals)
	r.OnScrape(a.scrapeBroker)
}

// scrapeLimits mirrors the bounds in force (a remote override may change [dispatch]).
func (a *Agent) scrapeLimits() {
	cfg := a.Config()
	if cfg == nil {
		return
	}
	l := a.m.limits
	l.With("dispatch.max_queue_total").Set(float64(cfg.Dispatch.MaxQueueTotal))
	l.With("intake.max_deadletters").Set(float64(cfg.Intake.MaxDeadLetters))
	l.With("reports.max_forwarded").Set(float64(cfg.Reports.MaxForwarded))
	l.With("reports.max_forwarded_bytes").Set(float64(cfg.Reports.MaxForwardedBytes))
	l.With("reports.max_sync_reports").Set(float64(cfg.Reports.MaxSyncReports))
	l.With("whitelist.max_terminals").Set(float64(cfg.Whitelist.MaxTerminals))
	l.With("whitelist.max_records").Set(float64(cfg.Whitelist.MaxRecords))
	if b := cfg.Broker; b != nil {
		l.With("broker.store_max_bytes").Set(float64(b.StoreMaxBytes))
		l.With("broker.max_queued_bytes").Set(float64(b.MaxQueuedBytes))
		l.With("broker.max_retained_bytes").Set(float64(b.MaxRetainedBytes))
	}
}

// scrapeBroker mirrors the embedded broker's bounds counters.
func (a *Agent) scrapeBroker() {
	b := a.brokerStats.Load()
	if b == nil {
		return
	}
	st := b.Stats()
	for reason, n := range map[string]int64{"pending_writes": st.DroppedPendingWrites, "session_bytes": st.DroppedSessionBytes,
		"queued_bytes": st.DroppedQueuedBytes, "inflight_quota": st.DroppedInflight} {
		a.m.brokerDropped.With(reason).Set(uint64(n))
	}
	a.m.brokerHeld.Set(uint64(st.HeldWrites))
	for reason, n := range map[string]int64{"clients": st.RefusedClients, "subscriptions": st.RefusedSubscriptions,
		"session_bytes": st.RefusedSessionBytes, "queued_bytes": st.RefusedQueuedBytes, "retained_bytes": st.RefusedRetainedBytes} {
		a.m.brokerRefused.With(reason).Set(uint64(n))
	}
	a.m.brokerQueued.Set(float64(st.QueuedBytes))
	a.m.brokerRetained.Set(float64(st.RetainedBytes))
}

// scrapeOutbox mirrors the outbox's per-device status into the gauges and counters.
func (a *Agent) scrapeOutbox() {
	ob := a.outbox.Load()
	if ob == nil {
		return
	}
	js := ob.JournalStats()
	a.m.journalRecords.Set(js.Records)
	a.m.journalBytes.Set(js.Bytes)
	a.m.journalBatches.Set(js.Batches)
	a.m.journalSegments.Set(float64(js.Segments))
	a.m.journalFileBytes.With("outbox").Set(float64(js.FileBytes))
	ps := ob.Stats()
	a.m.payloadFileBytes.Set(float64(ps.PayloadFileBytes))
	a.m.payloadsOnHeap.Set(float64(ps.PayloadsOnHeap))
	a.m.payloadErrors.With("write").Set(ps.PayloadWriteErrors)
	a.m.payloadErrors.With("read").Set(ps.PayloadReadErrors)
	a.m.payloadErrors.With("repair").Set(ps.PayloadRepairFailures)
	a.m.payloadRepairs.Set(ps.PayloadRepairs)
	for _, st := range ob.Status() {
		m, id := a.m, st.DeviceID
		m.queued.With(id).Set(float64(st.Queued))
		m.inFlight.With(id).Set(b2f(st.InFlight != ""))
		m.online.With(id).Set(b2f(st.Online))
		m.sent.With(id).Set(st.Sent)
		m.succeeded.With(id).Set(st.Succeeded)
		m.failed.With(id).Set(st.Failed)
		m.retries.With(id).Set(st.Retries)
	}
}

// scrapeStore mirrors the embedded state store's counts.
func (a *Agent) scrapeStore() {
	if a.broker == nil {
		return
	}
	st := a.broker.Store().Stats()
	a.m.storeBytes.Set(float64(st.Bytes))
	a.m.storeKeys.Set(float64(st.Keys))
	a.m.storeWatches.Set(float64(st.Registrations))
	for b, n := range st.Refused {
		a.m.storeRefused.With(statestore.Bound(b).String()).Set(n)
	}
}

// scrapeJournals mirrors the size of every journal and the broker's sessions journal's
// health. The outbox's journal is scraped with the outbox.
func (a *Agent) scrapeJournals() {
	if a.fwd != nil {
		a.m.journalFileBytes.With("forward").Set(float64(a.fwd.Backlog().Stats().Journal.FileBytes))
	}
	if a.syncReports != nil {
		a.m.journalFileBytes.With("syncreports").Set(float64(a.syncReports.Backlog().Stats().Journal.FileBytes))
	}
	if a.dead != nil {
		a.m.journalFileBytes.With("deadletter").Set(float64(a.dead.Backlog().Stats().Journal.FileBytes))
	}
	if wl := a.whitelist.Load(); wl != nil {
		st := wl.Stats()
		a.m.journalFileBytes.With("whitelist").Set(float64(st.FileBytes))
		a.m.whitelistTerminals.Set(float64(st.Terminals))
		a.m.whitelistRecords.Set(float64(st.Records))
		a.m.whitelistSetTasks.Set(float64(st.SetTasks))
	}
	if a.broker == nil || !a.started.Load() {
		return
	}
	st := a.broker.SessionsStats()
	if st.FileBytes == 0 {
		return // no DataDir: nothing stored
	}
	a.m.journalFileBytes.With("broker_sessions").Set(float64(st.FileBytes))
	a.m.sessionsLiveBytes.Set(float64(st.LiveBytes))
	a.m.sessionsWritable.Set(b2f(st.Err == nil))
	a.m.sessionsFailures.Set(st.Failures)
	a.m.sessionsResets.Set(st.Resets)
	a.m.sessionsRefused.Set(st.RefusedWrites)
	a.m.sessionsCompactions.Set(st.Compactions)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
