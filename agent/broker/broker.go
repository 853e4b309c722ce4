package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
)

// DefaultListen is the address used when Options.Listen is empty.
const DefaultListen = "127.0.0.1:1883"

// Files kept in Options.DataDir.
const (
	SessionsDir  = "broker-sessions"     // journal of kept sessions, subscriptions, in-flight and retained messages
	SnapshotFile = "statestore.snapshot" // state store keys written with aio-persistence
)

// Options configure a Broker. The zero value listens on DefaultListen, keeps
// everything in memory and refuses every client (set AllowAnonymous or
// UsersFile).
type Options struct {
	// Listen is the TCP address, "127.0.0.1:0" for any free port.
	Listen string

	// TLS, when CertFile and KeyFile are set, serves MQTT over TLS on Listen.
	TLS TLSOptions

	// ServerKeepAlive bounds every client's keep-alive (default
	// DefaultServerKeepAlive, 300 s; whole seconds, at most 65,535): a client
	// asking for none (0) or for more gets this one, in CONNACK's Server Keep
	// Alive when it speaks MQTT 5, and is disconnected after 1.5 times it without
	// a packet (MQTT 3.1.1 clients too, which cannot be told). See keepalive.go.
	ServerKeepAlive time.Duration

	// ConnectTimeout bounds the wait for a new connection's CONNECT
	// (default DefaultConnectTimeout); WriteTimeout bounds every write to a
	// client (default DefaultWriteTimeout): a peer that stops reading is cut
	// off instead of holding a goroutine, or Close, forever. It also bounds
	// how long a PUBACK waits for the answer to a change of a persistent key
	// (its snapshot not written: the client is disconnected unacknowledged).
	ConnectTimeout time.Duration
	WriteTimeout   time.Duration
	// MaxConnecting bounds the connections accepted but not yet past CONNECT (0:
	// DefaultMaxConnecting). A socket beyond it, or beyond MaxClients + MaxConnecting open
	// connections, is closed as soon as it is accepted.
	MaxConnecting int

	// AllowAnonymous lets clients connect without a user name. Without it, a
	// client needs a user from UsersFile (or Users).
	AllowAnonymous bool
	// UsersFile is a TOML file of users with bcrypt password hashes and
	// their topic and key rules (see doc.go, "Users file").
	UsersFile string
	// Users adds users in code (tests, embedding); they are merged with
	// UsersFile and win on equal names.
	Users []User
	// Anonymous holds the rules of anonymous clients; nil takes the users
	// file's [anonymous] table, and without one allows everything.
	Anonymous *Rules

	// DataDir, when set, keeps MQTT sessions (a journal in SessionsDir) and the state store's
	// persistent keys there across restarts. Empty: everything in memory.
	DataDir string
	// SessionsSegmentSize is the segment size of the sessions journal (0:
	// DefaultSessionsSegmentSize, 4 MiB). The journal's files stay within about twice the
	// live records plus two segments (doc.go, "Persistence"): the open segment's blocks are
	// reserved at its creation, and compaction waits for a segment's worth of dead bytes.
	SessionsSegmentSize int64
	// VolatileTopics are topic filters whose messages are not written to the
	// sessions journal: a kept session still gets them while the broker runs,
	// but not after a restart (informational messages, e.g. forwarded
	// heartbeats). Only with DataDir.
	VolatileTopics []string

	// Client limits (mochi capabilities); 0 keeps mochi's default.
	MaxPacketSize  uint32 // bytes of one packet
	ReceiveMaximum uint16 // unacknowledged QoS 1/2 messages per client, inbound
	MaxInflight    uint16 // QoS 1/2 messages held per client (queued while offline included)
	// MaxMessageExpiry is the Maximum Message Expiry: a message waits at most this long
	// for a subscriber (queued for its session, or sent and unacknowledged), whatever its
	// own Message Expiry says. 0: no maximum: a message without a Message Expiry waits as
	// long as its subscriber's session lives, held to MaxSessionBytes and MaxQueuedBytes
	// like everything a session holds, so a back office away for longer than any fixed
	// expiry still gets its results. Whole seconds.
	MaxMessageExpiry time.Duration
	// MaxPendingWrites bounds the packets queued for writing to one client
	// (mochi's MaximumClientWritesPending); beyond it messages to that client
	// are held or dropped as beyond MaxPendingWriteBytes. 0 means
	// DefaultMaxPendingWrites (1,024, 8 bytes a slot allocated for every client).
	MaxPendingWrites int32

	// Bounds in bytes and counts (bounds.go): 0 means the Default one, a negative value
	// none. What they count and what is refused beyond them is in doc.go, "Bounds".
	//
	// MaxClients: clients the broker knows, connected or kept for their session.
	// MaxSubscriptions: subscriptions of one session.
	// MaxPendingWriteBytes: bytes of messages queued for writing to one client.
	// MaxSessionBytes: bytes one session holds (messages queued or in flight,
	// subscriptions, will). MaxQueuedBytes: the same over every session.
	// MaxRetainedBytes: bytes of the retained messages. MaxInboundBytes: bytes of packets
	// over 64 KiB being read and handled at once, all connections together.
	MaxClients           int64
	MaxSubscriptions     int32
	MaxPendingWriteBytes int64
	MaxSessionBytes      int64
	MaxQueuedBytes       int64
	MaxRetainedBytes     int64
	MaxInboundBytes      int64
	// TerminalTopic, when set, reports whether topic is the command topic of one terminal
	// (the agent: dev/face/{id} of a configured device). A client whose first SUBSCRIBE is
	// for such topics only gets a queue of TerminalPendingWrites instead (0:
	// DefaultTerminalPendingWrites, 32), a 352-byte allocation where a queue of 1,024 is
	// 9,472 bytes. See queues.go and SetTerminalTopic.
	TerminalTopic         func(topic string) bool
	TerminalPendingWrites int32

	// State store bounds; 0 means no bound (see statestore.Options). MaxBytes
	// bounds the store's keys, values, bookkeeping and KEYNOTIFY
	// registrations, and, as a second budget of the same size, the
	// notifications queued for or unacknowledged by all watchers together.
	MaxKeys      int
	MaxBytes     int64
	MaxKeySize   int
	MaxValueSize int
	MaxNotify    int // KEYNOTIFY registrations per connection
	// ReservedKeyPrefixes are state store key prefixes only the in-process
	// owner writes (Store().Do with statestore.Request.Owner); network
	// clients may read and watch them, and are answered "not authorized" when
	// they write there. The agent reserves its device-state keys.
	ReservedKeyPrefixes []string
	// NotifyAckTimeout: a connection that keeps a KEYNOTIFY notification
	// waiting for room in its Receive Maximum and acknowledges nothing for
	// this long is disconnected (CodeNotifyStalled). 0 means
	// DefaultNotifyAckTimeout (30 s).
	NotifyAckTimeout time.Duration
	// StateStoreNode is the HLC node id of the store's versions
	// (statestore.DefaultNode when empty).
	StateStoreNode string

	// Logger receives the broker's and the store's logs. Default: discard.
	Logger *slog.Logger
}

