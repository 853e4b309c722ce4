package config

import (
	"strings"
	"time"
)

// Config is the agent's whole configuration: the file's values over the board profile's
// over the defaults of [Default]. Sections that the file may omit to switch a feature off
// ([broker], [upstream], [intake.http]) are pointers: nil means "not configured".
//
// The toml tags are the file's key names; tools read these structs, so the names are part
// of the contract in docs/design.md ("Configuration names").
type Config struct {
	Agent     Agent     `toml:"agent"`
	Broker    *Broker   `toml:"broker,omitempty"`
	Upstream  *Upstream `toml:"upstream,omitempty"`
	Dispatch  Dispatch  `toml:"dispatch"`
	Journal   Journal   `toml:"journal"`
	Intake    Intake    `toml:"intake"`
	Reports   Reports   `toml:"reports"`
	Whitelist Whitelist `toml:"whitelist"`
	Faces     Faces     `toml:"faces"`
	Store     Store     `toml:"store"`
	Topics    Topics    `toml:"topics"`
	Log       Log       `toml:"log"`
	Metrics   Metrics   `toml:"metrics"`
	UI        UI        `toml:"ui"`
	Devices   []Device  `toml:"devices"`

	// File is the path the configuration was loaded from ("" for in-memory input).
	File string `toml:"-"`
}

// Agent is the [agent] section.
type Agent struct {
	// GatewayID names this gateway in every upstream topic and store key ({gw}).
	// Required unless the config runs the embedded broker alone.
	GatewayID string `toml:"gateway_id"`
	// DataDir holds the journal, the broker's sessions and persisted store keys.
	DataDir string `toml:"data_dir"`
	// Board names a profile in boards/ whose values fill in keys the file leaves out.
	Board string `toml:"board"`
	// GoMemLimit sets the Go runtime's soft memory limit (debug.SetMemoryLimit); 0 leaves it
	// to the GOMEMLIMIT environment variable.
	GoMemLimit Size `toml:"gomemlimit"`
	// ShutdownTimeout bounds a clean stop: the in-flight write, the journal flush, the
	// last reports.
	ShutdownTimeout Duration `toml:"shutdown_timeout"`
}

// Broker is the [broker] section: the embedded MQTT5 broker and state store.
type Broker struct {
	Listen string `toml:"listen"`
	// TLSCert and TLSKey switch the listener to TLS; TLSClientCA additionally requires
	// client certificates signed by that CA.
	TLSCert     string `toml:"tls_cert"`
	TLSKey      string `toml:"tls_key"`
	TLSClientCA string `toml:"tls_client_ca"`
	// UsersFile is the broker's users file: TOML [[users]] with bcrypt password hashes and
	// per-user topic and state store key rules (package agent/broker, "Users file").
	UsersFile string `toml:"users_file"`
	// AllowAnonymous lets clients connect without credentials. Unset, it is true exactly
	// when neither users_file nor tls_client_ca is set.
	AllowAnonymous *bool `toml:"allow_anonymous"`
	// Persist keeps sessions, their queued messages and retained messages in data_dir
	// across restarts.
	Persist bool `toml:"persist"`
	// Quotas; 0 means unlimited where noted in configs/agent.toml.
	// MaxConnecting bounds the connections accepted but not yet past CONNECT; a socket
	// beyond it (or beyond max_clients + max_connecting) is closed as soon as it is accepted.
	MaxConnecting     int  `toml:"max_connecting"`
	MaxPacketSize     Size `toml:"max_packet_size"`
	ReceiveMaximum    int  `toml:"receive_maximum"`
	MaxQueuedMessages int  `toml:"max_queued_messages"`
	// MaxMessageExpiry caps how long a message waits for a subscriber's session; 0: no
	// cap (a message without its own Message Expiry waits while the session lives).
	MaxMessageExpiry  Duration `toml:"max_message_expiry"`
	StoreMaxKeys      int      `toml:"store_max_keys"`
	StoreMaxValueSize Size     `toml:"store_max_value_size"`
	// StoreMaxBytes bounds the state store's memory: keys, values, their bookkeeping and
	// KEYNOTIFY registrations; the notifications waiting for slow watchers get a second
	// budget of the same size. Boards too small for the default set their own.
	StoreMaxBytes Size `toml:"store_max_bytes"`
	// StoreMaxKeySize bounds one key (in every command).
	StoreMaxKeySize Size `toml:"store_max_key_size"`
	// StoreMaxNotify bounds the KEYNOTIFY registrations of one connection.
	StoreMaxNotify int `toml:"store_max_notify"`
	// Bounds of what clients can make the broker hold (agent/broker doc.go, "Bounds"):
	// clients known (connected or kept for their session), subscriptions of one session,
	// bytes queued for writing to one client, bytes one session holds (messages queued or
	// in flight, subscriptions, will), the same over every session, bytes of retained
	// messages. None is unlimited; max_clients = 0 (once "unlimited") means the default.
	MaxClients           int  `toml:"max_clients"`
	MaxSubscriptions     int  `toml:"max_subscriptions"`
	MaxPendingWriteBytes Size `toml:"max_pending_write_bytes"`
	MaxSessionBytes      Size `toml:"max_session_bytes"`
	MaxQueuedBytes       Size `toml:"max_queued_bytes"`
	MaxRetainedBytes     Size `toml:"max_retained_bytes"`
	// MaxInboundBytes bounds the bytes of packets over 64 KiB being read and handled at
	// once, all connections together (a connection whose packet does not fit waits).
	MaxInboundBytes Size `toml:"max_inbound_bytes"`
	// ServerKeepAlive bounds every client's keep-alive: a client asking for none (0) or
	// for more is held to this one (told in CONNACK under MQTT 5) and disconnected after
	// 1.5 times it without a packet. Whole seconds, 1s..65535s.
	ServerKeepAlive Duration `toml:"server_keep_alive"`
}

