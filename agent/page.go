package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/remote"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/ui"
)

// pageFailures is how many of the failed commands held the page lists.
const pageFailures = 50

// newUI makes the operator's page ([ui]) and starts its hub; nil without [ui] listen. The
// broker's users may act when it has any. It must exist before the parts that notify it.
func (a *Agent) newUI(ctx context.Context, cfg *config.Config, stops *[]func(context.Context) error) error {
	if cfg.UI.Listen == "" {
		return nil
	}
	o := ui.Options{
		State: a.pageState, Control: a.pageControl, Token: cfg.UI.Token,
		WriteTimeout: cfg.Metrics.WriteTimeout.Duration,
		Log:          a.log.With("part", "ui"), Metrics: a.uiM,
	}
	if a.broker != nil && a.broker.HasUsers() {
		o.Users = a.broker
	}
	u, err := ui.New(o)
	if err != nil {
		return err
	}
	a.ui = u
	u.Start(ctx)
	// Health and the upstream link change without a terminal event: their own events
	// notify the page (the broker's accept loop and sessions journal, every journal's
	// failure through healthJournal, the upstream connection's Events).
	if a.broker != nil {
		a.broker.OnHealthChanged(u.Notify)
	}
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.upstreamEvent:
				u.Notify()
			}
		}
	}()
	*stops = append(*stops, func(context.Context) error { u.Close(); u.Wait(); <-followed; return nil })
	return nil
}

// healthJournal is [journal]'s options for a journal whose failure /healthz reports: the
// page hears of the failure when it happens.
func (a *Agent) healthJournal(jo journal.Options) journal.Options {
	jo.OnFailure = a.journalFailed
	return jo
}

// journalFailed tells the page that a journal refuses writes (/healthz says so now).
func (a *Agent) journalFailed(error) { a.ui.Notify() }

// startUI serves the page on [ui] listen when that is not [metrics] listen (startHTTP
// serves it then), with [metrics]'s bounds. The page's streams are ended first (stops run
// in reverse), or Shutdown would wait for them.
func (a *Agent) startUI(cfg *config.Config, stops *[]func(context.Context) error) error {
	if a.ui == nil || cfg.UI.Listen == cfg.Metrics.Listen {
		return nil
	}
	l, err := net.Listen("tcp", cfg.UI.Listen)
	if err != nil {
		return fmt.Errorf("ui: listen %s: %w", cfg.UI.Listen, err)
	}
	m := cfg.Metrics
	srv := metrics.NewServer(metrics.ServerOptions{
		ReadHeaderTimeout: m.ReadHeaderTimeout.Duration, ReadTimeout: m.ReadTimeout.Duration,
		WriteTimeout: m.WriteTimeout.Duration, IdleTimeout: m.IdleTimeout.Duration,
		MaxHeaderBytes: int(m.MaxHeaderBytes), MaxConnections: m.MaxConnections,
	}, a.ui.Handler(), a.log.With("part", "ui"))
	a.uiAddr = l.Addr().String()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("ui server", "err", err)
		}
	}()
	*stops = append(*stops, srv.Shutdown, func(context.Context) error { a.ui.Close(); return nil })
	return nil
}

// UIAddr is the bound address of the operator's page ("" when off or before Ready).
func (a *Agent) UIAddr() string {
	if !a.started.Load() || a.ui == nil {
		return ""
	}
	if a.uiAddr == "" {
		return a.httpAddr // served with /metrics
	}
	return a.uiAddr
}

// pageControl runs the page's actions through remote control's code path.
func (a *Agent) pageControl(action, device string) (string, error) {
	r := a.remote.Load()
	if r == nil || !a.running.Load() {
		return "", ui.ErrNotRunning
	}
	return r.Execute(remote.ControlCommand{Command: action, Device: device})
}