// TLSOptions are file paths of PEM certificates and keys.
type TLSOptions struct {
	CertFile string
	KeyFile  string
	// ClientCAFile, when set, requires every client to present a
	// certificate signed by one of these CAs (mutual TLS).
	ClientCAFile string
}

// Broker is the embedded MQTT 3.1.1/5 broker with the state store service.
type Broker struct {
	opts     Options
	log      *slog.Logger
	srv      *mqtt.Server
	listener *tcpListener
	store    *statestore.Store
	service  *service
	auth     *authHook
	sessions *sessionStore // nil without DataDir
	health   *healthSignal // OnHealthChanged's; shared with the listener and the sessions journal
	takeover *takeoverGuard
	deferred *mqtt.Client // inline client of PublishDeferred
	drops    *dropLog
	// housekeeper drives mochi's expiry loop; nil if mochi's layout was not recognised.
	housekeeper *housekeeper
	// terminals shortens terminals' queues of pending writes; nil if mochi's layout was
	// not recognised.
	terminals *terminalQueues
	// subscribes calls the WatchSubscribes functions; intercept, added by the first
	// Intercept, runs the intercepted topics' functions.
	subscribes *subscribeWatchers
	intercept  *interceptHook

	// serving is closed by Start, once the stored sessions are loaded: a message published
	// in-process before would be routed to nobody (Publisher waits for it).
	serving chan struct{}

	mu      sync.Mutex
	started bool
	closed  bool
}