// Anonymous reports whether anonymous clients are accepted, resolving the unset default.
func (b *Broker) Anonymous() bool {
	if b.AllowAnonymous != nil {
		return *b.AllowAnonymous
	}
	return b.UsersFile == "" && b.TLSClientCA == ""
}

// Upstream is the [upstream] section: the broker that carries tasks, reports and the state
// store. Without it, and with [broker], the agent talks to its embedded broker in-process.
type Upstream struct {
	// URL is mqtt://host:port or mqtts://host:port (tcp://, ssl:// and tls:// too).
	URL      string `toml:"url"`
	ClientID string `toml:"client_id"`
	// TLS: a CA bundle to verify the server, and a client certificate for mutual TLS.
	TLSCA         string `toml:"tls_ca"`
	TLSCert       string `toml:"tls_cert"`
	TLSKey        string `toml:"tls_key"`
	TLSServerName string `toml:"tls_server_name"`
	// Credentials: the password comes from a file or an environment variable, never from
	// this file, so the config can be shared and printed.
	Username     string `toml:"username"`
	PasswordFile string `toml:"password_file"`
	PasswordEnv  string `toml:"password_env"`
	// Password is resolved from PasswordFile or PasswordEnv by Load; it is never printed.
	Password string `toml:"-"`

	KeepAlive      Duration `toml:"keepalive"`
	ConnectTimeout Duration `toml:"connect_timeout"`
	SessionExpiry  Duration `toml:"session_expiry"`
	ReconnectMax   Duration `toml:"reconnect_max"`
	// PublishWindow is how many reports each report stream (results, forwarded acks and
	// heartbeats, deadletters) keeps in flight, unacknowledged, on the connection.
	PublishWindow int `toml:"publish_window"`
}

// Dispatch is the [dispatch] section: how commands go to terminals. Devices may override
// retry_interval, max_tries and heartbeat_timeout.
type Dispatch struct {
	RetryInterval    Duration `toml:"retry_interval"`
	MaxTries         int      `toml:"max_tries"`
	HeartbeatTimeout Duration `toml:"heartbeat_timeout"`
	// BackoffMax caps the retry interval, which doubles with each try.
	BackoffMax Duration `toml:"backoff_max"`
	// FailedRetention is how long failed commands stay in the journal for "retry failed".
	FailedRetention Duration `toml:"failed_retention"`
	// Queue bounds: tasks beyond them are refused at intake (deadletter, "over a bound").
	MaxQueuePerDevice int `toml:"max_queue_per_device"`
	MaxQueueTotal     int `toml:"max_queue_total"`
	// MaxBatch bounds the persons of one AddPersons batch, whatever a terminal announces
	// (protocol v2 heartbeat "batch"); 1 turns batches off.
	MaxBatch int `toml:"max_batch"`
}

