package report

import (
	"context"
	"log/slog"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/publish"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// SyncReportDir is the sync reports' log directory inside agent.data_dir.
const SyncReportDir = "syncreports"

// Bounds of the sync report backlog (reports journalled, not yet accepted upstream): at
// the bound the oldest are dropped, so a back office away for long misses old reports, not
// the latest.
const (
	MaxSyncReports     = 4096
	MaxSyncReportBytes = 1 << 20
	// CompactSyncReports is how many dead records the log tolerates before a snapshot.
	CompactSyncReports = 1024
)

// syncReportKind is the record kind of a sync report; its key is the device id.
const syncReportKind = 'Y'

// SyncReportOptions configure the sync report log.
type SyncReportOptions struct {
	Journal journal.Options // backlog.SegmentSize segments
	Prefix  string          // faceagent/{gw}/devices/: a report goes to Prefix + id + "/sync"
	// MaxCount and MaxBytes bound the backlog (0: MaxSyncReports, MaxSyncReportBytes).
	MaxCount, MaxBytes int
	Logger             *slog.Logger
	Metrics            *SyncReportMetrics
	// Now stamps the reports' "at" when they carry none (default: time.Now).
	Now func() time.Time
	// Observe is the backlog's hook (backlog.Options.Observe), for tests.
	Observe func(backlog.Event)
}

// SyncReports is the durable queue of whitelist sync reports: like results, kept in the
// journal (data_dir/syncreports) until the upstream broker accepted them, published in
// order on faceagent/{gw}/devices/{id}/sync with QoS 1. A report is durable when
// SyncReport returns (it waits for the journal, never for the upstream broker).
type SyncReports struct {
	b   *backlog.Backlog
	log *slog.Logger
	now func() time.Time
}

// OpenSyncReports opens (or creates) the log in dir and rebuilds the backlog from it.
func OpenSyncReports(dir string, o SyncReportOptions) (*SyncReports, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	prefix := o.Prefix
	b, err := backlog.Open(dir, backlog.Options{
		Journal: o.Journal, Keyed: true,
		Kinds:      []backlog.Kind{{Code: syncReportKind, Name: "sync", Droppable: true}},
		Durability: backlog.Durable(),
		MaxCount:   orDefault(o.MaxCount, MaxSyncReports), MaxBytes: orDefault(o.MaxBytes, MaxSyncReportBytes),
		Policy: backlog.DropOldest, CompactAfter: CompactSyncReports,
		Topic: func(_ byte, device string) string { return prefix + device + "/sync" },
		OnFailed: func(err error, retryIn time.Duration) {
			log.Warn("publishing a sync report failed; will retry", "in", retryIn, "err", err)
		},
		Observe: o.Observe, Metrics: o.Metrics.backlog(), Logger: log,
	})
	if err != nil {
		return nil, err
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &SyncReports{b: b, log: log, now: now}, nil
}

// SyncReport journals r and queues it for the publisher (whitelist.Reporter). A report
// that is not valid, or whose device id cannot be a topic level, is logged and dropped.
func (s *SyncReports) SyncReport(r wire.SyncReport) {
	if r.At == "" {
		r.At = wire.FormatSyncAt(s.now())
	}
	if !backlog.KeyOK(r.DeviceID) {
		s.log.Warn("not reporting: the device id cannot be a topic level", "device", r.DeviceID)
		return
	}
	payload, err := r.AppendJSON(nil)
	if err != nil {
		s.log.Error("not reporting an invalid sync report", "device", r.DeviceID, "err", err)
		return
	}
	if err := s.b.Add(syncReportKind, r.DeviceID, payload); err != nil {
		s.log.Warn("sync report not journalled", "device", r.DeviceID, "status", r.Status, "err", err)
	}
}

// Start publishes the backlog through pub, in order, until ctx ends; Wait waits for it.
func (s *SyncReports) Start(ctx context.Context, pub publish.Publisher) { s.b.Start(ctx, pub) }

// Wait returns once what Start began has ended.
func (s *SyncReports) Wait() { s.b.Wait() }

// Close flushes and closes the log; Start's goroutines must have ended.
func (s *SyncReports) Close() error { return s.b.Close() }

// Backlog is the sync reports' backlog (stats, entries, the journal's health).
func (s *SyncReports) Backlog() *backlog.Backlog { return s.b }

// SyncReportMetrics are the sync report log's series.
type SyncReportMetrics struct {
	Backlog   *metrics.Gauge      // reports journalled and not yet accepted upstream
	Published *metrics.Counter    // reports accepted upstream
	Dropped   *metrics.CounterVec // reports not published, by reason: bound, refused, journal
}

// NewSyncReportMetrics registers the sync report log's series in r.
func NewSyncReportMetrics(r *metrics.Registry) *SyncReportMetrics {
	return &SyncReportMetrics{
		Backlog: r.NewGauge("faceagent_sync_reports_backlog",
			"Whitelist sync reports journalled and not yet accepted by the upstream broker."),
		Published: r.NewCounter("faceagent_sync_reports_published_total",
			"Whitelist sync reports the upstream broker accepted."),
		Dropped: r.NewCounterVec("faceagent_sync_reports_dropped_total",
			"Whitelist sync reports not published, by reason: bound (oldest dropped for room), refused, journal.", "reason"),
	}
}

func (m *SyncReportMetrics) backlog() backlog.Metrics {
	if m == nil {
		return backlog.Metrics{}
	}
	return backlog.Metrics{Live: m.Backlog, Published: m.Published, Dropped: m.Dropped}
}