// pageState builds what the page shows from what the parts keep.
func (a *Agent) pageState() ui.State {
	cfg := a.Config()
	st := ui.State{Gateway: cfg.Agent.GatewayID, Version: a.version, At: time.Now().UnixMilli(),
		Actions: cfg.UI.Token != "" || (a.broker != nil && a.broker.HasUsers())}
	if err := a.Healthy(); err != nil {
		st.Health.Problem = err.Error()
	} else {
		st.Health.OK = true
	}
	st.Health.Warnings = a.Warnings()
	switch {
	case cfg.Upstream == nil:
		st.Health.Upstream = "embedded"
	case a.m.upstream.Up.Value() == 1:
		st.Health.Upstream = "connected"
	default:
		st.Health.Upstream = "disconnected"
	}
	st.Health.Journals = a.journalSizes()
	ob := a.outbox.Load()
	for _, d := range a.state.States() {
		t := ui.Terminal{ID: d.DeviceID, Online: d.Online, Paused: d.Paused, Queued: d.QueueDepth, InFlight: d.InFlight,
			Persons: d.Persons, Desired: d.DesiredPersons, InSync: d.InSync, SyncStatus: d.SyncStatus, LastSync: d.LastSync,
			LastError: d.LastError, Firmware: d.Firmware, LastHeartbeat: d.LastHeartbeat, LastAck: d.LastAck,
			Sent: d.Sent, Succeeded: d.Succeeded, Failed: d.Failed}
		if ob != nil {
			if s, ok := ob.DeviceStatus(d.DeviceID); ok {
				t.InFlightTries, t.FailedHeld = s.InFlightTries, s.FailedHeld
				t.OnlineUntil, t.BreakerUntil = unixMilli(s.OnlineUntil), unixMilli(s.BreakerOpenUntil)
			}
		}
		st.Terminals = append(st.Terminals, t)
	}
	if ob != nil {
		list, held := ob.Failures(pageFailures)
		st.FailuresHeld = held
		for _, f := range list {
			st.Failures = append(st.Failures, ui.Failure{Device: f.DeviceID, TaskID: f.TaskID, MessageID: f.MessageID,
				Tries: f.Tries, Error: f.Err, At: f.FinishedAt.UnixMilli()})
		}
	}
	st.DeadLetters = a.ui.RecentDeadLetters()
	if a.dead != nil {
		st.DeadLettersPending = a.dead.Backlog().Stats().Live
	}
	return st
}

// journalSizes are the journals' sizes, as faceagent_journal_file_bytes has them.
func (a *Agent) journalSizes() []ui.Journal {
	var out []ui.Journal
	if ob := a.outbox.Load(); ob != nil {
		out = append(out, ui.Journal{Name: "outbox", Bytes: ob.JournalStats().FileBytes})
	}
	if a.dead != nil {
		out = append(out, ui.Journal{Name: "deadletter", Bytes: a.dead.Backlog().Stats().Journal.FileBytes})
	}
	if a.fwd != nil {
		out = append(out, ui.Journal{Name: "forward", Bytes: a.fwd.Backlog().Stats().Journal.FileBytes})
	}
	if a.syncReports != nil {
		out = append(out, ui.Journal{Name: "syncreports", Bytes: a.syncReports.Backlog().Stats().Journal.FileBytes})
	}
	if wl := a.whitelist.Load(); wl != nil {
		out = append(out, ui.Journal{Name: "whitelist", Bytes: wl.Stats().FileBytes})
	}
	if a.broker != nil {
		if s := a.broker.SessionsStats(); s.FileBytes > 0 {
			out = append(out, ui.Journal{Name: "broker_sessions", Bytes: s.FileBytes})
		}
	}
	return out
}

// pageDeadLetters is the taker's deadletter log, telling the page of each deadletter.
type pageDeadLetters struct {
	*report.DeadLetters
	page *ui.UI
}

func (d pageDeadLetters) Add(payloads [][]byte) error {
	err := d.DeadLetters.Add(payloads)
	if err == nil {
		d.page.DeadLettered(payloads)
	}
	return err
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