// Journal is the [journal] section: when the on-disk journal fsyncs. Board profiles set
// it to suit their storage (eMMC "always", SD cards "batch").
type Journal struct {
	// Sync is "always" (fsync before an append returns), "batch" (the same, with a pause
	// of batch_window between one fsync and the next batch, so that appends gather and
	// share one fsync; each still returns only after it; an append after a quiet spell is
	// not delayed) or "none" (never fsync: tmpfs and tests only — a power cut loses
	// acknowledged tasks).
	Sync        string   `toml:"sync"`
	BatchWindow Duration `toml:"batch_window"`
}

// Journal sync policies.
const (
	SyncAlways = "always"
	SyncBatch  = "batch"
	SyncNone   = "none"
)

// Intake is the [intake] section: bounds on what the back office sends, and the optional
// HTTP pull source.
type Intake struct {
	// MaxBatch is the most tasks one upstream message may carry.
	MaxBatch int `toml:"max_batch"`
	// MaxMessageSize is the largest task message accepted.
	MaxMessageSize Size `toml:"max_message_size"`
	// MaxDeadLetters and MaxDeadLetterBytes bound the deadletter backlog: refused tasks'
	// deadletters journalled and not yet accepted upstream (bytes are their payloads). A
	// task message whose deadletters do not fit is not acknowledged, so it comes again.
	MaxDeadLetters     int  `toml:"max_deadletters"`
	MaxDeadLetterBytes Size `toml:"max_deadletter_bytes"`
	// MaxWhitelist is the most persons one SetWhitelist task may carry; a larger one is
	// dead-lettered. 0 refuses SetWhitelist tasks.
	MaxWhitelist int         `toml:"max_whitelist"`
	HTTP         *IntakeHTTP `toml:"http,omitempty"`
}

// IntakeHTTP is [intake.http]: a back office API polled for pages of tasks; results are
// POSTed back to ResultsURL.
type IntakeHTTP struct {
	URL        string   `toml:"url"`
	ResultsURL string   `toml:"results_url"`
	PageSize   int      `toml:"page_size"`
	Interval   Duration `toml:"interval"`
	Timeout    Duration `toml:"timeout"`
	// AuthHeader names the header that carries the credential; its value comes from
	// AuthValueFile or AuthValueEnv.
	AuthHeader    string `toml:"auth_header"`
	AuthValueFile string `toml:"auth_value_file"`
	AuthValueEnv  string `toml:"auth_value_env"`
	// AuthValue is resolved by Load; it is never printed.
	AuthValue string `toml:"-"`
}

// Reports is the [reports] section: bounds of what waits for the upstream broker besides
// the results (which the outbox's journal holds, within [dispatch]'s queue bounds).
type Reports struct {
	// MaxForwarded and MaxForwardedBytes bound the terminals' acks and heartbeats waiting
	// to be forwarded upstream (bytes are payloads and device ids); at the bound the oldest
	// acks not yet sent are dropped.
	MaxForwarded      int  `toml:"max_forwarded"`
	MaxForwardedBytes Size `toml:"max_forwarded_bytes"`
	// MaxSyncReports and MaxSyncReportBytes bound the whitelist sync reports waiting for
	// the upstream broker (bytes are their payloads); at the bound the oldest are dropped.
	MaxSyncReports     int  `toml:"max_sync_reports"`
	MaxSyncReportBytes Size `toml:"max_sync_report_bytes"`
}