// New configures a broker; it does not listen yet (see Start). It fails on
// an unreadable users or TLS file, a corrupt state store snapshot, or a
// configuration that would let nobody in.
func New(opts *Options) (*Broker, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// Every line a client can cause is rate-limited per reason and clipped (ratelog.go):
	// mochi's, the hooks', the store's, the listener's.
	logs := newLogLimiter(LogEvery)
	o.Logger = newLimitedLogger(o.Logger, logs, false)
	users, fileAnonymous, err := loadUsers(o.UsersFile, o.Users)
	if err != nil {
		return nil, err
	}
	if o.Anonymous == nil {
		o.Anonymous = fileAnonymous
	}
	if len(users) == 0 && !o.AllowAnonymous {
		return nil, errors.New("broker: no users and allow_anonymous is off: nobody could connect")
	}
	tlsConfig, err := o.TLS.config()
	if err != nil {
		return nil, err
	}

	caps := mqtt.NewDefaultServerCapabilities()
	// Without this, mochi's PUBACK echoes the request's user properties with
	// reason code 0x01 (docs/design.md "Library facts").
	caps.Compatibilities.NoInheritedPropertiesOnAck = true
	applyBounds(caps, &o)
	if o.MaxPacketSize > 0 {
		caps.MaximumPacketSize = o.MaxPacketSize
	}
	if o.ReceiveMaximum > 0 {
		caps.ReceiveMaximum = o.ReceiveMaximum
	}
	if o.MaxInflight > 0 {
		caps.MaximumInflight = o.MaxInflight
	}
	// [MQTT-3.3.2-5]: a message's own Message Expiry still applies; this only caps it.
	caps.MaximumMessageExpiryInterval = int64(o.MaxMessageExpiry / time.Second)
	caps.MaximumClientWritesPending = DefaultMaxPendingWrites
	if o.MaxPendingWrites > 0 {
		caps.MaximumClientWritesPending = o.MaxPendingWrites
	}
	// mochi's event loop ticks five times a second even when nothing can expire; the
	// housekeeper ticks it only when something is due (housekeeping.go).
	ticks := mqtt.NewLoopTicks()
	srv := mqtt.New(&mqtt.Options{
		Capabilities: caps,
		Logger:       o.Logger,
		InlineClient: true,
		LoopTicks:    ticks,
	})
	b := &Broker{opts: o, log: o.Logger, srv: srv, serving: make(chan struct{}), health: &healthSignal{}}
	b.housekeeper = newHousekeeper(srv, ticks, o.Logger)
	if err := srv.AddHook(b.housekeeper, nil); err != nil {
		srv.Close()
		return nil, err
	}

	if err := srv.AddHook(newKeepAliveHook(o.ServerKeepAlive), nil); err != nil {
		srv.Close()
		return nil, err
	}

	b.terminals = newTerminalQueues(o.TerminalTopic, o.TerminalPendingWrites)
	if err := srv.AddHook(b.terminals, nil); err != nil {
		srv.Close()
		return nil, err
	}

	b.drops = &dropLog{log: o.Logger}
	if err := srv.AddHook(b.drops, nil); err != nil {
		srv.Close()
		return nil, err
	}
	certUsers := tlsConfig != nil && tlsConfig.ClientCAs != nil && len(users) > 0
	b.auth = newAuthHook(users, o.AllowAnonymous, o.Anonymous, certUsers, newSessionOwners(srv), o.Logger)
	if err := srv.AddHook(b.auth, nil); err != nil {
		return nil, err
	}
	var sessions *sessionStore
	if o.DataDir != "" {
		if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
			srv.Close()
			return nil, fmt.Errorf("broker: data dir: %w", err)
		}
		sessions = &sessionStore{srv: srv, volatile: o.VolatileTopics, log: o.Logger, health: b.health,
			dir: filepath.Join(o.DataDir, SessionsDir), segmentSize: o.SessionsSegmentSize}
		if err := srv.AddHook(sessions, nil); err != nil {
			srv.Close()
			return nil, fmt.Errorf("broker: sessions: %w", err)
		}
	}
	b.sessions = sessions
	// Not in srv.Clients, so the session store does not wait for its messages' records.
	b.deferred = srv.NewClient(nil, mqtt.LocalListener, "$deferred-inline", true)
	takeover := newTakeoverGuard(srv, sessions, o.Logger)
	b.takeover = takeover
	if err := srv.AddHook(takeover, nil); err != nil {
		srv.Close()
		return nil, err
	}
	storeOpts := &statestore.Options{
		Node:             o.StateStoreNode,
		MaxKeys:          o.MaxKeys,
		MaxBytes:         o.MaxBytes,
		MaxKeySize:       o.MaxKeySize,
		MaxValueSize:     o.MaxValueSize,
		MaxNotify:        o.MaxNotify,
		ReservedPrefixes: o.ReservedKeyPrefixes,
		Logger:           o.Logger,
	}
	if o.DataDir != "" {
		storeOpts.SnapshotPath = filepath.Join(o.DataDir, SnapshotFile)
	}
	b.store, err = statestore.New(storeOpts)
	if err != nil {
		b.srv.Close()
		return nil, err
	}
	b.service = newService(srv, b.store, b.auth, o.Logger, &o)
	if sessions != nil { // a state store answer's record holds its request's PUBACK
		sessions.responder = b.service.responder.ID
		b.service.records = sessions
	}
	if err := srv.AddHook(b.service, nil); err != nil {
		_ = b.store.Close()
		srv.Close()
		return nil, err
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxConnecting <= 0 {
		o.MaxConnecting = DefaultMaxConnecting
	}
	b.subscribes = &subscribeWatchers{}
	if err := srv.AddHook(b.subscribes, nil); err != nil {
		srv.Close()
		return nil, err
	}
	b.listener = &tcpListener{
		id: "tcp", address: o.Listen, tlsConfig: tlsConfig, srv: srv,
		connectTimeout: o.ConnectTimeout, writeTimeout: o.WriteTimeout, maxConnecting: o.MaxConnecting,
		log: newLimitedLogger(o.Logger, logs, true), health: b.health,
	}
	if err := srv.AddHook(&listenerHook{l: b.listener}, nil); err != nil {
		srv.Close() // stops the service hook, which closes the store
		return nil, err
	}
	return b, nil
}

