package report

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
)

func openTestSyncReports(t *testing.T, dir string, o SyncReportOptions) (*SyncReports, *SyncReportMetrics) {
	t.Helper()
	m := NewSyncReportMetrics(testRegistry())
	o.Prefix, o.Logger, o.Metrics = "faceagent/gw/devices/", quietLog, m
	o.Now = func() time.Time { return time.Date(2026, 11, 27, 15, 4, 5, 0, time.UTC) }
	s, err := OpenSyncReports(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return s, m
}

// Sync reports are journalled before SyncReport returns and published on each terminal's
// sync topic, in order, after a restart too; published ones do not come back. An invalid
// report is dropped, not published.
func TestSyncReportsReplayUntilPublished(t *testing.T) {
	dir := t.TempDir()
	s, _ := openTestSyncReports(t, dir, SyncReportOptions{})
	s.SyncReport(wire.SyncReport{DeviceID: "t1", Reason: wire.SyncSerial, Status: wire.SyncStarted})
	s.SyncReport(wire.SyncReport{DeviceID: "t1", Reason: wire.SyncSerial, Status: wire.SyncDone, Missing: 3})
	s.SyncReport(wire.SyncReport{DeviceID: "t2", Reason: "bogus", Status: wire.SyncDone})
	s.SyncReport(wire.SyncReport{DeviceID: "t2", Reason: wire.SyncDigest, Status: wire.SyncFailed, Error: "refused"})
	if err := s.Close(); err != nil { // never published: the upstream broker was away
		t.Fatal(err)
	}

	reported := newEvents()
	s, m := openTestSyncReports(t, dir, SyncReportOptions{Observe: reported.observe})
	if n := m.Backlog.Value(); n != 3 {
		t.Fatalf("backlog after replay %v, want 3", n)
	}
	pub := newCollector()
	pub.withTopic = true
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx, pub)
	got := pub.waitFor(t, 3)
	want := []string{
		`faceagent/gw/devices/t1/sync {"deviceId":"t1","reason":"serial","status":"started","missing":0,"extra":0,"changed":0,"at":"2026-11-27T15:04:05.000Z"}`,
		`faceagent/gw/devices/t1/sync {"deviceId":"t1","reason":"serial","status":"done","missing":3,"extra":0,"changed":0,"at":"2026-11-27T15:04:05.000Z"}`,
		`faceagent/gw/devices/t2/sync {"deviceId":"t2","reason":"digest","status":"failed","missing":0,"extra":0,"changed":0,"at":"2026-11-27T15:04:05.000Z","error":"refused"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("published\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	waitFor(t, "3 reports marked published", func() bool { return m.Published.Value() == 3 }, reported)
	cancel()
	s.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ = openTestSyncReports(t, dir, SyncReportOptions{})
	defer s.Close()
	if n := s.Backlog().Stats().Live; n != 0 {
		t.Fatalf("published reports replayed: %d", n)
	}
}

// At max_sync_reports the oldest report is dropped for the newest, and counted.
func TestSyncReportsBoundDropsOldest(t *testing.T) {
	s, m := openTestSyncReports(t, t.TempDir(), SyncReportOptions{MaxCount: 2})
	defer s.Close()
	for _, st := range []wire.SyncStatus{wire.SyncStarted, wire.SyncDone, wire.SyncStarted} {
		s.SyncReport(wire.SyncReport{DeviceID: "t1", Reason: wire.SyncDigest, Status: st})
	}
	if n := s.Backlog().Stats().Live; n != 2 {
		t.Fatalf("backlog %d, want 2", n)
	}
	if n := m.Dropped.With("bound").Value(); n != 1 {
		t.Fatalf("dropped %v, want 1", n)
	}
	pub := newCollector()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); s.Wait() }()
	s.Start(ctx, pub)
	if got := pub.waitFor(t, 2); !strings.Contains(got[0], `"done"`) || !strings.Contains(got[1], `"started"`) {
		t.Fatalf("published %v, want the last two", got)
	}
}
