package agent

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/agent/upstream"
	"github.com/seed0e69bba5/faceagent/hlc"
)

// startGateway wires intake, links, outbox, reports and device state. b is the embedded
// broker (not listening yet) or nil. Without [upstream] everything goes through b:
// intake in its OnPublish hook, reports through its inline client, device state into its
// store engine. With [upstream] tasks, reports and the state store are on that broker,
// and the terminals on b when there is one, else on the upstream broker too.
//
// Each part pushes its stop function; they run in reverse: state writer, reporter,
// forward and deadletter publishers, upstream connection, intake refusal, deadletter log
// and outbox (journals flushed), links and pumps, the forward log (last: the pumps
// forward into it until they end), then (in Run) the broker.
func (a *Agent) startGateway(ctx context.Context, cfg *config.Config, b *broker.Broker, stops *[]func(context.Context) error) error {
	t := upstreamTopics(cfg.Agent.GatewayID)
	take := newTaker(cfg, a.m, a.log.With("part", "intake"))
	external := cfg.Upstream != nil
	if b != nil {
		// A client subscribing to configured terminals' command topics only gets a short
		// queue of pending writes (agent/broker queues.go): 352 bytes instead of 9.5 KB.
		commands := make(map[string]bool, len(cfg.Devices))
		for _, d := range cfg.Devices {
			commands[cfg.Topics.Command(d.ID)] = true
		}
		if err := b.SetTerminalTopic(func(topic string) bool { return commands[topic] }); err != nil {
			return err
		}
	}
	if !external {
		if err := b.AddHook(&intakeHook{srv: b.Server(), topic: t.tasks, take: take}, nil); err != nil {
			return err
		}
	}

	// Forwarded acks and heartbeats: opened before the links, closed after the pumps.
	fwd, err := openForwarder(filepath.Join(cfg.Agent.DataDir, ForwardDir), journalOptions(cfg.Journal), nil,
		t.devices, a.m, a.log.With("part", "forward"))
	if err != nil {
		return fmt.Errorf("forward log: %w", err)
	}
	*stops = append(*stops, func(context.Context) error { return fwd.close() })

	var l *links
	if b != nil {
		l, err = openLinks(cfg, b.Server(), "", a.log)
	} else {
		l, err = openLinks(cfg, nil, cfg.Upstream.URL, a.log)
	}
	if err != nil {
		return err
	}
	var p pumps
	*stops = append(*stops, func(sctx context.Context) error {
		l.close() // closes the Events channels: the pumps end
		stopWithin(sctx, p.wg.Wait)
		return nil
	})
	ob, err := openOutbox(cfg, l, a.log)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	*stops = append(*stops, func(context.Context) error { a.outbox.Store(nil); return ob.Close() })
	dead, err := openDeadLetters(filepath.Join(cfg.Agent.DataDir, DeadLetterDir), journalOptions(cfg.Journal), nil,
		t.deadletter, a.m, a.log.With("part", "deadletter"))
	if err != nil {
		return fmt.Errorf("deadletter log: %w", err)
	}
	*stops = append(*stops, func(context.Context) error { return dead.close() })
	take.dead = dead // before the outbox: intake takes nothing while take.ob is nil
	a.outbox.Store(ob)
	take.ob.Store(ob)
	// From the moment shutdown begins, refuse tasks without acknowledging them.
	*stops = append(*stops, func(context.Context) error { take.ob.Store(nil); return nil })

	rctx, cancel := context.WithCancel(ctx)
	// cancelAndWait stops a part running on rctx: cancel (shared, harmless to repeat)
	// and wait for its goroutines.
	cancelAndWait := func(wg *sync.WaitGroup) func(context.Context) error {
		return func(context.Context) error { cancel(); wg.Wait(); return nil }
	}
	var results publisher
	clock := hlc.NewClock("faceagent-" + cfg.Agent.GatewayID)
	var setter func(context.Context, string, []byte, time.Duration) error
	var keys keyStore
	if b != nil {
		setter, keys = engineSetter(b.Store(), clock), engineKeys{st: b.Store(), clock: clock}
	}
	if external {
		uo := upstreamOptions(cfg, acceptTasks(take.accept), a.m, a.log.With("part", "upstream"))
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
		setter, keys = clientSetter(sc), clientKeys{c: sc}
	} else {
		// PublishDeferred, and one sessions sync per batch before it is marked reported
		// (reporter, forwarder, deadletter log): one fsync a batch, not one a message.
		results = inlinePublisher{srv: b.Server(), serving: a.brokerServing, br: b}
	}
	dead.pub = results
	dead.start(rctx)
	*stops = append(*stops, cancelAndWait(&dead.wg))
	// Forwarded acks and heartbeats are published on their own goroutine (routed inline
	// on the device event path they would cost it most of its time per ack), with QoS 1.
	fwd.pub = results
	fwd.start(rctx)
	*stops = append(*stops, cancelAndWait(&fwd.wg))
	a.fwd = fwd

	ids := make([]string, len(cfg.Devices))
	for i, d := range cfg.Devices {
		ids[i] = d.ID
	}
	sw := newStateWriter(ids, setter, ob, cfg.Agent.GatewayID, cfg.Store.WriteInterval.Duration,
		cfg.Dispatch.HeartbeatTimeout.Duration, cfg.Store.RequestTimeout.Duration, a.log.With("part", "state"))
	sw.m = a.m
	a.state = sw
	take.touched = sw.touch
	p.start(l, ob, fwd, sw, a.log)

	rep := &reporter{ob: ob, pub: results, topic: t.results, log: a.log.With("part", "report"), m: a.m, state: sw}
	if h := cfg.Intake.HTTP; h != nil {
		if h.ResultsURL != "" {
			rep.poster = &resultPoster{url: h.ResultsURL, header: h.AuthHeader, value: h.AuthValue,
				client: &http.Client{Timeout: h.Timeout.Duration}}
		}
		hi := newHTTPIntake(h, take, a.log.With("part", "http-intake"))
		a.httpIntake = hi
		hi.start(rctx)
		*stops = append(*stops, cancelAndWait(&hi.wg))
	}
	rep.start(rctx)
	*stops = append(*stops, cancelAndWait(&rep.wg))
	sw.start(rctx)
	*stops = append(*stops, cancelAndWait(&sw.wg))

	// Remote management: faceagent/{gw}/config and …/control, watched with KEYNOTIFY.
	a.take = take
	rem := &remote{keys: keys, a: a, ob: ob, take: take, prefix: "faceagent/" + cfg.Agent.GatewayID + "/",
		doneLog: filepath.Join(cfg.Agent.DataDir, "control-done.json"), log: a.log.With("part", "remote")}
	rem.start(rctx)
	*stops = append(*stops, cancelAndWait(&rem.wg))
	return nil
}

// clientSetter writes keys through an agent/store client (an external store).
func clientSetter(c *store.Client) func(context.Context, string, []byte, time.Duration) error {
	return func(ctx context.Context, key string, value []byte, px time.Duration) error {
		_, err := c.Set(ctx, key, value, &store.SetOptions{Expiry: px})
		return err
	}
}

// journalOptions maps [journal] onto the options of the small logs (deadletters, forwarded
// acks and heartbeats): 4 MiB segments, since they hold little and compact often.
func journalOptions(c config.Journal) journal.Options {
	jo := syncOptions(c)
	jo.SegmentSize = smallLogSegment
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
