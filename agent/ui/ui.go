package ui

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/metrics"
)

// Defaults and bounds of Options.
const (
	// MaxClients is the default of Options.MaxClients: live pages (server-sent event
	// streams) at once; one more is answered 503.
	MaxClients = 8
	// KeepAlive is the default of Options.KeepAlive: how often a stream gets a comment
	// while nothing changes (proxies close streams idle for a minute or more).
	KeepAlive = 25 * time.Second
	// WriteTimeout is the default of Options.WriteTimeout: a stream whose write takes
	// longer is dropped (its client reconnects by itself).
	WriteTimeout = 10 * time.Second
	// MinInterval is the default of Options.MinInterval: changes closer together are sent
	// as one state.
	MinInterval = 250 * time.Millisecond
	// MaxActionBody bounds an action request's body.
	MaxActionBody = 1 << 10
)

// Actions the page may ask for (POST /api/action), named as the control key's commands.
var actions = map[string]bool{"pause": true, "resume": true, "retry-failed": true, "purge-failed": true, "resync": true}

// Options configure the page.
type Options struct {
	// State builds the state the page shows, as of now. Required. It is called at most
	// once per MinInterval for the live pages, and for each /api/state request.
	State func() State
	// Control runs an action (pause, resume, retry-failed, purge-failed, resync) on a
	// device, or on every device for "" where the action allows it, and returns its
	// result text: the control key's code path (agent/remote's Execute).
	Control func(action, device string) (string, error)
	// Token, when set, lets a request act with "Authorization: Bearer <Token>".
	Token string
	// Users, when set, lets its users act with Basic authentication.
	Users Users
	// Bounds; zero takes MaxClients, KeepAlive, WriteTimeout, MinInterval.
	MaxClients   int
	KeepAlive    time.Duration
	WriteTimeout time.Duration
	MinInterval  time.Duration
	// Log receives every action with who asked for it. Default: discard.
	Log     *slog.Logger
	Metrics *Metrics
}

// UI is the operator's page: its handler, the live streams and what feeds them.
type UI struct {
	o    Options
	log  *slog.Logger
	auth *authorizer
	m    *Metrics
	page *page
	dead recentDeadLetters

	changed chan struct{} // capacity 1: something changed (Notify)
	done    chan struct{} // closed by Close: the streams end
	closeMu sync.Once
	wg      sync.WaitGroup

	rounds atomic.Int64 // hub wake-ups handled (tests)

	mu      sync.Mutex
	clients map[*client]struct{}
	last    []byte // the state last sent to the streams
}

// client is one live stream: the hub leaves it the latest message, its handler writes it.
type client struct {
	mu   sync.Mutex
	msg  []byte        // the message to write next; nil: none
	wake chan struct{} // capacity 1
}

func (c *client) put(msg []byte) {
	c.mu.Lock()
	c.msg = msg // a slow client skips to the latest state
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *client) take() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.msg
	c.msg = nil
	return m
}

// New prepares the page; Start runs what feeds the live streams, Handler serves it.
func New(o Options) (*UI, error) {
	if o.State == nil {
		return nil, errors.New("ui: Options.State is required")
	}
	if o.MaxClients <= 0 {
		o.MaxClients = MaxClients
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = KeepAlive
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = WriteTimeout
	}
	if o.MinInterval <= 0 {
		o.MinInterval = MinInterval
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p, err := loadPage()
	if err != nil {
		return nil, err
	}
	return &UI{o: o, log: log, auth: newAuthorizer(o.Token, o.Users), m: o.Metrics, page: p,
		changed: make(chan struct{}, 1), done: make(chan struct{}), clients: map[*client]struct{}{}}, nil
}

// Notify says that something the page shows changed. It never blocks; changes are
// coalesced (at most one state per MinInterval). A nil UI ignores it.
func (u *UI) Notify() {
	if u == nil {
		return
	}
	select {
	case u.changed <- struct{}{}:
	default:
	}
}

// DeadLettered records tasks refused at intake (the deadletter log's payloads,
// {"reason":…,"payload":…}) for the page, and notifies. A nil UI ignores it.
func (u *UI) DeadLettered(payloads [][]byte) {
	if u == nil {
		return
	}
	u.dead.add(payloads, time.Now())
	u.Notify()
}

// RecentDeadLetters returns the deadletters kept for the page, newest first.
func (u *UI) RecentDeadLetters() []DeadLetter {
	if u == nil {
		return nil
	}
	return u.dead.list()
}

// Handler serves the page (GET /), its state (GET /api/state), its live stream
// (GET /api/events) and its actions (POST /api/action).
func (u *UI) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", u.servePage)
	mux.HandleFunc("GET /api/state", u.serveState)
	mux.HandleFunc("GET /api/events", u.serveEvents)
	mux.HandleFunc("POST /api/action", u.serveAction)
	return mux
}

