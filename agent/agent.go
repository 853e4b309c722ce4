package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/devstate"
	"github.com/seed0e69bba5/faceagent/agent/faces"
	"github.com/seed0e69bba5/faceagent/agent/intake"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/remote"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/ui"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// Options configure an Agent. Config is required; the rest may be zero.
type Options struct {
	Config *config.Config
	// Logger receives the agent's logs. Default: discard.
	Logger *slog.Logger
	// LogLevel, when set, is the level of Logger that Reload adjusts.
	LogLevel *slog.LevelVar
	// Version is reported in logs and as faceagent_build_info.
	Version string
}

// Agent is one running faceagent: the embedded broker and state store, and (as the
// packages land) the upstream link, outbox, device links and store writer. Build it with
// New, run it with Run.
type Agent struct {
	log      *slog.Logger
	level    *slog.LevelVar
	version  string
	registry *metrics.Registry

	mu       sync.Mutex
	cfg      *config.Config // in force: fileCfg with the remote override applied
	fileCfg  *config.Config // from the file (and SIGHUP reloads)
	override []byte         // the remote override (faceagent/{gw}/config), TOML

	ready      chan struct{}
	upstreamUp chan struct{}
	// upstreamEvent is poked (capacity 1) on every upstream subscription and loss.
	upstreamEvent chan struct{}
	running       atomic.Bool
	started       atomic.Bool

	broker *broker.Broker
	outbox atomic.Pointer[outbox.Outbox]
	// whitelist is the terminals' desired whitelists (set by startGateway, nil once closed).
	whitelist atomic.Pointer[whitelist.Store]
	faces     *faces.Store // the face store in data_dir/faces (set by startGateway)
	state     *devstate.Writer
	dead      *report.DeadLetters // the taker's deadletter log (set by startGateway)
	// brokerStats is the embedded broker, for /metrics (set once it is made).
	brokerStats atomic.Pointer[broker.Broker]
	fwd         *report.Forwarder   // forwarded acks and heartbeats (set by startGateway)
	syncReports *report.SyncReports // whitelist sync reports (set by startGateway)
	m           *agentMetrics
	intakeM     *intake.Metrics
	httpServer  *metrics.Server
	httpAddr    string

	// The operator's page (page.go): nil without [ui] listen.
	ui     *ui.UI
	uiM    *ui.Metrics
	uiAddr string                        // its own address; "" when served with /metrics
	remote atomic.Pointer[remote.Remote] // its actions' code path (set by startGateway)
}

// ErrAlreadyStarted is returned by a second call to Run.
var ErrAlreadyStarted = errors.New("agent: Run called twice")