// Whitelist is the [whitelist] section: bounds of the terminals' desired whitelists, kept
// in data_dir/whitelist. A task that would pass one is dead-lettered ("over a bound").
type Whitelist struct {
	// MaxTerminals bounds the terminals with a desired whitelist.
	MaxTerminals int `toml:"max_terminals"`
	// MaxPersons bounds one terminal's desired whitelist.
	MaxPersons int `toml:"max_persons"`
	// MaxRecords bounds the distinct person records across terminals (a record several
	// terminals share counts once).
	MaxRecords int `toml:"max_records"`
	// MaxSetTasks bounds the SetWhitelist tasks kept: pending (one a terminal) or finished
	// with a result not yet reported. A SetWhitelist beyond it is dead-lettered.
	MaxSetTasks int `toml:"max_set_tasks"`

	// Reconcile turns whitelist sync on: a terminal whose heartbeat shows drift (a changed
	// serial, a digest or a person count other than the desired list's) is listed and
	// repaired through its queue.
	Reconcile bool `toml:"reconcile"`
	// MaxReconciling bounds the terminals reconciling at once; the others wait their turn.
	MaxReconciling int `toml:"max_reconciling"`
	// BackoffBase and BackoffMax bound the wait before a terminal's next reconciliation
	// after one failed or did not take: BackoffBase doubled per such one in a row, at most
	// BackoffMax.
	BackoffBase Duration `toml:"backoff_base"`
	BackoffMax  Duration `toml:"backoff_max"`
	// StepTimeout bounds the wait for the reply to one of a reconciliation's commands.
	StepTimeout Duration `toml:"step_timeout"`
	// ListLimit is the ListPersons page size asked of MQTT terminals (serial terminals get
	// the largest page whose ack fits in one frame).
	ListLimit int `toml:"list_limit"`
}

// Faces is the [faces] section: the face store in data_dir/faces, each face the tasks
// bring kept once per gateway (agent/faces).
type Faces struct {
	// MaxBytes bounds the disk the faces take, each counted as its size rounded up to
	// 4 KiB; a task whose face would pass it is dead-lettered with a reason naming the key.
	MaxBytes Size `toml:"max_bytes"`
	// ChunkSerial and ChunkMQTT are the PutFace chunk sizes (face bytes in one command)
	// sent to serial and MQTT terminals. A serial chunk must fit one frame.
	ChunkSerial Size `toml:"chunk_serial"`
	ChunkMQTT   Size `toml:"chunk_mqtt"`
}

// Store is the [store] section: device state written to the state store.
type Store struct {
	// WriteInterval is the least time between two writes of one device's state.
	WriteInterval  Duration `toml:"write_interval"`
	RequestTimeout Duration `toml:"request_timeout"`
}

// Topics is the [topics] section: the terminal-side topic templates; {id} is the device id.
type Topics struct {
	DeviceCommand   string `toml:"device_command"`
	DeviceAck       string `toml:"device_ack"`
	DeviceHeartbeat string `toml:"device_heartbeat"`
}

// Command returns the command topic of device id.
func (t Topics) Command(id string) string { return strings.ReplaceAll(t.DeviceCommand, "{id}", id) }

// Ack returns the ack topic of device id.
func (t Topics) Ack(id string) string { return strings.ReplaceAll(t.DeviceAck, "{id}", id) }

// Heartbeat returns the heartbeat topic of device id.
func (t Topics) Heartbeat(id string) string {
	return strings.ReplaceAll(t.DeviceHeartbeat, "{id}", id)
}

// Log is the [log] section.
type Log struct {
	Level  string `toml:"level"`  // debug, info, warn, error
	Format string `toml:"format"` // text or json
}

// Metrics is the [metrics] section.
type Metrics struct {
	// Listen serves /metrics and /healthz; "" switches the endpoint off.
	Listen string `toml:"listen"`
	// Bounds of the HTTP server: a request's header must arrive within ReadHeaderTimeout
	// and be at most MaxHeaderBytes, the whole request within ReadTimeout, the response be
	// written within WriteTimeout; a keep-alive connection idle for IdleTimeout is closed;
	// at most MaxConnections are open, and one beyond is closed as soon as it is accepted.
	ReadHeaderTimeout Duration `toml:"read_header_timeout"`
	ReadTimeout       Duration `toml:"read_timeout"`
	WriteTimeout      Duration `toml:"write_timeout"`
	IdleTimeout       Duration `toml:"idle_timeout"`
	MaxHeaderBytes    Size     `toml:"max_header_bytes"`
	MaxConnections    int      `toml:"max_connections"`
}

