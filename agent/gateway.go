package agent

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/devstate"
	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/kv"
	"github.com/seed0e69bba5/faceagent/agent/links"
	"github.com/seed0e69bba5/faceagent/agent/publish"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/agent/upstream"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/hlc"
)

// startGateway wires intake, links, outbox, reports and device state. b is the embedded
// broker (not listening yet) or nil. Without [upstream] everything goes through b: intake
// by its interception of the tasks topic, reports through its Publisher, device state into
// its store engine. With [upstream] tasks, reports and the state store are on that broker,
// and the terminals on b when there is one, else on the upstream broker too.
//
// Each part pushes its stop function; they run in reverse: state writer, reporter,
// forward and deadletter publishers, upstream connection, intake refusal, deadletter log
// and outbox (journals flushed), links and pumps, the forward log (last: the pumps
// forward into it until they end), then (in Run) the broker.
func (a *Agent) startGateway(ctx context.Context, cfg *config.Config, b *broker.Broker, stops *[]func(context.Context) error) error {
	t := wire.GatewayTopics(cfg.Agent.GatewayID)
	take := newTaker(cfg, a.intakeM, a.log.With("part", "intake"))
	external := cfg.Upstream != nil
	if b != nil {
		// A client subscribing to configured terminals' command topics gets a short queue of
		// pending writes (agent/broker queues.go): a terminal has one command in flight.
		commands := make(map[string]bool, len(cfg.Devices))
		for _, d := range cfg.Devices {
			commands[cfg.Topics.Command(d.ID)] = true
		}
		if err := b.SetTerminalTopic(func(topic string) bool { return commands[topic] }); err != nil {
			return err
		}
	}
	if !external {
		// Tasks are journalled inside the publisher's PUBLISH, before its PUBACK; a message
		// not taken is refused so that it comes again (agent/broker's Intercept).
		if err := b.Intercept(t.Tasks, take.Intercepted); err != nil {
			return err
		}
	}

	// Forwarded acks and heartbeats: opened before the links, closed after the pumps.
	fwd, err := report.OpenForwarder(filepath.Join(cfg.Agent.DataDir, report.ForwardDir), report.ForwardOptions{
		Journal: journalOptions(cfg.Journal), Prefix: t.Devices, Logger: a.log.With("part", "forward"), Metrics: a.m.forward,
		MaxCount: cfg.Reports.MaxForwarded, MaxBytes: int(cfg.Reports.MaxForwardedBytes), Own: whitelist.OwnMessageID})
	if err != nil {
		return fmt.Errorf("forward log: %w", err)
	}
	*stops = append(*stops, func(context.Context) error { return fwd.Close() })

	var l *links.Links
	if b != nil {
		l, err = openLinks(cfg, b, "", a.log)
	} else {
		l, err = openLinks(cfg, nil, cfg.Upstream.URL, a.log)
	}
	if err != nil {
		return err
	}
	*stops = append(*stops, func(sctx context.Context) error {
		l.Close() // closes the Events channels: the pumps end
		stopWithin(sctx, l.Wait)
		return nil
	})
	fst, err := openFaces(cfg, a.m.faces, a.log.With("part", "faces"))
	if err != nil {
		return fmt.Errorf("face store: %w", err)
	}
	*stops = append(*stops, func(context.Context) error { return fst.Close() })
	a.faces = fst
	ws := &whitelistSync{}
	refusals := &taskRefusals{changed: ws.desiredChanged, log: a.log.With("part", "whitelist")}
	ob, err := openOutbox(cfg, l, a.log, ws.correctionDone, refusals.acked, a.journalFailed, fst)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	ws.ob = ob
	*stops = append(*stops, func(context.Context) error { a.outbox.Store(nil); return ob.Close() })
	dead, err := report.OpenDeadLetters(filepath.Join(cfg.Agent.DataDir, report.DeadLetterDir), report.DeadLetterOptions{
		Journal: a.healthJournal(journalOptions(cfg.Journal)), Topic: t.DeadLetter, Logger: a.log.With("part", "deadletter"), Metrics: a.m.deadLetters,
		MaxCount: cfg.Intake.MaxDeadLetters, MaxBytes: int(cfg.Intake.MaxDeadLetterBytes)})
	if err != nil {
		return fmt.Errorf("deadletter log: %w", err)
	}
	*stops = append(*stops, func(context.Context) error { return dead.Close() })
	a.dead = dead
	syncReports, err := report.OpenSyncReports(filepath.Join(cfg.Agent.DataDir, report.SyncReportDir), report.SyncReportOptions{
		Journal: a.healthJournal(journalOptions(cfg.Journal)), Prefix: t.Devices, Logger: a.log.With("part", "syncreport"), Metrics: a.m.syncReports,
		MaxCount: cfg.Reports.MaxSyncReports, MaxBytes: int(cfg.Reports.MaxSyncReportBytes)})
	if err != nil {
		return fmt.Errorf("sync report log: %w", err)
	}
	*stops = append(*stops, func(context.Context) error { return syncReports.Close() })
	a.syncReports = syncReports
	a.outbox.Store(ob)
	wl, err := openWhitelist(cfg, a.log)
	if err != nil {
		return fmt.Errorf("desired whitelists: %w", err)
	}
	*stops = append(*stops, func(context.Context) error { a.whitelist.Store(nil); return wl.Close() })
	a.whitelist.Store(wl)
	// The faces tasks bring: held by the intake until their desired records are durable,
	// swept once no desired record refers to them.
	sweeper := startFaceSweeper(ctx, fst, a.log.With("part", "faces"), take, wl, stops)
	changed := func(dev string) { ws.desiredChanged(dev); sweeper.Changed() }
	refusals.wl.Store(wl)
	take.OpenDesired(desiredLists{s: wl, changed: changed, setWhitelist: ws.setWhitelist})
	if a.ui != nil {
		take.Open(ob, pageDeadLetters{DeadLetters: dead, page: a.ui})
	} else {
		take.Open(ob, dead)
	}
	// From the moment shutdown begins, refuse tasks without acknowledging them.
	*stops = append(*stops, func(context.Context) error { take.Close(); return nil })

	rctx, cancel := context.WithCancel(ctx)
	var results publish.Publisher
	clock := hlc.NewClock("faceagent-" + cfg.Agent.GatewayID)
	var keys kv.Store
	if b != nil {
		keys = kv.Engine{Store: b.Store(), Clock: clock}
	}
	if external {
		uo := upstreamOptions(cfg, take, a.m, a.log.With("part", "upstream"))
		uo.Connected, uo.Events = a.upstreamUp, a.upstreamEvent
		uc, err := upstream.Dial(rctx, uo)
		if err != nil {
			cancel()
			return err
		}
		*stops = append(*stops, uc.Close)
		results = uc

		sc, err := store.New(&store.Options{
			URL: cfg.Upstream.URL, ClientID: clientID(cfg) + "-store", Username: cfg.Upstream.Username,
			Password: []byte(cfg.Upstream.Password), Timeout: cfg.Store.RequestTimeout.Duration,
			Logger: a.log.With("part", "store"),
		})
		if err != nil {
			cancel()
			return fmt.Errorf("state store client: %w", err)
		}
		*stops = append(*stops, func(context.Context) error { return sc.Close() })
		keys = kv.Client{C: sc}
	} else {
		// PublishDeferred, and one sessions sync per batch before it is marked reported
		// (reporter, forwarder, deadletter log): one fsync a batch, not one a message.
		results = b.Publisher()
	}
	dead.Start(rctx, results)
	*stops = append(*stops, func(context.Context) error { cancel(); dead.Wait(); return nil })
	// Forwarded acks and heartbeats are published on their own goroutine (routed inline
	// on the device event path they would cost it most of its time per ack), with QoS 1.
	fwd.Start(rctx, results)
	*stops = append(*stops, func(context.Context) error { cancel(); fwd.Wait(); return nil })
	syncReports.Start(rctx, results)
	*stops = append(*stops, func(context.Context) error { cancel(); syncReports.Wait(); return nil })
	a.fwd = fwd

	ids := make([]string, len(cfg.Devices))
	for i, d := range cfg.Devices {
		ids[i] = d.ID
	}
	so := devstate.Options{Devices: ids, Store: keys, Status: ob, Desired: wl, Prefix: t.Devices,
		WriteInterval: cfg.Store.WriteInterval.Duration, HeartbeatTimeout: cfg.Dispatch.HeartbeatTimeout.Duration,
		Timeout: cfg.Store.RequestTimeout.Duration, Log: a.log.With("part", "state"), Metrics: a.m.state}
	if a.ui != nil {
		so.Changed = a.ui.Notify // the operator's page follows every terminal event
	}
	sw := devstate.New(so)
	a.state = sw
	if err := a.startReconciler(cfg, ws, wl, syncReporter{log: syncReports, sw: sw}, stops); err != nil {
		cancel()
		return err
	}
	state := syncedState{sw: sw, ws: ws}
	take.OnTouched(state.Touch)
	ob.OnChanged(state.Touch) // pause, resume, retry and purge of failed commands
	l.Start(links.Sinks{Outbox: ob, Forwarder: fwd, State: state})

	ro := report.ResultOptions{Topic: t.Results, State: sw, Logger: a.log.With("part", "report"), Metrics: a.m.reports}
	if h := cfg.Intake.HTTP; h != nil {
		if h.ResultsURL != "" {
			ro.Poster = &report.HTTPPoster{URL: h.ResultsURL, Header: h.AuthHeader, Value: h.AuthValue,
				Client: &http.Client{Timeout: h.Timeout.Duration}}
		}
		hi := intake.NewHTTPPull(intake.HTTPOptions{URL: h.URL, PageSize: h.PageSize, Interval: h.Interval.Duration,
			Timeout: h.Timeout.Duration, AuthHeader: h.AuthHeader, AuthValue: h.AuthValue,
			Logger: a.log.With("part", "http-intake")}, take)
		hi.Start(rctx)
		*stops = append(*stops, func(context.Context) error { cancel(); hi.Wait(); return nil })
	}
	rep := report.NewReporter(ob, ro)
	rep.Start(rctx, results)
	*stops = append(*stops, func(context.Context) error { cancel(); rep.Wait(); return nil })
	// SetWhitelist results, kept by the desired whitelists, on the same topic.
	sets := &setResults{s: wl}
	ro.Counts = sets.Counts
	setRep := report.NewReporter(sets, ro)
	setRep.Start(rctx, results)
	*stops = append(*stops, func(context.Context) error { cancel(); setRep.Wait(); return nil })
	sw.Start(rctx)
	*stops = append(*stops, func(context.Context) error { cancel(); sw.Wait(); return nil })

	// Remote management: faceagent/{gw}/config and …/control, watched with KEYNOTIFY.
	rem := a.newRemote(cfg, keys, ob, take, ws)
	a.remote.Store(rem)
	rem.Start(rctx)
	*stops = append(*stops, func(context.Context) error { cancel(); rem.Wait(); return nil })
	return nil
}

// journalOptions maps [journal] onto the options of the small logs (deadletters, forwarded
// acks and heartbeats): 4 MiB segments, since they hold little and compact often.
func journalOptions(c config.Journal) journal.Options {
	jo := syncOptions(c)
	jo.SegmentSize = backlog.SegmentSize
	return jo
}

// syncOptions maps [journal] onto the journal's sync policy and batch window, which every
// journal of the agent shares.
func syncOptions(c config.Journal) journal.Options {
	jo := journal.Options{BatchWindow: c.BatchWindow.Duration}
	switch c.Sync {
	case config.SyncBatch:
		jo.Sync = journal.SyncBatch
	case config.SyncNone:
		jo.Sync = journal.SyncNone
	default:
		jo.Sync = journal.SyncAlways
	}
	return jo
}