// New checks the options and prepares an Agent; nothing is started.
func New(opts *Options) (*Agent, error) {
	if opts == nil || opts.Config == nil {
		return nil, errors.New("agent: Options.Config is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a := &Agent{
		log:           log,
		level:         opts.LogLevel,
		version:       opts.Version,
		cfg:           opts.Config,
		fileCfg:       opts.Config,
		ready:         make(chan struct{}),
		upstreamUp:    make(chan struct{}),
		upstreamEvent: make(chan struct{}, 1),
		registry:      metrics.NewRegistry(),
	}
	a.registerMetrics()
	return a, nil
}

// Config returns the configuration in force (the latest one Reload accepted).
func (a *Agent) Config() *config.Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

// Ready is closed once Run has started everything: the broker listens, /metrics serves.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// UpstreamConnected is closed once the agent is connected to the external [upstream]
// broker and subscribed to its tasks for the first time (never without [upstream]).
// Ready does not wait for it: the agent runs, and dispatches what it has, while the
// upstream broker is away.
func (a *Agent) UpstreamConnected() <-chan struct{} { return a.upstreamUp }

// BrokerAddr is the embedded broker's bound address ("" without [broker] or before Ready).
func (a *Agent) BrokerAddr() string {
	if a.broker == nil || !a.started.Load() {
		return ""
	}
	return a.broker.Addr()
}

// MetricsAddr is the bound address of /metrics and /healthz ("" when off or before Ready).
func (a *Agent) MetricsAddr() string {
	if !a.started.Load() {
		return ""
	}
	return a.httpAddr
}

// Healthy reports nil while the agent runs and its parts are sound; /healthz and
// faceagent_up ask it. It reports what NeedsRestart does and, besides, the failures the
// agent recovers from by itself: the embedded broker's sessions journal refusing writes
// (a full disk; it takes them again once space is back).
func (a *Agent) Healthy() error {
	if err := a.NeedsRestart(); err != nil {
		return err
	}
	if a.broker != nil {
		if err := a.broker.SessionsErr(); err != nil {
			// Messages for kept sessions, their subscriptions and connections are refused
			// until the disk takes writes again; a restart would not help.
			return fmt.Errorf("broker sessions journal: %w", err)
		}
	}
	return nil
}

// NeedsRestart reports nil while the agent runs and no part failed in a way only a
// restart mends; the systemd watchdog asks it and withholds its keepalive otherwise.
func (a *Agent) NeedsRestart() error {
	if !a.running.Load() {
		return errors.New("not running")
	}
	if ob := a.outbox.Load(); ob != nil {
		if err := ob.Err(); err != nil {
			// The journal refused a write: intake and dispatch have stopped. A restart
			// (systemd's watchdog) rebuilds the table from what is on disk.
			return fmt.Errorf("outbox: %w", err)
		}
	}
	if a.dead != nil {
		if err := a.dead.Backlog().Err(); err != nil {
			// Every message with a refused task is refused now; a restart reopens the log.
			return fmt.Errorf("deadletter log: %w", err)
		}
	}
	if a.syncReports != nil {
		if err := a.syncReports.Backlog().Err(); err != nil {
			// Every later whitelist sync report is lost; a restart reopens the log.
			return fmt.Errorf("sync report log: %w", err)
		}
	}
	if a.broker != nil {
		// The embedded broker cannot accept connections (out of file descriptors, say):
		// terminals and the back office that reconnect are locked out until it can again.
		if err := a.broker.Healthy(); err != nil {
			return err
		}
	}
	return nil
}

// Warnings lists what is wrong but is no reason to restart the agent (a restart would not
// fix it): /healthz prints them under its "ok". Today: terminals whose state the state
// store refuses to take.
func (a *Agent) Warnings() []string {
	if a.state == nil || !a.running.Load() {
		return nil
	}
	return a.state.RefusedWarnings()
}

// Run starts the configured parts in order, closes Ready, and blocks until ctx is
// cancelled; then it stops everything in reverse order within agent.shutdown_timeout and
// returns nil for a clean stop. A part that fails to start stops the ones already
// started and its error is returned.
//
// Start order: embedded broker (not yet listening) with intake's interception, device links,
// outbox (journal replay), event pumps, reporter, broker listening, /metrics. Stop order
// is the reverse, so no task is acknowledged that the journal did not take, and the
// journal is flushed after the last ack was recorded.
func (a *Agent) Run(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return ErrAlreadyStarted
	}
	cfg := a.Config()
	runCtx, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	var stops []func(context.Context) error
	stopAll := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.Agent.ShutdownTimeout.Duration)
		defer cancel()
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i](sctx))
		}
		return errors.Join(errs...)
	}
	fail := func(err error) error { return errors.Join(err, stopAll()) }

	var b *broker.Broker
	if cfg.Broker != nil {
		var err error
		if b, err = newBroker(cfg, a.log); err != nil {
			return err
		}
		a.broker = b
		a.brokerStats.Store(b)
		stops = append(stops, func(context.Context) error { return b.Close() })
	}
	if err := a.newUI(runCtx, cfg, &stops); err != nil {
		return fail(err)
	}
	if !cfg.BrokerOnly() {
		if err := a.startGateway(runCtx, cfg, b, &stops); err != nil {
			return fail(err)
		}
	}
	if b != nil {
		if err := b.Start(); err != nil {
			return fail(err)
		}
	}
	if cfg.Metrics.Listen != "" {
		if err := a.startHTTP(cfg.Metrics); err != nil {
			return fail(err)
		}
		stops = append(stops, a.httpServer.Shutdown)
		if a.ui != nil && cfg.UI.Listen == cfg.Metrics.Listen {
			stops = append(stops, func(context.Context) error { a.ui.Close(); return nil }) // before Shutdown
		}
	}
	if err := a.startUI(cfg, &stops); err != nil {
		return fail(err)
	}
	a.running.Store(true)
	a.log.Info("faceagent running", "version", a.version, "broker", a.BrokerAddr(), "metrics", a.httpAddr, "ui", a.UIAddr(),
		"gateway", cfg.Agent.GatewayID, "devices", len(cfg.Devices))
	close(a.ready)

	<-ctx.Done()
	a.log.Info("faceagent stopping")
	a.running.Store(false)
	cancelRun()
	err := stopAll()
	if err != nil {
		a.log.Error("stop", "err", err)
	}
	return err
}

// agentOwnedKeys are the key prefixes only the agent writes: its terminals' state and the
// outcome of remote configuration and control (the back office writes faceagent/{gw}/config
// and …/control themselves, so those stay open).
func agentOwnedKeys(gw string) []string {
	p := "faceagent/" + gw + "/"
	return []string{wire.GatewayTopics(gw).Devices, p + "config/status", p + "control/status"}
}