// AddHook adds a mochi hook (tests, and code inside this package; the agent uses Intercept
// and the in-process bus, inprocess.go). Call it before Start.
func (b *Broker) AddHook(h mqtt.Hook, config any) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return errors.New("broker: AddHook after Start")
	}
	return b.srv.AddHook(h, config)
}

// SetTerminalTopic sets Options.TerminalTopic; call it before Start. It is for a caller
// that learns its terminals after New (the agent, as it opens its device links).
func (b *Broker) SetTerminalTopic(match func(topic string) bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return errors.New("broker: SetTerminalTopic after Start")
	}
	b.opts.TerminalTopic = match
	if b.terminals != nil {
		b.terminals.match = match
	}
	return nil
}

// Start listens and serves. It does not block: the listener is bound when it
// returns, so Addr is valid and clients may connect.
func (b *Broker) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started || b.closed {
		return errors.New("broker: already started or closed")
	}
	if err := b.srv.AddListener(b.listener); err != nil {
		return fmt.Errorf("broker: listen %s: %w", b.opts.Listen, err)
	}
	if err := b.srv.Serve(); err != nil {
		return err
	}
	b.started = true
	close(b.serving)
	b.log.Info("broker listening", "addr", b.listener.Address(), "tls", b.opts.TLS.CertFile != "")
	return nil
}

// Run starts the broker, serves until ctx is done, then closes it. ready,
// when not nil, is closed once the broker listens (Addr is valid then).
func (b *Broker) Run(ctx context.Context, ready chan<- struct{}) error {
	if err := b.Start(); err != nil {
		return err
	}
	if ready != nil {
		close(ready)
	}
	<-ctx.Done()
	return b.Close()
}

// PublishDeferred publishes like Server().Publish(topic, payload, false, qos),
// except that it may return before the records of the message in kept
// sessions are on disk: call SyncSessions before treating what it published
// as stored. Server().Publish waits for its own group commit; publishing a
// batch with PublishDeferred and one SyncSessions waits once for all.
func (b *Broker) PublishDeferred(topic string, payload []byte, qos byte) error {
	return b.srv.InjectPacket(b.deferred, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos},
		TopicName:   topic,
		Payload:     payload,
		PacketID:    uint16(qos), // as Server.Publish: validity checks want an id, nothing uses it
	})
}