// UI is the [ui] section: the operator's page (package agent/ui).
type UI struct {
	// Listen serves the page, /api/state and /api/events; "" switches it off. The same
	// address as [metrics] listen serves it from that server, under "/".
	Listen string `toml:"listen"`
	// TokenFile holds the token that actions (pause, retry, …) need, sent as
	// "Authorization: Bearer <token>"; "" without one. The users of [broker] users_file may
	// act too (Basic authentication).
	TokenFile string `toml:"token_file"`
	// Token is read from TokenFile by Load; it is never printed.
	Token string `toml:"-"`
}

// Device is one [[devices]] entry.
type Device struct {
	ID        string `toml:"id"`
	Transport string `toml:"transport"` // mqtt or serial
	// Serial line settings (transport = "serial" only).
	Port     string `toml:"port,omitempty"`
	Baud     int    `toml:"baud,omitzero"`
	DataBits int    `toml:"data_bits,omitzero"`
	Parity   string `toml:"parity,omitempty"` // none, even, odd, mark, space
	StopBits int    `toml:"stop_bits,omitzero"`
	// Heartbeat = false is for firmware without heartbeats: the terminal is then online
	// from the start and never times out.
	Heartbeat *bool `toml:"heartbeat"`
	// Overrides of [dispatch]; zero means "as in [dispatch]".
	RetryInterval    Duration `toml:"retry_interval,omitempty"`
	MaxTries         int      `toml:"max_tries,omitzero"`
	HeartbeatTimeout Duration `toml:"heartbeat_timeout,omitempty"`
	// FaceChunk is this terminal's PutFace chunk size; 0: [faces] chunk_serial or
	// chunk_mqtt by its transport.
	FaceChunk Size `toml:"face_chunk,omitzero"`
}

// Transport names.
const (
	TransportMQTT   = "mqtt"
	TransportSerial = "serial"
)

// HasHeartbeat reports whether the terminal sends heartbeats (the default).
func (d *Device) HasHeartbeat() bool { return d.Heartbeat == nil || *d.Heartbeat }

// Effective returns the dispatch settings for device d: its overrides over base.
func (d *Device) Effective(base Dispatch) Dispatch {
	if d.RetryInterval.Duration > 0 {
		base.RetryInterval = d.RetryInterval
	}
	if d.MaxTries > 0 {
		base.MaxTries = d.MaxTries
	}
	if d.HeartbeatTimeout.Duration > 0 {
		base.HeartbeatTimeout = d.HeartbeatTimeout
	}
	return base
}

// Device returns the device with the given id, or nil.
func (c *Config) Device(id string) *Device {
	for i := range c.Devices {
		if c.Devices[i].ID == id {
			return &c.Devices[i]
		}
	}
	return nil
}

// BrokerOnly reports whether the config runs the embedded broker and state store alone:
// [broker] and nothing that needs a gateway (no devices, no upstream, no HTTP intake).
func (c *Config) BrokerOnly() bool {
	return c.Broker != nil && c.Upstream == nil && len(c.Devices) == 0 && c.Intake.HTTP == nil
}

