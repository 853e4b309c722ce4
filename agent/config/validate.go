package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/serial"
)

// Limits checked by validation.
const (
	MaxDevices  = 4096 // terminals per gateway
	MaxIDLength = 64   // gateway and device ids
	MaxTries    = 1000
)

// validID reports whether s may be a gateway or device id: one or more of A-Z a-z 0-9 . _ -.
// An id becomes a topic level and part of store keys, so no '/', '+', '#', spaces or control
// characters.
func validID(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (d *decoder) validate(c *Config) {
	d.validateAgent(c)
	if c.Broker != nil {
		d.validateBroker(c.Broker)
	}
	if c.Upstream != nil {
		d.validateUpstream(c)
	} else if c.Broker == nil && (len(c.Devices) > 0 || c.Intake.HTTP != nil) {
		d.errf("upstream", "missing: the agent needs [upstream] url or an embedded [broker]")
	}
	d.validateDispatch(c.Dispatch)
	d.oneOf("journal.sync", c.Journal.Sync, SyncAlways, SyncBatch, SyncNone)
	if w := c.Journal.BatchWindow.Duration; w <= 0 || w > time.Second {
		d.errf("journal.batch_window", "%s is out of range (more than 0, at most 1s)", w)
	}
	d.validateIntake(c.Intake)
	d.validateReports(c.Reports)
	d.validateWhitelist(c.Whitelist)
	if c.Intake.MaxWhitelist > c.Whitelist.MaxPersons && c.Whitelist.MaxPersons >= 1 {
		d.errf("intake.max_whitelist", "%d is more than whitelist.max_persons (%d): such a SetWhitelist could never be kept", c.Intake.MaxWhitelist, c.Whitelist.MaxPersons)
	}
	if m := c.Faces.MaxBytes; m < MinFacesBytes || m > MaxFacesBytes {
		d.errf("faces.max_bytes", "%d bytes is out of range (1MiB..1TiB)", m)
	}
	if n, most := c.Faces.ChunkSerial, face.ChunkLimitFor(serial.DefaultMaxPayload); n < 1 || n > Size(most) {
		d.errf("faces.chunk_serial", "%d bytes is out of range (1..%d: a chunk must fit one serial frame)", n, most)
	}
	if n := c.Faces.ChunkMQTT; n < 1 || n > face.MaxChunkSize {
		d.errf("faces.chunk_mqtt", "%d bytes is out of range (1..%d)", n, face.MaxChunkSize)
	}
	d.positive("store.write_interval", c.Store.WriteInterval)
	d.positive("store.request_timeout", c.Store.RequestTimeout)
	d.validateTopics(c.Topics)
	d.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	d.oneOf("log.format", c.Log.Format, "text", "json")
	d.validateMetrics(c.Metrics)
	d.validateUI(c)
	d.validateDevices(c)
}

func (d *decoder) validateAgent(c *Config) {
	a := &c.Agent
	switch {
	case a.GatewayID == "" && !c.BrokerOnly() && c.Broker != nil:
		d.errf("agent.gateway_id", "required (only a config with nothing but [broker] may leave it out)")
	case a.GatewayID == "" && c.Broker == nil:
		d.errf("agent.gateway_id", "required")
	case a.GatewayID != "":
		d.id("agent.gateway_id", a.GatewayID)
	}
	if a.DataDir == "" {
		d.errf("agent.data_dir", "must not be empty")
	}
	if a.GoMemLimit != 0 && a.GoMemLimit < 4<<20 {
		d.errf("agent.gomemlimit", "%d bytes is too small (at least 4MiB, or 0 to leave it to GOMEMLIMIT)", a.GoMemLimit)
	}
	d.positive("agent.shutdown_timeout", a.ShutdownTimeout)
}

func (d *decoder) validateBroker(b *Broker) {
	d.hostPort("broker.listen", b.Listen)
	d.pair("broker.tls_cert", b.TLSCert, "broker.tls_key", b.TLSKey)
	if b.TLSClientCA != "" && b.TLSCert == "" {
		d.errf("broker.tls_client_ca", "needs tls_cert and tls_key: client certificates are checked only on a TLS listener")
	}
	if b.AllowAnonymous != nil && !*b.AllowAnonymous && b.UsersFile == "" && b.TLSClientCA == "" {
		d.errf("broker.allow_anonymous", "false, but no users_file or tls_client_ca: no client could connect")
	}
	d.validateBrokerBounds(b)
	d.atLeast("broker.max_connecting", b.MaxConnecting, 1)
	d.atLeast("broker.max_queued_messages", b.MaxQueuedMessages, 0)
	if v := b.MaxMessageExpiry.Duration; v < 0 || v > 0 && (v < time.Second || v%time.Second != 0 || v > math.MaxUint32*time.Second) {
		d.errf("broker.max_message_expiry", "%s is not 0 or a whole number of seconds from 1s to 136y (the MQTT 5 Maximum Message Expiry)", v)
	}
	d.atLeast("broker.store_max_keys", b.StoreMaxKeys, 0)
	if ska := b.ServerKeepAlive.Duration; ska < time.Second || ska > 65535*time.Second {
		d.errf("broker.server_keep_alive", "%s is out of range (1s..18h12m15s, MQTT5 Server Keep Alive)", ska)
	} else if ska%time.Second != 0 {
		d.errf("broker.server_keep_alive", "%s is not a whole number of seconds (MQTT5 Server Keep Alive)", ska)
	}
	if b.ReceiveMaximum < 1 || b.ReceiveMaximum > 65535 {
		d.errf("broker.receive_maximum", "%d is out of range (1..65535, MQTT5 Receive Maximum)", b.ReceiveMaximum)
	}
	if b.MaxPacketSize != 0 && b.MaxPacketSize < 1<<10 {
		d.errf("broker.max_packet_size", "%d bytes is too small (at least 1KiB, or 0 for the protocol's limit)", b.MaxPacketSize)
	} else if b.StoreMaxValueSize <= 0 {
		d.errf("broker.store_max_value_size", "must be positive")
	} else if b.MaxPacketSize != 0 && b.StoreMaxValueSize > b.MaxPacketSize {
		d.errf("broker.store_max_value_size", "%d bytes exceeds max_packet_size (%d): such values could never be sent", b.StoreMaxValueSize, b.MaxPacketSize)
	} else if b.StoreMaxBytes >= MinStoreMaxBytes && b.StoreMaxValueSize > b.StoreMaxBytes {
		d.errf("broker.store_max_value_size", "%d bytes exceeds store_max_bytes (%d): such values could never be stored", b.StoreMaxValueSize, b.StoreMaxBytes)
	}
	if b.StoreMaxBytes < MinStoreMaxBytes {
		d.errf("broker.store_max_bytes", "%d bytes is too small (at least 64KiB)", b.StoreMaxBytes)
	}
	if b.StoreMaxKeySize < 1 || b.StoreMaxKeySize > MaxStoreKeySize {
		d.errf("broker.store_max_key_size", "%d bytes is out of range (1..16KiB: a notification's topic carries the key in hex, and MQTT bounds a topic at 65,535 bytes)", b.StoreMaxKeySize)
	}
	d.atLeast("broker.store_max_notify", b.StoreMaxNotify, 1)
}

// Bounds of the state store keys: store_max_bytes is at least MinStoreMaxBytes and
// store_max_key_size at most MaxStoreKeySize.
const (
	MinStoreMaxBytes = 64 << 10
	MaxStoreKeySize  = 16 << 10
)

func (d *decoder) validateMetrics(m Metrics) {
	if m.Listen != "" {
		d.hostPort("metrics.listen", m.Listen)
	}
	d.positive("metrics.read_header_timeout", m.ReadHeaderTimeout)
	d.positive("metrics.read_timeout", m.ReadTimeout)
	d.positive("metrics.write_timeout", m.WriteTimeout)
	d.positive("metrics.idle_timeout", m.IdleTimeout)
	if m.MaxHeaderBytes < 1<<10 || m.MaxHeaderBytes > 1<<20 {
		d.errf("metrics.max_header_bytes", "%d bytes is out of range (1KiB..1MiB)", m.MaxHeaderBytes)
	}
	d.atLeast("metrics.max_connections", m.MaxConnections, 1)
}

// validateUI checks [ui]. Actions need credentials: a token file or the broker's users; a
// page without either is read-only, which is allowed.
func (d *decoder) validateUI(c *Config) {
	if c.UI.Listen == "" {
		if c.UI.TokenFile != "" {
			d.errf("ui.token_file", "set, but ui.listen is empty: the page is off")
		}
		return
	}
	d.hostPort("ui.listen", c.UI.Listen)
	if c.BrokerOnly() {
		d.errf("ui.listen", "the page shows the gateway's terminals: a config with only [broker] has none")
	}
}

// validateBrokerBounds checks the bounds of what clients can make the broker hold. Each
// must be positive (max_clients = 0, which once meant unlimited, means the default), and
// they must fit together: a session that cannot hold one message of max_packet_size would
// drop every such message, and the total must hold at least one full session.
func (d *decoder) validateBrokerBounds(b *Broker) {
	if b.MaxClients == 0 {
		b.MaxClients = defaultBroker.MaxClients
	}
	d.atLeast("broker.max_clients", b.MaxClients, 1)
	if b.MaxSubscriptions < 1 || b.MaxSubscriptions > 1<<31-1 {
		d.errf("broker.max_subscriptions", "%d is out of range (1..2147483647)", b.MaxSubscriptions)
	}
	for _, k := range []struct {
		key string
		v   Size
	}{{"broker.max_pending_write_bytes", b.MaxPendingWriteBytes}, {"broker.max_session_bytes", b.MaxSessionBytes},
		{"broker.max_queued_bytes", b.MaxQueuedBytes}, {"broker.max_retained_bytes", b.MaxRetainedBytes},
		{"broker.max_inbound_bytes", b.MaxInboundBytes}} {
		if k.v < 1<<10 {
			d.errf(k.key, "%d bytes is too small (at least 1KiB; there is no unlimited)", k.v)
		}
	}
	if b.MaxPacketSize != 0 && b.MaxSessionBytes >= 1<<10 && b.MaxSessionBytes < b.MaxPacketSize {
		d.errf("broker.max_session_bytes", "%d bytes is less than max_packet_size (%d): a message that large could be published but never queued for a subscriber", b.MaxSessionBytes, b.MaxPacketSize)
	}
	if b.MaxPacketSize != 0 && b.MaxInboundBytes >= 1<<10 && b.MaxInboundBytes < b.MaxPacketSize {
		d.errf("broker.max_inbound_bytes", "%d bytes is less than max_packet_size (%d): a packet that large would wait until nothing else is read", b.MaxInboundBytes, b.MaxPacketSize)
	}
	if b.MaxSessionBytes >= 1<<10 && b.MaxQueuedBytes >= 1<<10 && b.MaxQueuedBytes < b.MaxSessionBytes {
		d.errf("broker.max_queued_bytes", "%d bytes is less than max_session_bytes (%d): no session could fill its share", b.MaxQueuedBytes, b.MaxSessionBytes)
	}
}

var upstreamSchemes = map[string]bool{"mqtt": false, "tcp": false, "mqtts": true, "ssl": true, "tls": true}

func (d *decoder) validateUpstream(c *Config) {
	u := c.Upstream
	if u.URL == "" {
		d.errf("upstream.url", "required (leave [upstream] out to use the embedded [broker])")
	} else if p, err := url.Parse(u.URL); err != nil {
		d.errf("upstream.url", "%v", err)
	} else if tls, ok := upstreamSchemes[p.Scheme]; !ok {
		d.errf("upstream.url", "scheme %q is not supported (use mqtt:// or mqtts://)", p.Scheme)
	} else if p.Hostname() == "" {
		d.errf("upstream.url", "%q has no host", u.URL)
	} else if !tls && (u.TLSCA != "" || u.TLSCert != "" || u.TLSServerName != "") {
		d.errf("upstream.url", "TLS settings are set but %q is not a TLS url (use mqtts://)", u.URL)
	}
	d.pair("upstream.tls_cert", u.TLSCert, "upstream.tls_key", u.TLSKey)
	if (u.PasswordFile != "" || u.PasswordEnv != "") && u.Username == "" {
		d.errf("upstream.username", "required when a password is set")
	}
	if u.ClientID != "" && (len(u.ClientID) > 128 || !validID(u.ClientID)) {
		d.errf("upstream.client_id", "%q: use at most 128 of A-Z a-z 0-9 . _ -", u.ClientID)
	}
	if u.KeepAlive.Duration < time.Second || u.KeepAlive.Duration > 65535*time.Second {
		d.errf("upstream.keepalive", "%s is out of range (1s..18h12m15s)", u.KeepAlive.Duration)
	}
	d.positive("upstream.connect_timeout", u.ConnectTimeout)
	if u.SessionExpiry.Duration > (1<<32-1)*time.Second {
		d.errf("upstream.session_expiry", "%s is beyond MQTT's limit of 2^32-1 seconds", u.SessionExpiry.Duration)
	}
	d.positive("upstream.reconnect_max", u.ReconnectMax)
	if u.PublishWindow < 1 || u.PublishWindow > 65535 {
		d.errf("upstream.publish_window", "%d is out of range (1..65535)", u.PublishWindow)
	}
}

func (d *decoder) validateDispatch(p Dispatch) {
	d.positive("dispatch.retry_interval", p.RetryInterval)
	d.positive("dispatch.heartbeat_timeout", p.HeartbeatTimeout)
	d.positive("dispatch.failed_retention", p.FailedRetention)
	if p.MaxTries < 1 || p.MaxTries > MaxTries {
		d.errf("dispatch.max_tries", "%d is out of range (1..%d)", p.MaxTries, MaxTries)
	}
	if p.BackoffMax.Duration < p.RetryInterval.Duration {
		d.errf("dispatch.backoff_max", "%s is less than retry_interval (%s)", p.BackoffMax.Duration, p.RetryInterval.Duration)
	}
	if p.MaxQueuePerDevice < 1 {
		d.errf("dispatch.max_queue_per_device", "must be at least 1")
	}
	if p.MaxQueueTotal < p.MaxQueuePerDevice {
		d.errf("dispatch.max_queue_total", "%d is less than max_queue_per_device (%d)", p.MaxQueueTotal, p.MaxQueuePerDevice)
	}
	if p.MaxBatch < 1 || p.MaxBatch > face.MaxBatch {
		d.errf("dispatch.max_batch", "%d is out of range (1..%d; 1 turns batches off)", p.MaxBatch, face.MaxBatch)
	}
}

func (d *decoder) validateIntake(in Intake) {
	if in.MaxBatch < 1 || in.MaxBatch > 100000 {
		d.errf("intake.max_batch", "%d is out of range (1..100000)", in.MaxBatch)
	}
	if in.MaxMessageSize < 1<<10 {
		d.errf("intake.max_message_size", "%d bytes is too small (at least 1KiB)", in.MaxMessageSize)
	}
	// An empty backlog must hold one message's deadletters, or that message would never be
	// taken: their count is at most max_batch. Their bytes can outweigh the message (each
	// carries its reason), so max_message_size is only the floor; configs/agent.toml
	// advises several times it.
	switch {
	case in.MaxDeadLetters < 1 || in.MaxDeadLetters > MaxBacklogCount:
		d.errf("intake.max_deadletters", "%d is out of range (max_batch..%d)", in.MaxDeadLetters, MaxBacklogCount)
	case in.MaxDeadLetters < in.MaxBatch:
		d.errf("intake.max_deadletters", "%d is less than max_batch (%d): a message whose tasks are all refused could never be taken", in.MaxDeadLetters, in.MaxBatch)
	}
	switch {
	case in.MaxDeadLetterBytes < 1<<10 || in.MaxDeadLetterBytes > MaxBacklogBytes:
		d.errf("intake.max_deadletter_bytes", "%d bytes is out of range (max_message_size..1GiB)", in.MaxDeadLetterBytes)
	case in.MaxDeadLetterBytes < in.MaxMessageSize:
		d.errf("intake.max_deadletter_bytes", "%d bytes is less than max_message_size (%d): the deadletter of a large message could never be taken", in.MaxDeadLetterBytes, in.MaxMessageSize)
	}
	if in.MaxWhitelist < 0 || in.MaxWhitelist > MaxWhitelistPersons {
		d.errf("intake.max_whitelist", "%d is out of range (0..%d; 0 refuses SetWhitelist tasks)", in.MaxWhitelist, MaxWhitelistPersons)
	}
	h := in.HTTP
	if h == nil {
		return
	}
	d.httpURL("intake.http.url", h.URL, true)
	d.httpURL("intake.http.results_url", h.ResultsURL, false)
	if h.PageSize < 1 || h.PageSize > 10000 {
		d.errf("intake.http.page_size", "%d is out of range (1..10000)", h.PageSize)
	} else if h.PageSize > in.MaxBatch {
		d.errf("intake.http.page_size", "%d is more than intake.max_batch (%d): a page is taken as one batch", h.PageSize, in.MaxBatch)
	}
	d.positive("intake.http.interval", h.Interval)
	d.positive("intake.http.timeout", h.Timeout)
	if h.AuthHeader == "" && (h.AuthValueFile != "" || h.AuthValueEnv != "") {
		d.errf("intake.http.auth_header", "must name a header when an auth value is set")
	} else if strings.ContainsAny(h.AuthHeader, " :\t\r\n") {
		d.errf("intake.http.auth_header", "%q is not a header name", h.AuthHeader)
	}
}

// Bounds of the report backlogs' keys: a count at most MaxBacklogCount, bytes at most
// MaxBacklogBytes (the backlogs are held in memory, and an int is 32 bits on ARM).
const (
	MaxBacklogCount = 1 << 24
	MaxBacklogBytes = 1 << 30
)

func (d *decoder) validateReports(r Reports) {
	if r.MaxForwarded < 1 || r.MaxForwarded > MaxBacklogCount {
		d.errf("reports.max_forwarded", "%d is out of range (1..%d)", r.MaxForwarded, MaxBacklogCount)
	}
	if r.MaxForwardedBytes < 1<<10 || r.MaxForwardedBytes > MaxBacklogBytes {
		d.errf("reports.max_forwarded_bytes", "%d bytes is out of range (1KiB..1GiB)", r.MaxForwardedBytes)
	}
	if r.MaxSyncReports < 1 || r.MaxSyncReports > MaxBacklogCount {
		d.errf("reports.max_sync_reports", "%d is out of range (1..%d)", r.MaxSyncReports, MaxBacklogCount)
	}
	if r.MaxSyncReportBytes < 1<<10 || r.MaxSyncReportBytes > MaxBacklogBytes {
		d.errf("reports.max_sync_report_bytes", "%d bytes is out of range (1KiB..1GiB)", r.MaxSyncReportBytes)
	}
}

// Bounds of [whitelist]: the store numbers records in 31 bits.
const (
	MaxWhitelistTerminals = 1 << 16
	MaxWhitelistPersons   = 10_000_000
	MaxWhitelistRecords   = 100_000_000
	// MaxReconciling bounds whitelist.max_reconciling; MaxListLimit whitelist.list_limit
	// (the terminal protocol's most persons on one ListPersons page).
	MaxReconciling = 1024
	MaxListLimit   = 1000
	// MaxSetTasks is whitelist.max_set_tasks' ceiling: a kept task costs a few hundred
	// bytes of heap and of snapshot.
	MaxSetTasks = 1 << 16
)

// Bounds of faces.max_bytes.
const (
	MinFacesBytes = 1 << 20
	MaxFacesBytes = 1 << 40
)

func (d *decoder) validateWhitelist(w Whitelist) {
	if w.MaxTerminals < 1 || w.MaxTerminals > MaxWhitelistTerminals {
		d.errf("whitelist.max_terminals", "%d is out of range (1..%d)", w.MaxTerminals, MaxWhitelistTerminals)
	}
	if w.MaxPersons < 1 || w.MaxPersons > MaxWhitelistPersons {
		d.errf("whitelist.max_persons", "%d is out of range (1..%d)", w.MaxPersons, MaxWhitelistPersons)
	}
	if w.MaxRecords < 1 || w.MaxRecords > MaxWhitelistRecords {
		d.errf("whitelist.max_records", "%d is out of range (1..%d)", w.MaxRecords, MaxWhitelistRecords)
	}
	if w.MaxSetTasks < 1 || w.MaxSetTasks > MaxSetTasks {
		d.errf("whitelist.max_set_tasks", "%d is out of range (1..%d)", w.MaxSetTasks, MaxSetTasks)
	}
	if w.MaxReconciling < 1 || w.MaxReconciling > MaxReconciling {
		d.errf("whitelist.max_reconciling", "%d is out of range (1..%d)", w.MaxReconciling, MaxReconciling)
	}
	d.positive("whitelist.backoff_base", w.BackoffBase)
	d.positive("whitelist.step_timeout", w.StepTimeout)
	if w.BackoffMax.Duration < w.BackoffBase.Duration {
		d.errf("whitelist.backoff_max", "%s is less than whitelist.backoff_base (%s)", w.BackoffMax.Duration, w.BackoffBase.Duration)
	}
	if w.ListLimit < 1 || w.ListLimit > MaxListLimit {
		d.errf("whitelist.list_limit", "%d is out of range (1..%d)", w.ListLimit, MaxListLimit)
	}
}

func (d *decoder) validateTopics(t Topics) {
	seen := map[string]string{}
	for _, tt := range []struct{ key, tmpl string }{
		{"topics.device_command", t.DeviceCommand},
		{"topics.device_ack", t.DeviceAck},
		{"topics.device_heartbeat", t.DeviceHeartbeat},
	} {
		switch {
		case strings.Count(tt.tmpl, "{id}") != 1:
			d.errf(tt.key, "%q must contain {id} exactly once", tt.tmpl)
		case strings.ContainsAny(tt.tmpl, "+#\x00"):
			d.errf(tt.key, "%q must not contain MQTT wildcards", tt.tmpl)
		case strings.Contains(strings.ReplaceAll(tt.tmpl, "{id}", ""), "{"):
			d.errf(tt.key, "%q: {id} is the only placeholder", tt.tmpl)
		case strings.HasPrefix(tt.tmpl, "/") || strings.HasSuffix(tt.tmpl, "/") || strings.Contains(tt.tmpl, "//"):
			d.errf(tt.key, "%q has an empty topic level", tt.tmpl)
		case seen[tt.tmpl] != "":
			d.errf(tt.key, "%q is the same topic as %s", tt.tmpl, seen[tt.tmpl])
		}
		seen[tt.tmpl] = tt.key
	}
}

func (d *decoder) validateDevices(c *Config) {
	if len(c.Devices) > MaxDevices {
		d.errs = append(d.errs, &Error{File: d.file, Line: d.ix.line("devices[0]"), Key: "devices",
			Msg: fmt.Sprintf("%d devices; at most %d per gateway", len(c.Devices), MaxDevices)})
		return
	}
	first := map[string]string{}
	firstPort := map[string]string{} // one serial line carries one terminal
	for i := range c.Devices {
		dev := &c.Devices[i]
		k := func(field string) string { return fmt.Sprintf("devices[%d].%s", i, field) }
		if dev.ID == "" {
			d.errf(k("id"), "required")
		} else if d.id(k("id"), dev.ID) {
			if prev, dup := first[dev.ID]; dup {
				d.errf(k("id"), "%q is already used by %s", dev.ID, prev)
			}
			first[dev.ID] = k("id")
		}
		switch dev.Transport {
		case TransportMQTT:
			for _, f := range []string{"port", "baud", "data_bits", "parity", "stop_bits"} {
				if d.ix.has(k(f)) {
					d.errf(k(f), "only used with transport = \"serial\"")
				}
			}
		case TransportSerial:
			if dev.Port == "" && c.Agent.Board == "" { // with a board, assignBoardPorts reported it
				d.errf(k("port"), "required with transport = \"serial\" (e.g. \"/dev/ttyS1\")")
			}
			if dev.Port != "" {
				if prev, dup := firstPort[dev.Port]; dup {
					d.errf(k("port"), "%q is already used by %s: a serial line carries one terminal", dev.Port, prev)
				} else {
					firstPort[dev.Port] = k("port")
				}
			}
			if dev.Baud < 50 || dev.Baud > 4000000 {
				d.errf(k("baud"), "%d is out of range (50..4000000)", dev.Baud)
			}
			if dev.DataBits < 5 || dev.DataBits > 8 {
				d.errf(k("data_bits"), "%d is out of range (5..8)", dev.DataBits)
			}
			d.oneOf(k("parity"), dev.Parity, "none", "even", "odd", "mark", "space")
			if dev.StopBits != 1 && dev.StopBits != 2 {
				d.errf(k("stop_bits"), "%d: must be 1 or 2", dev.StopBits)
			}
		default:
			d.errf(k("transport"), "%q: must be \"mqtt\" or \"serial\"", dev.Transport)
		}
		if n := dev.FaceChunk; n != 0 {
			most := face.MaxChunkSize
			if dev.Transport == TransportSerial {
				most = face.ChunkLimitFor(serial.DefaultMaxPayload)
			}
			if n < 1 || n > Size(most) {
				d.errf(k("face_chunk"), "%d bytes is out of range (1..%d for transport %q, or leave it out to use [faces])", n, most, dev.Transport)
			}
		}
		if dev.MaxTries < 0 || dev.MaxTries > MaxTries {
			d.errf(k("max_tries"), "%d is out of range (1..%d, or leave it out to use [dispatch])", dev.MaxTries, MaxTries)
		}
		if !dev.HasHeartbeat() && dev.HeartbeatTimeout.Duration != 0 {
			d.errf(k("heartbeat_timeout"), "has no effect with heartbeat = false")
		}
		if eff := dev.Effective(c.Dispatch); eff.BackoffMax.Duration < eff.RetryInterval.Duration && d.ix.has(k("retry_interval")) {
			d.errf(k("retry_interval"), "%s is more than dispatch.backoff_max (%s)", eff.RetryInterval.Duration, eff.BackoffMax.Duration)
		}
	}
}

// Helpers: each records an error naming key and returns whether the value was fine.

func (d *decoder) id(key, v string) bool {
	if len(v) > MaxIDLength || !validID(v) {
		d.errf(key, "%q: use 1 to %d of A-Z a-z 0-9 . _ - (it becomes a topic level)", v, MaxIDLength)
		return false
	}
	return true
}

func (d *decoder) positive(key string, v Duration) {
	if v.Duration <= 0 {
		d.errf(key, "must be positive")
	}
}

func (d *decoder) atLeast(key string, v, min int) {
	if v < min {
		d.errf(key, "%d is less than %d", v, min)
	}
}

func (d *decoder) oneOf(key, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	d.errf(key, "%q: must be one of %s", v, strings.Join(allowed, ", "))
}

func (d *decoder) pair(keyA, a, keyB, b string) {
	switch {
	case a != "" && b == "":
		d.errf(keyB, "required with %s", keyA)
	case a == "" && b != "":
		d.errf(keyA, "required with %s", keyB)
	}
}

func (d *decoder) hostPort(key, v string) {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		d.errf(key, "%q: want host:port (%v)", v, err)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		d.errf(key, "%q: port must be a number 0..65535", v)
	}
}

func (d *decoder) httpURL(key, v string, required bool) {
	if v == "" {
		if required {
			d.errf(key, "required")
		}
		return
	}
	p, err := url.Parse(v)
	switch {
	case err != nil:
		d.errf(key, "%v", err)
	case p.Scheme != "http" && p.Scheme != "https":
		d.errf(key, "%q: must be an http:// or https:// url", v)
	case p.Host == "":
		d.errf(key, "%q has no host", v)
	}
}