// SyncSessions returns once every in-flight message record queued so far for
// the sessions journal is on disk (fsynced), with the error of the last failed
// commit if one failed. Without DataDir it returns nil at once. A publisher that
// must know whether all it published is stored uses SessionsMark and
// SyncSessionsSince: a commit that failed before a later one succeeded is not
// reported here.
func (b *Broker) SyncSessions() error {
	if b.sessions == nil {
		return nil
	}
	return b.sessions.sync()
}

// Healthy reports nil unless the broker cannot accept connections: Accept has been failing
// (out of file descriptors, say) and is being retried. It recovers by itself once Accept
// succeeds again; the agent's /healthz and systemd watchdog ask it.
func (b *Broker) Healthy() error { return b.listener.healthy() }

// RefusedConnections returns how many sockets were closed as soon as they were accepted,
// beyond Options.MaxConnecting or MaxClients + MaxConnecting.
func (b *Broker) RefusedConnections() int64 { return b.listener.refused.Load() }

// SessionsMark is a point in the writes queued for the sessions journal.
type SessionsMark uint64

// SessionsMark returns the point the writes queued from now on come after.
func (b *Broker) SessionsMark() SessionsMark {
	if b.sessions == nil || b.sessions.commit == nil {
		return 0
	}
	return SessionsMark(b.sessions.commit.mark())
}

// SyncSessionsSince returns once everything queued for the sessions journal so far is
// written, with an error if a write queued after mark failed: nil means that every
// message published (PublishDeferred, Server().Publish) since SessionsMark returned mark
// is on disk for the kept sessions it went to. Without DataDir it returns nil at once.
func (b *Broker) SyncSessionsSince(mark SessionsMark) error {
	if b.sessions == nil || b.sessions.commit == nil {
		return nil
	}
	return b.sessions.commit.syncSince(uint64(mark))
}

// SessionsErr returns the error with which the sessions journal refuses writes (a full
// disk, a failed fsync), nil while it takes them or without DataDir. It recovers by
// itself once the disk takes writes again (doc.go, "Persistence").
func (b *Broker) SessionsErr() error {
	if b.sessions == nil || b.sessions.commit == nil {
		return nil
	}
	return b.sessions.commit.brokenErr()
}

// SessionsStats returns the sessions journal's size and health (zero without DataDir).
func (b *Broker) SessionsStats() SessionsStats {
	if b.sessions == nil || b.sessions.commit == nil {
		return SessionsStats{}
	}
	return b.sessions.commit.stats()
}

// Addr returns the bound host:port (the configured address before Start).
func (b *Broker) Addr() string { return b.listener.Address() }

// Server returns the mochi server, for this package's tests and tools that tune it; the
// agent's parts use the in-process API (inprocess.go), which names no mochi type.
func (b *Broker) Server() *mqtt.Server { return b.srv }

// Store returns the state store engine behind the service.
func (b *Broker) Store() *statestore.Store { return b.store }

// Close disconnects every client, stops the hooks (which flushes the state
// store's snapshot and closes the sessions database) and waits for the
// broker's goroutines. It is idempotent.
func (b *Broker) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	b.service.shutdown() // read loops waiting for answers let go: their clients are going
	if !b.started {
		// Hooks were initialised in New: stop them without serving.
		b.srv.Close()
		return b.service.closeErr
	}
	err := b.srv.Close() // stops hooks; the service hook closes the store
	if err == nil {
		err = b.service.closeErr
	}
	return err
}

func (t TLSOptions) config() (*tls.Config, error) {
	if t.CertFile == "" && t.KeyFile == "" {
		if t.ClientCAFile != "" {
			return nil, errors.New("broker: tls client CA without a certificate and key")
		}
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("broker: tls: %w", err)
	}
	c := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("broker: tls client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("broker: tls client CA %s: no PEM certificates", t.ClientCAFile)
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// HasUsers reports whether the broker has users (a users file or Options.Users).
func (b *Broker) HasUsers() bool { return len(b.auth.users) > 0 }

// CheckPassword reports whether password is user's in the broker's users, with the check
// a CONNECT gets (bcrypt; an unknown user takes as long as a wrong password). The
// operator's page lets these users act.
func (b *Broker) CheckPassword(user, password string) bool {
	return user != "" && b.auth.checkPassword(user, []byte(password))
}