// Start runs the hub until ctx ends or Close: on a change (Notify), at the moment the
// first online terminal would go offline, and at each keep-alive while streams are open,
// it builds the state and sends it to the streams if it differs from the last one sent.
// With no stream open it builds nothing and arms no timer. Wait waits for it.
func (u *UI) Start(ctx context.Context) {
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		u.run(ctx)
	}()
}

// Wait returns once the hub Start began has ended.
func (u *UI) Wait() { u.wg.Wait() }

// Close ends the live streams (an HTTP server's Shutdown waits for its handlers, and a
// stream's never ends by itself) and the hub. Safe to call more than once.
func (u *UI) Close() {
	u.closeMu.Do(func() { close(u.done) })
}

func (u *UI) run(ctx context.Context) {
	offline := time.NewTimer(time.Hour)
	offline.Stop()
	keepAlive := time.NewTicker(u.o.KeepAlive)
	keepAlive.Stop()
	defer offline.Stop()
	defer keepAlive.Stop()
	ticking := false
	for {
		ping := false
		select {
		case <-ctx.Done():
			return
		case <-u.done:
			return
		case <-u.changed:
		case <-offline.C:
		case <-keepAlive.C:
			ping = true
		}
		n := u.clientCount()
		u.rounds.Add(1)
		switch {
		case n == 0 && ticking:
			keepAlive.Stop()
			ticking = false
		case n > 0 && !ticking:
			keepAlive.Reset(u.o.KeepAlive)
			ticking = true
		}
		if n == 0 {
			u.mu.Lock()
			u.last = nil // the next stream gets a fresh state
			u.mu.Unlock()
			continue
		}
		st := u.o.State()
		msg := stateEvent(st)
		u.mu.Lock()
		same := string(msg) == string(u.last)
		if !same {
			u.last = msg
		}
		u.mu.Unlock()
		switch {
		case !same:
			u.broadcast(msg)
		case ping:
			u.broadcast([]byte(": keep-alive\n\n"))
		}
		if at, ok := nextOffline(st); ok {
			offline.Reset(time.Until(at))
		}
		// Coalesce: what changes meanwhile is sent as one state after the pause.
		select {
		case <-ctx.Done():
			return
		case <-u.done:
			return
		case <-time.After(u.o.MinInterval):
		}
	}
}

// nextOffline is when the first online terminal goes offline unless heard from, a little
// after, so that the state built then says offline.
func nextOffline(st State) (time.Time, bool) {
	var first int64
	for _, t := range st.Terminals {
		if t.Online && t.OnlineUntil > 0 && (first == 0 || t.OnlineUntil < first) {
			first = t.OnlineUntil
		}
	}
	if first == 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(first).Add(20 * time.Millisecond), true
}

func stateEvent(st State) []byte {
	b, err := json.Marshal(st)
	if err != nil {
		b = []byte(`{"error":"state not encodable"}`)
	}
	out := make([]byte, 0, len(b)+32)
	out = append(out, "event: state\ndata: "...)
	out = append(out, b...) // JSON without newlines: one data line
	return append(out, "\n\n"...)
}

func (u *UI) broadcast(msg []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for c := range u.clients {
		c.put(msg)
	}
}

func (u *UI) clientCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.clients)
}

// join adds a stream, or reports false when MaxClients are open.
func (u *UI) join() (*client, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.clients) >= u.o.MaxClients {
		return nil, false
	}
	c := &client{wake: make(chan struct{}, 1)}
	u.clients[c] = struct{}{}
	u.m.clients(len(u.clients))
	return c, true
}

func (u *UI) leave(c *client) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.clients, c)
	u.m.clients(len(u.clients))
}

// Metrics are the page's series.
type Metrics struct {
	Clients *metrics.Gauge
	Dropped *metrics.Counter
	Refused *metrics.Counter
	Actions *metrics.CounterVec
}

// NewMetrics registers the page's series in r.
func NewMetrics(r *metrics.Registry) *Metrics {
	return &Metrics{
		Clients: r.NewGauge("faceagent_ui_streams", "Live operator pages (server-sent event streams) open, against the page's max clients."),
		Dropped: r.NewCounter("faceagent_ui_streams_dropped_total", "Live streams dropped because a write did not finish within the write timeout."),
		Refused: r.NewCounter("faceagent_ui_streams_refused_total", "Live streams refused because the page's max clients were open."),
		Actions: r.NewCounterVec("faceagent_ui_actions_total",
			"Actions asked for on the operator's page, by outcome: done, failed (the action refused), unauthorized (missing or wrong credentials).", "outcome"),
	}
}

func (m *Metrics) clients(n int) {
	if m != nil && m.Clients != nil {
		m.Clients.Set(float64(n))
	}
}

func (m *Metrics) dropped() {
	if m != nil && m.Dropped != nil {
		m.Dropped.Inc()
	}
}

func (m *Metrics) refused() {
	if m != nil && m.Refused != nil {
		m.Refused.Inc()
	}
}

func (m *Metrics) action(outcome string) {
	if m != nil && m.Actions != nil {
		m.Actions.With(outcome).Inc()
	}
}
