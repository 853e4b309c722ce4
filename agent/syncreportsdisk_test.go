package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// TestSyncReportJournalErrorIsUnhealthy: the sync report log on a disk that fills up.
// Once its journal refuses writes, every later report is lost, so the agent says so as it
// does for the deadletter log: /healthz answers 503 naming the log, faceagent_up is 0, and
// the watchdog (NeedsRestart) is told, since only a restart reopens the log.
func TestSyncReportJournalErrorIsUnhealthy(t *testing.T) {
	dir := testutil.SmallFS(t, 2<<20)
	sr, err := report.OpenSyncReports(filepath.Join(dir, report.SyncReportDir), report.SyncReportOptions{
		Journal: journal.Options{SegmentSize: 64 << 10, Sync: journal.SyncAlways}, Prefix: "faceagent/gw/devices/"})
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close()
	a := &Agent{registry: metrics.NewRegistry(), syncReports: sr, log: slog.New(slog.DiscardHandler)}
	a.registerMetrics()
	a.running.Store(true)
	a.started.Store(true)
	if err := a.startHTTP(config.Metrics{Listen: "127.0.0.1:0", MaxConnections: 4}); err != nil {
		t.Fatal(err)
	}
	defer a.httpServer.Shutdown(context.Background())
	if code, body := getHealthz(t, a); code != http.StatusOK {
		t.Fatalf("/healthz before the disk filled: %d %s", code, body)
	}

	free := testutil.FillFS(t, dir)
	defer free()
	for i := 0; sr.Backlog().Err() == nil; i++ {
		if i == 5000 {
			t.Fatal("5000 sync reports journalled on a full disk")
		}
		sr.SyncReport(wire.SyncReport{DeviceID: fmt.Sprintf("t%d", i%8), Reason: wire.SyncDigest, Status: wire.SyncStarted})
	}
	if err := a.NeedsRestart(); !errors.Is(err, journal.ErrNoSpace) || !strings.Contains(err.Error(), "sync report log") {
		t.Fatalf("NeedsRestart with the sync report journal refusing writes: %v", err)
	}
	code, body := getHealthz(t, a)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "sync report log") {
		t.Fatalf("/healthz with the sync report journal refusing writes: %d %s", code, body)
	}
	if got := scrape(t, a); !strings.Contains(got, "faceagent_up 0") {
		t.Fatalf("faceagent_up while the sync report journal refuses writes:\n%s", got)
	}
}

// getHealthz returns what a's /healthz answers.
func getHealthz(t *testing.T, a *Agent) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + a.httpAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