// newBroker maps [broker] onto the embedded broker's options.
func newBroker(cfg *config.Config, log *slog.Logger) (*broker.Broker, error) {
	c := cfg.Broker
	opts := &broker.Options{
		Listen:         c.Listen,
		TLS:            broker.TLSOptions{CertFile: c.TLSCert, KeyFile: c.TLSKey, ClientCAFile: c.TLSClientCA},
		AllowAnonymous: c.Anonymous(),
		UsersFile:      c.UsersFile,
		MaxConnecting:  c.MaxConnecting,
		MaxKeys:        c.StoreMaxKeys,
		MaxValueSize:   int(c.StoreMaxValueSize),
		MaxBytes:       int64(c.StoreMaxBytes),
		MaxKeySize:     int(c.StoreMaxKeySize),
		MaxNotify:      c.StoreMaxNotify,
		StateStoreNode: cfg.Agent.GatewayID,
		Logger:         log.With("part", "broker"),

		MaxPacketSize:    uint32(c.MaxPacketSize),
		ReceiveMaximum:   uint16(c.ReceiveMaximum),
		MaxMessageExpiry: c.MaxMessageExpiry.Duration,

		MaxClients:           int64(c.MaxClients),
		MaxSubscriptions:     int32(c.MaxSubscriptions),
		MaxPendingWriteBytes: int64(c.MaxPendingWriteBytes),
		MaxSessionBytes:      int64(c.MaxSessionBytes),
		MaxQueuedBytes:       int64(c.MaxQueuedBytes),
		MaxRetainedBytes:     int64(c.MaxRetainedBytes),
		MaxInboundBytes:      int64(c.MaxInboundBytes),
	}
	if c.MaxQueuedMessages > 0 {
		opts.MaxInflight = uint16(min(c.MaxQueuedMessages, 65535))
	}
	if cfg.Upstream == nil && !cfg.BrokerOnly() {
		// The agent writes these keys into this store in-process (kv.Engine, as its owner):
		// nobody else may write them, and so nobody can fence them and freeze the agent's
		// writes. Clients still read and watch them.
		opts.ReservedKeyPrefixes = agentOwnedKeys(cfg.Agent.GatewayID)
	}
	opts.ServerKeepAlive = c.ServerKeepAlive.Duration
	if c.Persist {
		opts.DataDir = filepath.Clean(cfg.Agent.DataDir)
	}
	return broker.New(opts)
}

func (a *Agent) startHTTP(m config.Metrics) error {
	l, err := net.Listen("tcp", m.Listen)
	if err != nil {
		return fmt.Errorf("metrics: listen %s: %w", m.Listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", a.registry.Handler())
	if a.ui != nil && a.Config().UI.Listen == m.Listen {
		mux.Handle("/", a.ui.Handler()) // the operator's page shares this server
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
		for _, warning := range a.Warnings() {
			_, _ = io.WriteString(w, "warning: "+warning+"\n")
		}
	})
	a.httpServer = metrics.NewServer(metrics.ServerOptions{
		ReadHeaderTimeout: m.ReadHeaderTimeout.Duration, ReadTimeout: m.ReadTimeout.Duration,
		WriteTimeout: m.WriteTimeout.Duration, IdleTimeout: m.IdleTimeout.Duration,
		MaxHeaderBytes: int(m.MaxHeaderBytes), MaxConnections: m.MaxConnections,
	}, mux, a.log)
	a.httpAddr = l.Addr().String()
	go func() {
		if err := a.httpServer.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("metrics server", "err", err)
		}
	}()
	return nil
}

// Reload takes a new configuration from SIGHUP. What can change live is applied
// ([log] level, [dispatch], [store], devices' heartbeat setting) with the remote
// override, if any, laid over it again; sections that need a restart are named in the
// returned error, and keep their old values meanwhile.
func (a *Agent) Reload(next *config.Config) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.fileCfg
	var restart []string
	for name, pair := range map[string][2]any{
		"[agent]":     {prev.Agent, next.Agent},
		"[broker]":    {prev.Broker, next.Broker},
		"[upstream]":  {prev.Upstream, next.Upstream},
		"[metrics]":   {prev.Metrics, next.Metrics},
		"[ui]":        {prev.UI, next.UI},
		"[journal]":   {prev.Journal, next.Journal},
		"[topics]":    {prev.Topics, next.Topics},
		"[intake]":    {prev.Intake, next.Intake},
		"[reports]":   {prev.Reports, next.Reports},
		"[[devices]]": {deviceSet(prev.Devices), deviceSet(next.Devices)},
		"log.format":  {prev.Log.Format, next.Log.Format},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			restart = append(restart, name)
		}
	}
	file := *prev
	file.Log.Level = next.Log.Level
	file.Dispatch = next.Dispatch
	file.Store = next.Store
	if len(restart) == 0 || !slices.Contains(restart, "[[devices]]") {
		file.Devices = next.Devices // same terminals; their settings may change
	}
	a.fileCfg = &file
	eff, err := config.ApplyOverrides(&file, a.override)
	if err != nil {
		a.log.Warn("the remote override does not fit the reloaded file; running without it", "err", err.Error())
		eff = &file
	}
	a.cfg = eff
	a.applyLiveLocked()
	if a.level != nil {
		a.level.Set(ParseLevel(next.Log.Level))
	}
	if len(restart) > 0 {
		slices.Sort(restart)
		return fmt.Errorf("%w: %v", ErrNeedsRestart, restart)
	}
	return nil
}

// deviceSet is what of [[devices]] needs a restart to change: ids and transports.
func deviceSet(devs []config.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.ID + "/" + d.Transport + "/" + d.Port
	}
	return out
}

// ErrNeedsRestart is returned (wrapped) by Reload when the new file changes sections that
// apply only at start.
var ErrNeedsRestart = errors.New("changes need a restart")