// Default values, in one place. Load starts from these, lays the board profile over them,
// then the file.
var (
	defaultAgent = Agent{
		DataDir:         "/var/lib/faceagent",
		ShutdownTimeout: D(10 * time.Second),
	}
	defaultBroker = Broker{
		Listen:            "127.0.0.1:1883",
		Persist:           true,
		MaxConnecting:     128,
		MaxPacketSize:     1 << 20,
		ReceiveMaximum:    1024,
		MaxQueuedMessages: 10000,
		StoreMaxKeys:      100000,
		StoreMaxValueSize: 64 << 10,
		StoreMaxBytes:     16 << 20,
		StoreMaxKeySize:   1 << 10,
		StoreMaxNotify:    1024,
		// The embedded broker's own defaults (agent/broker bounds.go; TestBrokerBoundDefaults).
		MaxClients:           128,
		MaxSubscriptions:     64,
		MaxPendingWriteBytes: 64 << 10,
		MaxSessionBytes:      4 << 20,
		MaxQueuedBytes:       12 << 20,
		MaxRetainedBytes:     4 << 20,
		MaxInboundBytes:      8 << 20,
		ServerKeepAlive:      D(5 * time.Minute),
	}
	defaultUpstream = Upstream{
		KeepAlive:      D(30 * time.Second),
		ConnectTimeout: D(10 * time.Second),
		SessionExpiry:  D(24 * time.Hour),
		ReconnectMax:   D(30 * time.Second),
		PublishWindow:  64,
	}
	defaultDispatch = Dispatch{
		RetryInterval:     D(2 * time.Second),
		MaxTries:          5,
		HeartbeatTimeout:  D(30 * time.Second),
		BackoffMax:        D(30 * time.Second),
		FailedRetention:   D(7 * 24 * time.Hour),
		MaxQueuePerDevice: 10000,
		MaxQueueTotal:     200000,
		MaxBatch:          30,
	}
	defaultJournal = Journal{
		Sync:        SyncAlways,
		BatchWindow: D(2 * time.Millisecond),
	}
	defaultIntake = Intake{
		MaxBatch:           1000,
		MaxMessageSize:     1 << 20,
		MaxDeadLetters:     4096,
		MaxDeadLetterBytes: 4 << 20,
		MaxWhitelist:       8000,
	}
	defaultWhitelist = Whitelist{
		MaxTerminals: 1024,
		MaxPersons:   100000,
		MaxRecords:   200000,
		MaxSetTasks:  1024,

		Reconcile:      true,
		MaxReconciling: 4,
		BackoffBase:    D(5 * time.Second),
		BackoffMax:     D(10 * time.Minute),
		StepTimeout:    D(15 * time.Minute),
		ListLimit:      100,
	}
	defaultFaces   = Faces{MaxBytes: 1 << 30, ChunkSerial: 4 << 10, ChunkMQTT: 64 << 10}
	defaultReports = Reports{
		MaxForwarded:       8192,
		MaxForwardedBytes:  1 << 20,
		MaxSyncReports:     4096,
		MaxSyncReportBytes: 1 << 20,
	}
	defaultIntakeHTTP = IntakeHTTP{
		PageSize:   100,
		Interval:   D(10 * time.Second),
		Timeout:    D(10 * time.Second),
		AuthHeader: "Authorization",
	}
	defaultStore = Store{
		WriteInterval:  D(time.Second),
		RequestTimeout: D(5 * time.Second),
	}
	defaultTopics = Topics{
		DeviceCommand:   "dev/face/{id}",
		DeviceAck:       "dev/face/{id}/Ack",
		DeviceHeartbeat: "dev/face/{id}/heartbeat",
	}
	defaultLog     = Log{Level: "info", Format: "text"}
	defaultMetrics = Metrics{
		ReadHeaderTimeout: D(5 * time.Second),
		ReadTimeout:       D(10 * time.Second),
		WriteTimeout:      D(10 * time.Second),
		IdleTimeout:       D(30 * time.Second),
		MaxHeaderBytes:    8 << 10,
		MaxConnections:    16,
	}
	defaultDevice = Device{
		Transport: TransportMQTT,
		Baud:      115200,
		DataBits:  8,
		Parity:    "none",
		StopBits:  1,
	}
)

// Default returns the defaults of every always-present section. The optional sections'
// defaults apply when the file names the section.
func Default() *Config {
	return &Config{
		Agent:     defaultAgent,
		Dispatch:  defaultDispatch,
		Journal:   defaultJournal,
		Intake:    defaultIntake,
		Reports:   defaultReports,
		Whitelist: defaultWhitelist,
		Faces:     defaultFaces,
		Store:     defaultStore,
		Topics:    defaultTopics,
		Log:       defaultLog,
		Metrics:   defaultMetrics,
	}
}

// DefaultBroker returns the [broker] defaults.
func DefaultBroker() *Broker { b := defaultBroker; return &b }

// DefaultUpstream returns the [upstream] defaults.
func DefaultUpstream() *Upstream { u := defaultUpstream; return &u }

// DefaultIntakeHTTP returns the [intake.http] defaults.
func DefaultIntakeHTTP() *IntakeHTTP { h := defaultIntakeHTTP; return &h }

// DefaultDevice returns the defaults of a [[devices]] entry (without an id).
func DefaultDevice() Device { return defaultDevice }
