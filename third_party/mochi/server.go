// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2022 mochi-mqtt, mochi-co
// SPDX-FileContributor: mochi-co

// Package mqtt provides a high performance, fully compliant MQTT v5 broker server with v3.1.1 backward compatibility.
package mqtt

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/mochi-mqtt/server/v2/system"

	"log/slog"
)

const (
	Version                       = "2.7.9" // the current server version.
	defaultSysTopicInterval int64 = 1       // the interval between $SYS topic publishes
	LocalListener                 = "local"
	InlineClientId                = "inline"
)

var (
	// Deprecated: Use NewDefaultServerCapabilities to avoid data race issue.
	DefaultServerCapabilities = NewDefaultServerCapabilities()

	ErrListenerIDExists       = errors.New("listener id already exists")                               // a listener with the same id already exists
	ErrConnectionClosed       = errors.New("connection not open")                                      // connection is closed
	ErrInlineClientNotEnabled = errors.New("please set Options.InlineClient=true to use this feature") // inline client is not enabled by default
	ErrOptionsUnreadable      = errors.New("unable to read options from bytes")
)

// Capabilities indicates the capabilities and features provided by the server.
type Capabilities struct {
	MaximumClients               int64           `yaml:"maximum_clients" json:"maximum_clients"`                                 // maximum number of connected clients
	MaximumMessageExpiryInterval int64           `yaml:"maximum_message_expiry_interval" json:"maximum_message_expiry_interval"` // maximum message expiry if message expiry is 0 or over
	MaximumClientWritesPending   int32           `yaml:"maximum_client_writes_pending" json:"maximum_client_writes_pending"`     // maximum number of pending message writes for a client
	MaximumSessionExpiryInterval uint32          `yaml:"maximum_session_expiry_interval" json:"maximum_session_expiry_interval"` // maximum number of seconds to keep disconnected sessions
	MaximumPacketSize            uint32          `yaml:"maximum_packet_size" json:"maximum_packet_size"`                         // maximum packet size, no limit if 0
	maximumPacketID              uint32          // unexported, used for testing only
	ReceiveMaximum               uint16          `yaml:"receive_maximum" json:"receive_maximum"`                   // maximum number of concurrent qos messages per client
	MaximumInflight              uint16          `yaml:"maximum_inflight" json:"maximum_inflight"`                 // maximum number of qos > 0 messages can be stored, 0(=8192)-65535
	TopicAliasMaximum            uint16          `yaml:"topic_alias_maximum" json:"topic_alias_maximum"`           // maximum topic alias value
	SharedSubAvailable           byte            `yaml:"shared_sub_available" json:"shared_sub_available"`         // support of shared subscriptions
	MinimumProtocolVersion       byte            `yaml:"minimum_protocol_version" json:"minimum_protocol_version"` // minimum supported mqtt version
	Compatibilities              Compatibilities `yaml:"compatibilities" json:"compatibilities"`                   // version compatibilities the server provides
	MaximumQos                   byte            `yaml:"maximum_qos" json:"maximum_qos"`                           // maximum qos value available to clients
	RetainAvailable              byte            `yaml:"retain_available" json:"retain_available"`                 // support of retain messages
	WildcardSubAvailable         byte            `yaml:"wildcard_sub_available" json:"wildcard_sub_available"`     // support of wildcard subscriptions
	SubIDAvailable               byte            `yaml:"sub_id_available" json:"sub_id_available"`                 // support of subscription identifiers

	// faceagent patch (byte bounds): bounds in bytes and subscriptions (bounds.go); 0: none.
	MaximumClientWritesPendingBytes int64 `yaml:"maximum_client_writes_pending_bytes" json:"maximum_client_writes_pending_bytes"` // bytes of messages queued for writing to one client
	MaximumSessionBytes             int64 `yaml:"maximum_session_bytes" json:"maximum_session_bytes"`                             // bytes one session holds: messages in flight or queued, subscriptions, will
	MaximumQueuedBytes              int64 `yaml:"maximum_queued_bytes" json:"maximum_queued_bytes"`                               // the same over every session
	MaximumRetainedBytes            int64 `yaml:"maximum_retained_bytes" json:"maximum_retained_bytes"`                           // bytes of the retained messages
	MaximumSubscriptions            int32 `yaml:"maximum_subscriptions" json:"maximum_subscriptions"`                             // subscriptions of one session
	MaximumInboundBytes             int64 `yaml:"maximum_inbound_bytes" json:"maximum_inbound_bytes"`                             // bytes of packets over 64 KiB being read at once, all clients
}

// NewDefaultServerCapabilities defines the default features and capabilities provided by the server.
func NewDefaultServerCapabilities() *Capabilities {
	return &Capabilities{
		MaximumClients:               math.MaxInt64,  // maximum number of connected clients
		MaximumMessageExpiryInterval: 60 * 60 * 24,   // maximum message expiry if message expiry is 0 or over
		MaximumClientWritesPending:   1024 * 8,       // maximum number of pending message writes for a client
		MaximumSessionExpiryInterval: math.MaxUint32, // maximum number of seconds to keep disconnected sessions
		MaximumPacketSize:            0,              // no maximum packet size
		maximumPacketID:              math.MaxUint16,
		ReceiveMaximum:               1024,           // maximum number of concurrent qos messages per client
		MaximumInflight:              1024 * 8,       // maximum number of qos > 0 messages can be stored
		TopicAliasMaximum:            math.MaxUint16, // maximum topic alias value
		SharedSubAvailable:           1,              // shared subscriptions are available
		MinimumProtocolVersion:       3,              // minimum supported mqtt version (3.0.0)
		MaximumQos:                   2,              // maximum qos value available to clients
		RetainAvailable:              1,              // retain messages is available
		WildcardSubAvailable:         1,              // wildcard subscriptions are available
		SubIDAvailable:               1,              // subscription identifiers are available
	}
}

// Compatibilities provides flags for using compatibility modes.
type Compatibilities struct {
	ObscureNotAuthorized       bool `yaml:"obscure_not_authorized" json:"obscure_not_authorized"`                 // return unspecified errors instead of not authorized
	PassiveClientDisconnect    bool `yaml:"passive_client_disconnect" json:"passive_client_disconnect"`           // don't disconnect the client forcefully after sending disconnect packet (paho - spec violation)
	AlwaysReturnResponseInfo   bool `yaml:"always_return_response_info" json:"always_return_response_info"`       // always return response info (useful for testing)
	RestoreSysInfoOnRestart    bool `yaml:"restore_sys_info_on_restart" json:"restore_sys_info_on_restart"`       // restore system info from store as if server never stopped
	NoInheritedPropertiesOnAck bool `yaml:"no_inherited_properties_on_ack" json:"no_inherited_properties_on_ack"` // don't allow inherited user properties on ack (paho - spec violation)
}

// Options contains configurable options for the server.
type Options struct {
	// Listeners specifies any listeners which should be dynamically added on serve. Used when setting listeners by config.
	Listeners []listeners.Config `yaml:"listeners" json:"listeners"`

	// Hooks specifies any hooks which should be dynamically added on serve. Used when setting hooks by config.
	Hooks []HookLoadConfig `yaml:"hooks" json:"hooks"`

	// Capabilities defines the server features and behaviour. If you only wish to modify
	// several of these values, set them explicitly - e.g.
	// 	server.Options.Capabilities.MaximumClientWritesPending = 16 * 1024
	Capabilities *Capabilities `yaml:"capabilities" json:"capabilities"`

	// ClientNetWriteBufferSize specifies the size of the client *bufio.Writer write buffer.
	ClientNetWriteBufferSize int `yaml:"client_net_write_buffer_size" json:"client_net_write_buffer_size"`

	// ClientNetReadBufferSize specifies the size of the client *bufio.Reader read buffer.
	ClientNetReadBufferSize int `yaml:"client_net_read_buffer_size" json:"client_net_read_buffer_size"`

	// Logger specifies a custom configured implementation of log/slog to override
	// the servers default logger configuration. If you wish to change the log level,
	// of the default logger, you can do so by setting:
	// server := mqtt.New(nil)
	// level := new(slog.LevelVar)
	// server.Slog = slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
	// 	Level: level,
	// }))
	// level.Set(slog.LevelDebug)
	Logger *slog.Logger `yaml:"-" json:"-"`

	// SysTopicResendInterval specifies the interval between $SYS topic updates in seconds.
	SysTopicResendInterval int64 `yaml:"sys_topic_resend_interval" json:"sys_topic_resend_interval"`

	// Enable Inline client to allow direct subscribing and publishing from the parent codebase,
	// with negligible performance difference (disabled by default to prevent confusion in statistics).
	InlineClient bool `yaml:"inline_client" json:"inline_client"`

	// LoopTicks, when set, drives the event loop in place of its five tickers: the loop
	// does a task's work when the task's channel gets a value, as it did on each tick
	// (NewLoopTicks makes the channels; New sets WillDelayed). faceagent patch (idle).
	LoopTicks *LoopTicks `yaml:"-" json:"-"`
}

// Server is an MQTT broker server. It should be created with server.New()
// in order to ensure all the internal fields are correctly populated.
type Server struct {
	Options      *Options             // configurable server options
	Listeners    *listeners.Listeners // listeners are network interfaces which listen for new connections
	Clients      *Clients             // clients known to the broker
	Topics       *TopicsIndex         // an index of topic filter subscriptions and retained messages
	Info         *system.Info         // values about the server commonly known as $SYS topics
	loop         *loop                // loop contains tickers for the system event loop
	done         chan bool            // indicate that the server is ending
	Log          *slog.Logger         // minimal no-alloc logger
	hooks        *Hooks               // hooks contains hooks for extra functionality such as auth and persistent storage
	inlineClient *Client              // inlineClient is a special client used for inline subscriptions and inline Publish
	held         heldAcks             // faceagent patch (PUBACK after storing): acknowledgements not yet written
	bounds       serverBounds         // faceagent patch (byte bounds): server-wide counters
	sessions     sessionLocks         // faceagent patch (session takeover): one change of a client id's session at a time
}

// AckWaiter is implemented by a hook that stores the messages routed to its sessions
// (faceagent's session store): WaitBeforeAck returns once what routing cl's QoS 1/2
// messages stored is durable.
//
// faceagent patch (PUBACK after storing): upstream mochi wrote a PUBACK or PUBREC before it
// routed the message, so a publisher could hold the acknowledgement of a message that a
// broker killed just then had neither given to its subscribers nor stored for an offline
// kept session. The server now routes first, and holds the acknowledgements of a client's
// QoS 1/2 messages while more of its packets are already read (buffered), then calls
// WaitBeforeAck once and writes them in order: one wait (one group commit) for a burst
// from a publisher with many messages in flight, not one for each.
//
// If WaitBeforeAck returns an error (the messages are not stored), none of the held
// acknowledgements is written, their flows end (the client's Inbound; a resumed session
// must not take them over), and the client is disconnected (MQTT 5: reason 0x80): it sends
// the messages again.
type AckWaiter interface {
	WaitBeforeAck(cl *Client) error
}

// ConnackWaiter is implemented by a hook that stores sessions (faceagent's session store):
// WaitBeforeConnack stores what the connecting client's session needs on disk (the
// deletion of an earlier session it starts clean over, the client of a session kept beyond
// the connection) and returns once that is durable.
//
// faceagent patch (CONNACK after storing): upstream stored the client in
// OnSessionEstablished, after the CONNACK, and a store that failed could not refuse the
// session it had told the client it has. The server now calls WaitBeforeConnack after
// OnSessionEstablish and before it takes over an earlier connection of the client id or
// writes the CONNACK; if it returns an error, the connection is refused with CONNACK 0x88
// (Server unavailable; MQTT 3.1.1: 0x03), the hooks get OnDisconnect for it (expire false:
// they saw OnSessionEstablish) and the earlier session stays as it was.
type ConnackWaiter interface {
	WaitBeforeConnack(cl *Client) error
}

// waitBeforeConnack asks the hooks that store sessions (ConnackWaiter) to store cl's; on
// an error it refuses the connection. faceagent patch (CONNACK after storing).
func (s *Server) waitBeforeConnack(cl *Client) error {
	for _, h := range s.hooks.GetAll() {
		if w, ok := h.(ConnackWaiter); ok {
			if err := w.WaitBeforeConnack(cl); err != nil {
				err = fmt.Errorf("session not stored: %w", err)
				_ = s.SendConnack(cl, packets.ErrServerUnavailable, false, nil)
				// The hooks saw OnSessionEstablish: they forget the client as one that left
				// (its session not ended: the one it would have taken over goes on).
				s.hooks.OnDisconnect(cl, err, false)
				return err
			}
		}
	}
	return nil
}

// heldAcks are the packet ids of the PUBACKs and PUBRECs routed but not yet written, per
// client, in the order the client's PUBLISHes came; the acknowledgements themselves are in
// the client's Inbound (faceagent patch (packet-id spaces): they were in its in-flight set,
// with the messages sent to it). A client's slice stays while it is connected, to be reused.
type heldAcks struct {
	mu      sync.Mutex
	clients atomic.Int32 // clients with held acknowledgements (receivePacket looks only then)
	ids     map[*Client]*[]uint16
}

// holdAck holds the acknowledgement with packet id until flushAcks.
func (s *Server) holdAck(cl *Client, id uint16) {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	if s.held.ids == nil {
		s.held.ids = make(map[*Client]*[]uint16)
	}
	p := s.held.ids[cl]
	if p == nil {
		p = new([]uint16)
		s.held.ids[cl] = p
	}
	if len(*p) == 0 {
		s.held.clients.Add(1)
	}
	*p = append(*p, id)
}

// takeAcks returns the ids of cl's held acknowledgements, no longer held. They are cl's
// to write before its next holdAck (both run on cl's read loop).
func (s *Server) takeAcks(cl *Client) []uint16 {
	if s.held.clients.Load() == 0 {
		return nil
	}
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	p := s.held.ids[cl]
	if p == nil || len(*p) == 0 {
		return nil
	}
	ids := *p
	*p = ids[:0]
	s.held.clients.Add(-1)
	return ids
}

// forgetAcks drops cl's slice (its read loop ended).
func (s *Server) forgetAcks(cl *Client) {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	if p := s.held.ids[cl]; p != nil {
		if len(*p) > 0 {
			s.held.clients.Add(-1)
		}
		delete(s.held.ids, cl)
	}
}

// flushAcks waits for the hooks' storage (AckWaiter), then writes cl's held
// acknowledgements in order, and last (when not nil) ack. A held one no longer pending is
// not written.
func (s *Server) flushAcks(cl *Client, ack *packets.Packet) error {
	ids := s.takeAcks(cl)
	if len(ids) == 0 && ack == nil {
		return nil
	}
	for _, h := range s.hooks.GetAll() {
		if w, ok := h.(AckWaiter); ok {
			if err := w.WaitBeforeAck(cl); err != nil {
				s.dropAcks(cl, ids, ack)
				return packets.ErrUnspecifiedError
			}
		}
	}
	if len(ids) > 0 {
		if err := s.writeHeldAcks(cl, ids); err != nil {
			return err
		}
	}
	if ack != nil {
		return s.writeAck(cl, ack)
	}
	return nil
}

// writeHeldAcks writes the acknowledgements held under ids for flushAcks. faceagent patch
// (stack): the packet read back is on the heap (outboundPackets), not on the reader's stack.
func (s *Server) writeHeldAcks(cl *Client, ids []uint16) error {
	held := outboundPackets.Get().(*packets.Packet)
	defer releaseOutbound(held)
	for _, id := range ids {
		if !cl.State.Inbound.pending(id, held) { // faceagent patch (packet-id spaces)
			continue
		}
		if err := s.writeAck(cl, held); err != nil {
			return err
		}
	}
	return nil
}

// dropAcks ends the flows of the acknowledgements held under ids, and of ack, unwritten:
// their messages were not stored (AckWaiter).
func (s *Server) dropAcks(cl *Client, ids []uint16, ack *packets.Packet) {
	for _, id := range ids {
		if cl.State.Inbound.drop(id) { // faceagent patch (packet-id spaces)
			cl.State.Inflight.IncreaseReceiveQuota()
		}
	}
	if ack != nil && cl.State.Inbound.drop(ack.PacketID) {
		cl.State.Inflight.IncreaseReceiveQuota()
	}
}

// writeAck writes a PUBACK or PUBREC: a PUBACK completes its QoS 1 flow, as upstream's
// processPublish did; a PUBREC's flow waits for the client's PUBREL. An acknowledgement
// that could not be written stays pending (the connection is going; a QoS 2 flow goes with
// a resumed session, see Inbound.carry).
//
// faceagent patch (packet-id spaces): the flow is in cl's Inbound, not in its in-flight
// set, and the hooks' OnQosComplete no longer sees it: it is about the messages the server
// sends (upstream reported the server's own PUBACK too, which a storage hook keyed by
// client and packet id took for the message in flight to the client under the same id).
func (s *Server) writeAck(cl *Client, ack *packets.Packet) error {
	if err := cl.WritePacket(*ack); err != nil {
		return err
	}
	if cl.State.Inbound.written(ack.PacketID) {
		cl.State.Inflight.IncreaseReceiveQuota()
	}
	return nil
}

// loop contains interval tickers for the system events loop.
type loop struct {
	sysTopics      *time.Ticker     // interval ticker for sending updating $SYS topics
	clientExpiry   *time.Ticker     // interval ticker for cleaning expired clients
	inflightExpiry *time.Ticker     // interval ticker for cleaning up expired inflight messages
	retainedExpiry *time.Ticker     // interval ticker for cleaning retained messages
	willDelaySend  *time.Ticker     // interval ticker for sending Will Messages with a delay
	willDelayed    *packets.Packets // activate LWT packets which will be sent after a delay
}

// ops contains server values which can be propagated to other structs.
type ops struct {
	options *Options      // a pointer to the server options and capabilities, for referencing in clients
	info    *system.Info  // pointers to server system info
	hooks   *Hooks        // pointer to the server hooks
	log     *slog.Logger  // a structured logger for the client
	bounds  *serverBounds // faceagent patch (byte bounds): the server's counters
}

// New returns a new instance of mochi mqtt broker. Optional parameters
// can be specified to override some default settings (see Options).
func New(opts *Options) *Server {
	if opts == nil {
		opts = new(Options)
	}

	opts.ensureDefaults()

	s := &Server{
		done:      make(chan bool),
		Clients:   NewClients(),
		Topics:    NewTopicsIndex(),
		Listeners: listeners.New(),
		loop:      newLoop(opts),
		Options:   opts,
		Info: &system.Info{
			Version: Version,
			Started: time.Now().Unix(),
		},
		Log: opts.Logger,
		hooks: &Hooks{
			Log: opts.Logger,
		},
	}

	if s.Options.InlineClient {
		s.inlineClient = s.NewClient(nil, LocalListener, InlineClientId, true)
		s.Clients.Add(s.inlineClient)
	}

	return s
}

// ensureDefaults ensures that the server starts with sane default values, if none are provided.
func (o *Options) ensureDefaults() {
	if o.Capabilities == nil {
		o.Capabilities = NewDefaultServerCapabilities()
	}

	o.Capabilities.maximumPacketID = math.MaxUint16 // spec maximum is 65535

	if o.Capabilities.MaximumInflight == 0 {
		o.Capabilities.MaximumInflight = 1024 * 8
	}

	if o.SysTopicResendInterval == 0 {
		o.SysTopicResendInterval = defaultSysTopicInterval
	}

	if o.ClientNetWriteBufferSize == 0 {
		o.ClientNetWriteBufferSize = 1024 * 2
	}

	if o.ClientNetReadBufferSize == 0 {
		o.ClientNetReadBufferSize = 1024 * 2
	}

	if o.Logger == nil {
		log := slog.New(slog.NewTextHandler(os.Stdout, nil))
		o.Logger = log
	}
}

// NewClient returns a new Client instance, populated with all the required values and
// references to be used with the server. If you are using this client to directly publish
// messages from the embedding application, set the inline flag to true to bypass ACL and
// topic validation checks.
func (s *Server) NewClient(c net.Conn, listener string, id string, inline bool) *Client {
	cl := newClient(c, &ops{ // [MQTT-3.1.2-6] implicit
		options: s.Options,
		info:    s.Info,
		hooks:   s.hooks,
		log:     s.Log,
		bounds:  &s.bounds,
	})

	cl.ID = id
	cl.Net.Listener = listener

	if inline { // inline clients bypass acl and some validity checks.
		cl.Net.Inline = true
		// By default, we don't want to restrict developer publishes,
		// but if you do, reset this after creating inline client.
		cl.State.Inflight.ResetReceiveQuota(math.MaxInt32)
	}

	return cl
}

// AddHook attaches a new Hook to the server. Ideally, this should be called
// before the server is started with s.Serve().
func (s *Server) AddHook(hook Hook, config any) error {
	nl := s.Log.With("hook", hook.ID())
	hook.SetOpts(nl, &HookOptions{
		Capabilities: s.Options.Capabilities,
	})

	s.Log.Info("added hook", "hook", hook.ID())
	return s.hooks.Add(hook, config)
}

// AddHooksFromConfig adds hooks to the server which were specified in the hooks config (usually from a config file).
// New built-in hooks should be added to this list.
func (s *Server) AddHooksFromConfig(hooks []HookLoadConfig) error {
	for _, h := range hooks {
		if err := s.AddHook(h.Hook, h.Config); err != nil {
			return err
		}
	}
	return nil
}

// AddListener adds a new network listener to the server, for receiving incoming client connections.
func (s *Server) AddListener(l listeners.Listener) error {
	if _, ok := s.Listeners.Get(l.ID()); ok {
		return ErrListenerIDExists
	}

	nl := s.Log.With(slog.String("listener", l.ID()))
	err := l.Init(nl)
	if err != nil {
		return err
	}

	s.Listeners.Add(l)

	s.Log.Info("attached listener", "id", l.ID(), "protocol", l.Protocol(), "address", l.Address())
	return nil
}

// AddListenersFromConfig adds listeners to the server which were specified in the listeners config (usually from a config file).
// New built-in listeners should be added to this list.
//
// faceagent patch (size): only the TCP and unix listeners; naming the websocket and HTTP
// listeners here linked them (and gorilla/websocket) into every binary.
func (s *Server) AddListenersFromConfig(configs []listeners.Config) error {
	for _, conf := range configs {
		var l listeners.Listener
		switch strings.ToLower(conf.Type) {
		case listeners.TypeTCP:
			l = listeners.NewTCP(conf)
		case listeners.TypeUnix:
			l = listeners.NewUnixSock(conf)
		default:
			s.Log.Error("listener type unavailable by config", "listener", conf.Type)
			continue
		}
		if err := s.AddListener(l); err != nil {
			return err
		}
	}
	return nil
}

// Serve starts the event loops responsible for establishing client connections
// on all attached listeners, publishing the system topics, and starting all hooks.
func (s *Server) Serve() error {
	s.Log.Info("mochi mqtt starting", "version", Version)
	defer s.Log.Info("mochi mqtt server started")

	if len(s.Options.Listeners) > 0 {
		err := s.AddListenersFromConfig(s.Options.Listeners)
		if err != nil {
			return err
		}
	}

	if len(s.Options.Hooks) > 0 {
		err := s.AddHooksFromConfig(s.Options.Hooks)
		if err != nil {
			return err
		}
	}

	if s.hooks.Provides(
		StoredClients,
		StoredInflightMessages,
		StoredRetainedMessages,
		StoredSubscriptions,
		StoredSysInfo,
	) {
		err := s.readStore()
		if err != nil {
			return err
		}
	}

	go s.eventLoop()                            // spin up event loop for issuing $SYS values and closing server.
	s.Listeners.ServeAll(s.EstablishConnection) // start listening on all listeners.
	s.publishSysTopics()                        // begin publishing $SYS system values.
	s.hooks.OnStarted()

	return nil
}

// eventLoop loops forever, running various server housekeeping methods at different intervals.
func (s *Server) eventLoop() {
	s.Log.Debug("system event loop started")
	defer s.Log.Debug("system event loop halted")

	for {
		select {
		case <-s.done:
			s.loop.sysTopics.Stop()
			return
		case <-s.loop.sysTopics.C:
			s.publishSysTopics()
		case <-s.loop.clientExpiry.C:
			s.clearExpiredClients(time.Now().Unix())
		case <-s.loop.retainedExpiry.C:
			s.clearExpiredRetainedMessages(time.Now().Unix())
		case <-s.loop.willDelaySend.C:
			s.sendDelayedLWT(time.Now().Unix())
		case <-s.loop.inflightExpiry.C:
			s.clearExpiredInflights(time.Now().Unix())
		}
	}
}

// EstablishConnection establishes a new client when a listener accepts a new connection.
func (s *Server) EstablishConnection(listener string, c net.Conn) error {
	cl := s.NewClient(c, listener, "", false)
	return s.attachClient(cl, listener)
}

// attachClient validates an incoming client connection and if viable, attaches the client
// to the server, performs session housekeeping, and reads incoming packets.
func (s *Server) attachClient(cl *Client, listener string) error {
	defer s.Listeners.ClientsWg.Done()
	s.Listeners.ClientsWg.Add(1)

	cl.State.connacked = make(chan struct{}) // faceagent patch (CONNACK first): see WriteLoop
	go cl.WriteLoop()
	defer cl.Stop(nil)

	err := s.connectClient(cl, listener)
	if err != nil {
		// faceagent patch (DISCONNECT delivered): a client taken over while it was
		// connecting (registered, its CONNACK not yet written) was sent a DISCONNECT, which
		// leaves the connection to this reader's drain: without it the socket stayed open
		// for good, its descriptor and agent/broker's slot before CONNACK with it.
		cl.finishLinger()
		return err
	}
	// connected: clientGone counts it out of Info.ClientsConnected

	err = cl.Read(s.receivePacket)
	return s.clientGone(cl, listener, err)
}

// clientGone ends attachClient once the client's read loop returned err: held
// acknowledgements, the will, the OnDisconnect hooks, and the session if it expires.
// faceagent patch (stack): out of attachClient, whose frame is under a parked reader for
// the whole connection: with it (360 bytes) a parked reader used 8 bytes more than a
// quarter of an 8 KiB stack, so the GC never shrank it to 4 KiB.
//
//go:noinline
func (s *Server) clientGone(cl *Client, listener string, err error) error {
	_ = s.flushAcks(cl, nil) // faceagent patch (PUBACK after storing): stored; written if it still can be
	s.forgetAcks(cl)
	if err != nil {
		s.sendLWT(cl)
		cl.Stop(err)
	} else {
		cl.Properties.Will = Will{} // [MQTT-3.14.4-3] [MQTT-3.1.2-10]
	}
	s.Log.Debug("client disconnected", "error", err, "client", cl.ID, "remote", cl.Net.Remote, "listener", listener)

	expire := (cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.SessionExpiryInterval == 0) || (cl.Properties.ProtocolVersion < 5 && cl.Properties.Clean)
	s.hooks.OnDisconnect(cl, err, expire)

	if expire {
		unlock := s.sessions.lock(cl.ID) // faceagent patch (session takeover): not while a takeover copies it
		if !cl.IsTakenOver() {
			cl.ClearInflights()
			s.UnsubscribeClient(cl)
			s.releaseSession(cl)          // faceagent patch (byte bounds)
			s.Clients.deleteIf(cl.ID, cl) // [MQTT-4.1.0-2] ![MQTT-3.1.2-23] faceagent patch (byte bounds): not a client that took the id since
		}
		unlock()
	}

	// faceagent patch (DISCONNECT delivered): no longer a connected client while its
	// connection lingers (MaximumClients counts connected clients): counted until the
	// linger ended, it took a place of MaximumClients for up to DisconnectLinger after every
	// DISCONNECT the server sent, and a client reconnecting at once on a full server was
	// refused. The connection itself stays bounded (DisconnectLinger; agent/broker's
	// listener counts open connections).
	atomic.AddInt64(&s.Info.ClientsConnected, -1)
	cl.finishLinger() // faceagent patch (DISCONNECT delivered): the peer reads its DISCONNECT
	return err
}

// connectClient reads and answers the CONNECT of attachClient's client. On success the
// client is counted in Info.ClientsConnected (clientGone takes it off when the client
// goes) and its session is established.
//
// faceagent patch (stack): this was the first half of attachClient, whose frame (~3 KB:
// several packets by value) then stayed on every client's reader goroutine for the whole
// connection and kept its stack from shrinking below 16 KiB.
//
//go:noinline
func (s *Server) connectClient(cl *Client, listener string) (err error) {
	defer cl.releaseInbound() // faceagent patch (byte bounds): a large CONNECT's budget (readPacket)
	pk, err := s.readConnectionPacket(cl)
	if err != nil {
		return fmt.Errorf("read connection: %w", err)
	}

	cl.ParseConnect(listener, pk)
	// faceagent patch (byte bounds): sessions kept for disconnected clients count too
	// (bounds.go).
	if s.clientsFull(cl) {
		s.quotaExceeded(cl, QuotaClients, true, &pk)
		if cl.Properties.ProtocolVersion < 5 {
			s.SendConnack(cl, packets.ErrServerUnavailable, false, nil)
		} else {
			s.SendConnack(cl, packets.ErrQuotaExceeded, false, nil)
		}

		return packets.ErrQuotaExceeded
	}
	code := s.validateConnect(cl, pk) // [MQTT-3.1.4-1] [MQTT-3.1.4-2]
	if code != packets.CodeSuccess {
		if err := s.SendConnack(cl, code, false, nil); err != nil {
			return fmt.Errorf("invalid connection send ack: %w", err)
		}
		return code // [MQTT-3.2.2-7] [MQTT-3.1.4-6]
	}

	err = s.hooks.OnConnect(cl, pk)
	if err != nil {
		return err
	}

	cl.refreshDeadline(cl.State.Keepalive)
	// faceagent patch (refusal code): 0x86 unless a ConnectAuthenticator chose another.
	if code := s.hooks.authenticateConnect(cl, pk); code.Code != packets.CodeSuccess.Code { // [MQTT-3.1.4-2]
		err := s.SendConnack(cl, code, false, nil)
		if err != nil {
			return fmt.Errorf("invalid connection send ack: %w", err)
		}

		return code
	}

	// faceagent patch (byte bounds): the will counts in the session; a session that ends
	// because the connection failed before it was established gives back what it held.
	if q := s.willRoom(cl); q != 0 {
		s.quotaExceeded(cl, q, true, &pk)
		if cl.Properties.ProtocolVersion < 5 {
			s.SendConnack(cl, packets.ErrServerUnavailable, false, nil)
		} else {
			s.SendConnack(cl, packets.ErrQuotaExceeded, false, nil)
		}
		return packets.ErrQuotaExceeded
	}

	atomic.AddInt64(&s.Info.ClientsConnected, 1)
	connected, registered := false, false
	defer func() {
		if !connected {
			atomic.AddInt64(&s.Info.ClientsConnected, -1)
			// faceagent patch (end of a failed connection): a client that took its session
			// (registered) but whose CONNACK or resend failed ends as one that connected
			// and left: stopped (nothing more is written to it: no PUBLISH before a CONNACK),
			// then the hooks, which saw OnSessionEstablish, get OnDisconnect, expiring the
			// session as clientGone would. Upstream told them nothing, and a hook keeping
			// state from OnSessionEstablish to OnSessionEstablished or OnDisconnect
			// (agent/broker's takeover guard) kept it, and the client, for good. (A refusal
			// by WaitBeforeConnack tells them itself, expire false.)
			if registered {
				cl.Stop(err)
				s.hooks.OnDisconnect(cl, err, (cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.SessionExpiryInterval == 0) ||
					(cl.Properties.ProtocolVersion < 5 && cl.Properties.Clean))
			}
			s.connectFailed(cl) // faceagent patch (byte bounds)
		}
	}()

	// faceagent patch (session takeover): one CONNECT of a client id at a time from here to
	// its registration, so that a second one takes this one over (sessionLocks).
	unlock := s.sessions.lock(cl.ID)
	s.hooks.OnSessionEstablish(cl, pk)
	if err := s.waitBeforeConnack(cl); err != nil {
		unlock()
		return err
	}

	sessionPresent := s.inheritClientSession(pk, cl)
	s.Clients.Add(cl) // [MQTT-4.1.0-1]
	registered = true
	unlock()

	err = s.SendConnack(cl, code, sessionPresent, nil) // [MQTT-3.1.4-5] [MQTT-3.2.0-1] [MQTT-3.2.0-2] &[MQTT-3.14.0-1]
	if err != nil {
		return fmt.Errorf("ack connection packet: %w", err)
	}
	// faceagent patch (CONNACK first): what was routed to the client since its
	// registration goes out now, behind the CONNACK (WritePacket buffered the CONNACK for
	// the writer to flush first if the queue held packets already).
	if g := cl.State.connacked; g != nil {
		close(g)
	}

	s.loop.willDelayed.Delete(cl.ID) // [MQTT-3.1.3-9]

	if sessionPresent {
		err = cl.ResendInflightMessages(true)
		if err != nil {
			return fmt.Errorf("resend inflight: %w", err)
		}
	}

	s.hooks.OnSessionEstablished(cl, pk)
	connected = true
	return nil
}

// readConnectionPacket reads the first incoming header for a connection, and if
// acceptable, returns the valid connection packet.
func (s *Server) readConnectionPacket(cl *Client) (pk packets.Packet, err error) {
	fh := new(packets.FixedHeader)
	err = cl.ReadFixedHeader(fh)
	if err != nil {
		return
	}

	if fh.Type != packets.Connect {
		return pk, packets.ErrProtocolViolationRequireFirstConnect // [MQTT-3.1.0-1]
	}

	pk, err = cl.ReadPacket(fh)
	if err != nil {
		return
	}

	return
}

// receivePacket processes an incoming packet for a client, and issues a disconnect to the client
// if an error has occurred (if mqtt v5).
func (s *Server) receivePacket(cl *Client, pk *packets.Packet) error {
	// faceagent patch (PUBACK after storing): held acknowledgements go out before the
	// client's next packet that is not a QoS 1/2 PUBLISH is handled, unless it is an
	// acknowledgement of a message the server sent (keepsAcksHeld).
	if (pk.FixedHeader.Type != packets.Publish || pk.FixedHeader.Qos == 0) && !keepsAcksHeld(cl, pk) {
		if err := s.flushAcks(cl, nil); err != nil {
			return err
		}
	}
	err := s.processPacket(cl, pk)
	if err != nil {
		if code, ok := err.(packets.Code); ok &&
			cl.Properties.ProtocolVersion == 5 &&
			code.Code >= packets.ErrUnspecifiedError.Code {
			_ = s.DisconnectClient(cl, code)
		}

		s.Log.Warn("error processing packet", "error", err, "client", cl.ID, "listener", cl.Net.Listener, "packet", logPacket(pk)) // faceagent patch (no packets in logs)

		return err
	}

	return nil
}

// validateConnect validates that a connect packet is compliant.
func (s *Server) validateConnect(cl *Client, pk packets.Packet) packets.Code {
	code := pk.ConnectValidate() // [MQTT-3.1.4-1] [MQTT-3.1.4-2]
	if code != packets.CodeSuccess {
		return code
	}

	if cl.Properties.ProtocolVersion < 5 && !pk.Connect.Clean && pk.Connect.ClientIdentifier == "" {
		return packets.ErrUnspecifiedError
	}

	if cl.Properties.ProtocolVersion < s.Options.Capabilities.MinimumProtocolVersion {
		return packets.ErrUnsupportedProtocolVersion // [MQTT-3.1.2-2]
	} else if cl.Properties.Will.Qos > s.Options.Capabilities.MaximumQos {
		return packets.ErrQosNotSupported // [MQTT-3.2.2-12]
	} else if cl.Properties.Will.Retain && s.Options.Capabilities.RetainAvailable == 0x00 {
		return packets.ErrRetainNotSupported // [MQTT-3.2.2-13]
	}

	return code
}

// inheritClientSession inherits the state of an existing client sharing the same
// connection ID. If clean is true, the state of any previously existing client
// session is abandoned.
func (s *Server) inheritClientSession(pk packets.Packet, cl *Client) bool {
	if existing, ok := s.Clients.Get(cl.ID); ok {
		_ = s.DisconnectClient(existing, packets.ErrSessionTakenOver)                                   // [MQTT-3.1.4-3]
		if pk.Connect.Clean || (existing.Properties.Clean && existing.Properties.ProtocolVersion < 5) { // [MQTT-3.1.2-4] [MQTT-3.1.4-4]
			s.UnsubscribeClient(existing)
			existing.ClearInflights()
			s.releaseSession(existing)             // faceagent patch (byte bounds)
			existing.State.isTakenOver.Store(true) // only set isTakenOver after unsubscribe has occurred
			return false                           // [MQTT-3.2.2-3]
		}

		existing.State.isTakenOver.Store(true)
		cl.State.Inbound = existing.State.Inbound.carry() // faceagent patch (packet-id spaces): the client's QoS 2 flows [MQTT-4.3.3-10]
		if existing.State.Inflight.Len() > 0 {
			cl.State.Inflight = existing.State.Inflight.Clone() // [MQTT-3.1.2-5]
			// faceagent patch (counter drift): the copies count in Info.Inflight, as
			// existing.ClearInflights below counts the originals out; upstream counted
			// nothing in, and the counter lost every message carried over a takeover.
			atomic.AddInt64(&s.Info.Inflight, int64(cl.State.Inflight.Len()))
			if cl.State.Inflight.maximumReceiveQuota == 0 && cl.ops.options.Capabilities.ReceiveMaximum != 0 {
				cl.State.Inflight.ResetReceiveQuota(int32(cl.ops.options.Capabilities.ReceiveMaximum)) // server receive max per client
				cl.State.Inflight.ResetSendQuota(int32(cl.Properties.Props.ReceiveMaximum))            // client receive max
			}
		}

		for _, sub := range existing.State.Subscriptions.GetAll() {
			existed := !s.Topics.Subscribe(cl.ID, sub) // [MQTT-3.8.4-3]
			if !existed {
				atomic.AddInt64(&s.Info.Subscriptions, 1)
			}
			cl.State.Subscriptions.Add(sub.Filter, sub)
		}

		// Clean the state of the existing client to prevent sequential take-overs
		// from increasing memory usage by inflights + subs * client-id.
		s.UnsubscribeClient(existing)
		existing.ClearInflights()
		s.releaseSession(existing) // faceagent patch (byte bounds): the new client counts what it took

		s.Log.Debug("session taken over", "client", cl.ID, "old_remote", existing.Net.Remote, "new_remote", cl.Net.Remote)

		return true // [MQTT-3.2.2-3]
	}

	if atomic.LoadInt64(&s.Info.ClientsConnected) > atomic.LoadInt64(&s.Info.ClientsMaximum) {
		atomic.AddInt64(&s.Info.ClientsMaximum, 1)
	}

	return false // [MQTT-3.2.2-2]
}

// SendConnack returns a Connack packet to a client.
func (s *Server) SendConnack(cl *Client, reason packets.Code, present bool, properties *packets.Properties) error {
	if properties == nil {
		properties = &packets.Properties{
			ReceiveMaximum: s.Options.Capabilities.ReceiveMaximum,
		}
	}

	properties.ReceiveMaximum = s.Options.Capabilities.ReceiveMaximum // 3.2.2.3.3 Receive Maximum
	if cl.State.ServerKeepalive {                                     // You can set this dynamically using the OnConnect hook.
		properties.ServerKeepAlive = cl.State.Keepalive // [MQTT-3.1.2-21]
		properties.ServerKeepAliveFlag = true
	}

	if reason.Code >= packets.ErrUnspecifiedError.Code {
		if cl.Properties.ProtocolVersion < 5 {
			if v3reason, ok := packets.V5CodesToV3[reason]; ok { // NB v3 3.2.2.3 Connack return codes
				reason = v3reason
			}
		}

		properties.ReasonString = reason.Reason
		ack := packets.Packet{
			FixedHeader: packets.FixedHeader{
				Type: packets.Connack,
			},
			SessionPresent: false,       // [MQTT-3.2.2-6]
			ReasonCode:     reason.Code, // [MQTT-3.2.2-8]
			Properties:     *properties,
		}
		return cl.WritePacket(ack)
	}

	if s.Options.Capabilities.MaximumQos < 2 {
		properties.MaximumQos = s.Options.Capabilities.MaximumQos // [MQTT-3.2.2-9]
		properties.MaximumQosFlag = true
	}

	if cl.Properties.Props.AssignedClientID != "" {
		properties.AssignedClientID = cl.Properties.Props.AssignedClientID // [MQTT-3.1.3-7] [MQTT-3.2.2-16]
	}

	if cl.Properties.Props.SessionExpiryInterval > s.Options.Capabilities.MaximumSessionExpiryInterval {
		properties.SessionExpiryInterval = s.Options.Capabilities.MaximumSessionExpiryInterval
		properties.SessionExpiryIntervalFlag = true
		cl.Properties.Props.SessionExpiryInterval = properties.SessionExpiryInterval
		cl.Properties.Props.SessionExpiryIntervalFlag = true
	}

	ack := packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type: packets.Connack,
		},
		SessionPresent: present,
		ReasonCode:     reason.Code, // [MQTT-3.2.2-8]
		Properties:     *properties,
	}
	return cl.WritePacket(ack)
}

// processPacket processes an inbound packet for a client. Since the method is
// typically called as a goroutine, errors are primarily for test checking purposes.
func (s *Server) processPacket(cl *Client, pk *packets.Packet) error {
	var err error

	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = s.processConnect(cl, pk)
	case packets.Disconnect:
		err = s.processDisconnect(cl, pk)
	case packets.Pingreq:
		err = s.processPingreq(cl, pk)
	case packets.Publish:
		code := pk.PublishValidate(s.Options.Capabilities.TopicAliasMaximum)
		if code != packets.CodeSuccess {
			return code
		}
		err = s.processPublish(cl, pk)
	case packets.Puback:
		err = s.processPuback(cl, pk)
	case packets.Pubrec:
		err = s.processPubrec(cl, pk)
	case packets.Pubrel:
		err = s.processPubrel(cl, pk)
	case packets.Pubcomp:
		err = s.processPubcomp(cl, pk)
	case packets.Subscribe:
		code := pk.SubscribeValidate()
		if code != packets.CodeSuccess {
			return code
		}
		err = s.processSubscribe(cl, pk)
	case packets.Unsubscribe:
		code := pk.UnsubscribeValidate()
		if code != packets.CodeSuccess {
			return code
		}
		err = s.processUnsubscribe(cl, pk)
	case packets.Auth:
		code := pk.AuthValidate()
		if code != packets.CodeSuccess {
			return code
		}
		err = s.processAuth(cl, pk)
	default:
		return fmt.Errorf("no valid packet available; %v", pk.FixedHeader.Type)
	}

	return s.packetProcessed(cl, pk, err)
}

// packetProcessed ends processPacket: the OnPacketProcessed hook, then the next inflight
// message waiting for send quota. faceagent patch (stack): out of processPacket, whose
// frame then held three packets by value while every handler (and, through inline
// subscribers, the agent's next publish) ran on top of it; the resend is out of this one.
//
//go:noinline
func (s *Server) packetProcessed(cl *Client, pk *packets.Packet, err error) error {
	s.hooks.OnPacketProcessed(cl, *pk, err)
	if err != nil {
		return err
	}

	if cl.State.Inflight.Len() > 0 && atomic.LoadInt32(&cl.State.Inflight.sendQuota) > 0 {
		s.sendNextImmediate(cl)
	}

	return nil
}

// sendNextImmediate sends the next inflight message waiting for send quota.
//
// faceagent patch (byte bounds): taken with Inflight.takeNextInto, which marks it sent and
// takes its quota at once, as the writer goroutine may look too (drainWaiting).
//
// faceagent patch (held order): nothing is taken while the writer has packets queued or
// one it is writing (writerBusy): those are older than any waiting message, which the
// writer sends once its queue is empty (drainWaiting), with the quota this PUBACK gave back.
//
//go:noinline
func (s *Server) sendNextImmediate(cl *Client) {
	next := outboundPackets.Get().(*packets.Packet)
	defer releaseOutbound(next)
	if cl.State.Inflight.takeNextInto(next, cl.writerBusy) {
		// faceagent patch (send quota): the message stays in flight until its PUBACK, no
		// longer waiting for quota (Expiry -1 replaced what publishToClient had; 0: none).
		// Upstream deleted it once written: its PUBACK found nothing and gave the quota it
		// took back to no one (a client with Receive Maximum 1 got nothing more), and a
		// session resumed before that PUBACK was not sent it again.
		_ = cl.WritePacket(*next)
	}
}

// processConnect processes a Connect packet. The packet cannot be used to establish
// a new connection on an existing connection. See EstablishConnection instead.
func (s *Server) processConnect(cl *Client, _ *packets.Packet) error {
	s.sendLWT(cl)
	return packets.ErrProtocolViolationSecondConnect // [MQTT-3.1.0-2]
}

// processPingreq processes a Pingreq packet.
//
//go:noinline
func (s *Server) processPingreq(cl *Client, _ *packets.Packet) error {
	return cl.WritePacket(packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type: packets.Pingresp, // [MQTT-3.12.4-1]
		},
	})
}

// Publish publishes a publish packet into the broker as if it were sent from the specified client.
// This is a convenience function which wraps InjectPacket. As such, this method can publish packets
// to any topic (including $SYS) and bypass ACL checks. The qos byte is used for limiting the
// outbound qos (mqtt v5) rather than issuing to the broker (we assume qos 2 complete).
func (s *Server) Publish(topic string, payload []byte, retain bool, qos byte) error {
	if !s.Options.InlineClient {
		return ErrInlineClientNotEnabled
	}

	// faceagent patch (stack): set field by field and passed by pointer, so that this frame
	// holds one packet, not a literal and its copy.
	var pk packets.Packet
	pk.FixedHeader.Type = packets.Publish
	pk.FixedHeader.Qos = qos
	pk.FixedHeader.Retain = retain
	pk.TopicName = topic
	pk.Payload = payload
	pk.PacketID = uint16(qos) // we never process the inbound qos, but we need a packet id for validity checks.
	return s.injectPacket(s.inlineClient, &pk)
}

// Subscribe adds an inline subscription for the specified topic filter and subscription identifier
// with the provided handler function.
func (s *Server) Subscribe(filter string, subscriptionId int, handler InlineSubFn) error {
	if !s.Options.InlineClient {
		return ErrInlineClientNotEnabled
	}

	if handler == nil {
		return packets.ErrInlineSubscriptionHandlerInvalid
	}

	if !IsValidFilter(filter, false) {
		return packets.ErrTopicFilterInvalid
	}

	subscription := packets.Subscription{
		Identifier: subscriptionId,
		Filter:     filter,
	}

	pk := s.hooks.OnSubscribe(s.inlineClient, packets.Packet{ // subscribe like a normal client.
		Origin:      s.inlineClient.ID,
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe},
		Filters:     packets.Subscriptions{subscription},
	})

	inlineSubscription := InlineSubscription{
		Subscription: subscription,
		Handler:      handler,
	}

	s.Topics.InlineSubscribe(inlineSubscription)
	s.hooks.OnSubscribed(s.inlineClient, pk, []byte{packets.CodeSuccess.Code})

	// Handling retained messages.
	for _, pkv := range s.Topics.Messages(filter) { // [MQTT-3.8.4-4]
		handler(s.inlineClient, inlineSubscription.Subscription, pkv)
	}
	return nil
}

// Unsubscribe removes an inline subscription for the specified subscription and topic filter.
// It allows you to unsubscribe a specific subscription from the internal subscription
// associated with the given topic filter.
func (s *Server) Unsubscribe(filter string, subscriptionId int) error {
	if !s.Options.InlineClient {
		return ErrInlineClientNotEnabled
	}

	if !IsValidFilter(filter, false) {
		return packets.ErrTopicFilterInvalid
	}

	pk := s.hooks.OnUnsubscribe(s.inlineClient, packets.Packet{
		Origin:      s.inlineClient.ID,
		FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe},
		Filters: packets.Subscriptions{
			{
				Identifier: subscriptionId,
				Filter:     filter,
			},
		},
	})

	s.Topics.InlineUnsubscribe(subscriptionId, filter)
	s.hooks.OnUnsubscribed(s.inlineClient, pk)
	return nil
}

// InjectPacket injects a packet into the broker as if it were sent from the specified client.
// InlineClients using this method can publish packets to any topic (including $SYS) and bypass ACL checks.
func (s *Server) InjectPacket(cl *Client, pk packets.Packet) error {
	return s.injectPacket(cl, &pk)
}

// injectPacket is InjectPacket with the packet by pointer. faceagent patch (stack).
func (s *Server) injectPacket(cl *Client, pk *packets.Packet) error {
	pk.ProtocolVersion = cl.Properties.ProtocolVersion

	err := s.processPacket(cl, pk)
	if err != nil {
		return err
	}

	atomic.AddInt64(&cl.ops.info.PacketsReceived, 1)
	if pk.FixedHeader.Type == packets.Publish {
		atomic.AddInt64(&cl.ops.info.MessagesReceived, 1)
	}

	return nil
}

// processPublish processes a Publish packet.
func (s *Server) processPublish(cl *Client, pk *packets.Packet) error {
	route, err := s.admitPublish(cl, pk)
	if !route {
		// faceagent patch (PUBACK after storing): a message refused or dropped here leaves
		// no acknowledgement held for the client's earlier ones (writeAckFor wrote them
		// first, in order); the client may wait for them before it sends anything else.
		if ferr := s.flushAcks(cl, nil); err == nil {
			err = ferr
		}
		return err
	}

	// If it's inlineClient, it can't handle PUBREC and PUBREL.
	// When it publishes a package with a qos > 0, the server treats
	// the package as qos=0, and the client receives it as qos=1 or 2.
	if pk.FixedHeader.Qos == 0 || cl.Net.Inline {
		s.publishToSubscribers(pk)
		s.published(cl, pk)
		return nil
	}

	s.prepareAck(cl, pk)

	// faceagent patch (PUBACK after storing): route the message first, then hold the
	// acknowledgement until it is stored (AckWaiter); written at once unless more of the
	// client's packets are buffered, or when it took the client's last receive quota: held
	// acknowledgements count against it, and the next PUBLISH would find none and be
	// disconnected (an MQTT 3.1.1 client has no Receive Maximum to keep it under, and
	// upstream never let the quota run out).
	s.publishToSubscribers(pk)
	s.published(cl, pk)
	if atomic.LoadInt32(&cl.State.Inflight.receiveQuota) > 0 &&
		cl.Net.bconn != nil && cl.Net.bconn.Buffered() > 0 {
		s.holdAck(cl, pk.PacketID)
		return nil
	}
	return s.ackNow(cl, pk.PacketID)
}

// admitPublish is the first half of processPublish: it checks the message and runs the
// OnPublish hooks, and reports whether the message is to be routed (otherwise err is what
// processPublish returns).
// faceagent patch (stack): split out so that the packets it builds (acks, the hooks'
// result) are not in processPublish's frame while the message is routed; routing runs
// inline subscribers, and through them the agent's next publish, on top.
//
//go:noinline
func (s *Server) admitPublish(cl *Client, pk *packets.Packet) (route bool, err error) {
	if !cl.Net.Inline && !IsValidFilter(pk.TopicName, true) {
		return false, nil
	}

	if atomic.LoadInt32(&cl.State.Inflight.receiveQuota) == 0 {
		return false, s.DisconnectClient(cl, packets.ErrReceiveMaximum) // ~[MQTT-3.3.4-7] ~[MQTT-3.3.4-8]
	}

	if !cl.Net.Inline && !s.hooks.OnACLCheck(cl, pk.TopicName, true) {
		if pk.FixedHeader.Qos == 0 {
			return false, nil
		}

		if cl.Properties.ProtocolVersion != 5 {
			return false, s.DisconnectClient(cl, packets.ErrNotAuthorized)
		}

		ackType := packets.Puback
		if pk.FixedHeader.Qos == 2 {
			ackType = packets.Pubrec
		}

		return false, s.writeAckFor(cl, pk, ackType, packets.ErrNotAuthorized)
	}

	pk.Origin = cl.ID
	pk.Created = time.Now().Unix()

	if expiry := minimum(s.Options.Capabilities.MaximumMessageExpiryInterval,
		int64(pk.Properties.MessageExpiryInterval)); expiry > 0 {
		pk.Expiry = pk.Created + expiry
	}

	if !cl.Net.Inline && pk.FixedHeader.Qos > 0 {
		if inUse, err := s.reusePacketID(cl, pk); inUse || err != nil {
			return false, err
		}
		// faceagent patch (byte bounds): a QoS 2 message's PUBREC stays in the session's
		// in-flight set until the PUBREL; refused (PUBREC 0x97) when it does not fit.
		if pk.FixedHeader.Qos == 2 {
			if q := s.sessionRoom(cl, MessageOverhead); q != 0 {
				s.quotaExceeded(cl, q, true, pk)
				if cl.Properties.ProtocolVersion != 5 {
					return false, s.DisconnectClient(cl, packets.ErrQuotaExceeded)
				}
				return false, s.writeAckFor(cl, pk, packets.Pubrec, packets.ErrQuotaExceeded)
			}
		}
	}

	if pk.Properties.TopicAliasFlag && pk.Properties.TopicAlias > 0 { // [MQTT-3.3.2-11]
		pk.TopicName = cl.State.TopicAliases.Inbound.Set(pk.Properties.TopicAlias, pk.TopicName)
	}

	if pk.FixedHeader.Qos > s.Options.Capabilities.MaximumQos {
		pk.FixedHeader.Qos = s.Options.Capabilities.MaximumQos // [MQTT-3.2.2-9] Reduce qos based on server max qos capability
	}

	if err = s.publishHooks(cl, pk); err != nil {
		if errors.Is(err, packets.ErrRejectPacket) {
			return false, nil
		} else if errors.Is(err, packets.CodeSuccessIgnore) {
			pk.Ignore = true
		} else if cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos > 0 && errors.As(err, new(packets.Code)) {
			err = s.writeAckFor(cl, pk, packets.Puback, err.(packets.Code))
			if err != nil {
				return false, err
			}
			return false, nil
		}
	}

	if pk.FixedHeader.Retain { // [MQTT-3.3.1-5] ![MQTT-3.3.1-8]
		// faceagent patch (byte bounds): refused when it does not fit in the retained
		// messages' bytes, if the publisher can be told (MQTT 5, QoS 1/2); routed without
		// being retained otherwise.
		if !s.retainMessage(cl, pk) && refusable(cl, pk) {
			ackType := packets.Puback
			if pk.FixedHeader.Qos == 2 {
				ackType = packets.Pubrec
			}
			return false, s.writeAckFor(cl, pk, ackType, packets.ErrQuotaExceeded)
		}
	}
	return true, nil
}

// reusePacketID checks the packet id of a client's QoS 1/2 publish against the client's
// unfinished ones (Inbound) and reports whether the publish is answered here, not routed:
// a QoS 2 publish sent again while its flow waits for PUBREL is answered with a PUBREC of
// success and not delivered again [MQTT-4.3.3-10]; another publish under that id is
// refused (0x91, packet identifier in use). A QoS 1 publish under the id of a PUBACK not
// yet written (the client did not wait for it) has the held acknowledgements written
// first, then is a new message. faceagent patch (stack): out of admitPublish, with the
// packets it builds.
//
// faceagent patch (packet-id spaces): the messages in flight to the client are not
// consulted: their ids are the server's, unrelated to the client's. Upstream looked the id
// up in the one in-flight set holding both, deleted a message sent to the client under it
// ("[MQTT-4.3.2-5]", displacing it for good) and answered a QoS 2 publish sent again with
// 0x91, which tells the publisher its delivered message failed.
//
//go:noinline
func (s *Server) reusePacketID(cl *Client, pk *packets.Packet) (inUse bool, err error) {
	switch cl.State.Inbound.state(pk.PacketID) {
	case inboundPuback:
		return false, s.flushAcks(cl, nil)
	case inboundQos2:
		if pk.FixedHeader.Qos < 2 {
			return true, s.writeAckFor(cl, pk, packets.Puback, packets.ErrPacketIdentifierInUse)
		}
		ack := s.buildAck(pk.PacketID, packets.Pubrec, 0, pk.Properties, packets.CodeSuccess)
		if cl.State.Inbound.rearm(&ack) {
			return true, s.ackNow(cl, pk.PacketID)
		}
		return true, nil // its PUBREC, still held, answers both
	}
	return false, nil
}

// publishHooks runs the OnPublish hooks, which may replace pk. faceagent patch (stack): by
// pointer (Hooks.onPublish), each hook in a frame of its own.
func (s *Server) publishHooks(cl *Client, pk *packets.Packet) error {
	return s.hooks.onPublish(cl, pk)
}

// writeAckFor writes the acknowledgement of type pkt with reason for the publish pk.
// faceagent patch (stack): the ack out of admitPublish's frame.
//
//go:noinline
func (s *Server) writeAckFor(cl *Client, pk *packets.Packet, pkt byte, reason packets.Code) error {
	if err := s.flushAcks(cl, nil); err != nil { // faceagent patch (PUBACK after storing): in order [MQTT-4.6.0-2]
		return err
	}
	return cl.WritePacket(s.buildAck(pk.PacketID, pkt, 0, pk.Properties, reason))
}

// keepsAcksHeld reports whether pk, a packet from cl that is not a QoS 1/2 PUBLISH, is
// handled without writing cl's held acknowledgements first: a PUBACK, PUBREC or PUBCOMP
// (the client acknowledging a message the server sent it) while more of cl's packets are
// buffered. Those concern the server's packet ids only (Inflight), and what they make the
// server write (a PUBREL, a message that waited for send quota) is not ordered with the
// acknowledgements of the client's publishes [MQTT-4.6.0]. A request/response client
// interleaves its acknowledgements of responses with its next requests: flushing before
// each made every request of a burst wait for storage (AckWaiter) on its own. The last
// buffered packet still flushes, so the read loop never waits for the client with
// acknowledgements held. faceagent patch (PUBACK after storing).
func keepsAcksHeld(cl *Client, pk *packets.Packet) bool {
	switch pk.FixedHeader.Type {
	case packets.Puback, packets.Pubrec, packets.Pubcomp:
		return cl.Net.bconn != nil && cl.Net.bconn.Buffered() > 0
	}
	return false
}

// prepareAck holds the acknowledgement of a client's QoS 1 or 2 publish (PUBACK or PUBREC)
// in its Inbound, where flushAcks finds it; a new flow takes receive quota. faceagent patch
// (stack): out of processPublish, with the ack it builds.
//
// faceagent patch (packet-id spaces): upstream put it in the client's in-flight set (where
// it overwrote a message in flight to the client under the same id), counted it in
// Info.Inflight and reported it to OnQosPublish, whose storage hooks then stored it under
// that message's key. The hooks see only the messages the server sends.
//
//go:noinline
func (s *Server) prepareAck(cl *Client, pk *packets.Packet) {
	ack := s.buildAck(pk.PacketID, packets.Puback, 0, pk.Properties, packets.QosCodes[pk.FixedHeader.Qos]) // [MQTT-4.3.2-4]
	if pk.FixedHeader.Qos == 2 {
		ack = s.buildAck(pk.PacketID, packets.Pubrec, 0, pk.Properties, packets.CodeSuccess) // [MQTT-3.3.4-1] [MQTT-4.3.3-8]
	}
	if cl.State.Inbound.put(&ack) {
		cl.State.Inflight.DecreaseReceiveQuota()
	}
}

// ackNow writes the acknowledgement prepareAck left in flight under id, after any held
// ones. faceagent patch (stack): the ack is read back here rather than kept in
// processPublish's frame while the message was routed.
//
// faceagent patch (stack): the ack read back is on the heap (outboundPackets).
//
//go:noinline
func (s *Server) ackNow(cl *Client, id uint16) error {
	ack := outboundPackets.Get().(*packets.Packet)
	defer releaseOutbound(ack)
	if !cl.State.Inbound.pending(id, ack) { // faceagent patch (packet-id spaces)
		return s.flushAcks(cl, nil)
	}
	return s.flushAcks(cl, ack)
}

// published runs the OnPublished hooks. faceagent patch (stack): a call of its own, so
// that processPublish's frame does not hold the packet copy the hooks take.
//
//go:noinline
func (s *Server) published(cl *Client, pk *packets.Packet) {
	s.hooks.OnPublished(cl, *pk)
}

// retainMessage adds a message to a topic, and if a persistent store is provided,
// adds the message to the store to be reloaded if necessary.
//
// faceagent patch (byte bounds): it reports false when the message was not retained for
// Capabilities.MaximumRetainedBytes.
func (s *Server) retainMessage(cl *Client, pk *packets.Packet) bool {
	if s.Options.Capabilities.RetainAvailable == 0 || pk.Ignore {
		return true
	}

	limit := s.Options.Capabilities.MaximumRetainedBytes
	if limit > 0 && len(pk.Payload) > 0 && !s.Topics.retainFits(pk, limit) {
		// refused before the copy below, which would be garbage (retain decides, on the copy)
		s.quotaExceeded(cl, QuotaRetainedBytes, refusable(cl, pk), pk)
		return false
	}
	out := pk.Copy(false)
	r, ok := s.Topics.retain(out, limit)
	if !ok {
		s.quotaExceeded(cl, QuotaRetainedBytes, refusable(cl, pk), pk)
		return false
	}
	s.hooks.OnRetainMessage(cl, *pk, r)
	atomic.StoreInt64(&s.Info.Retained, int64(s.Topics.Retained.Len()))
	return true
}

// publishToSubscribers publishes a publish packet to all subscribers with matching topic filters.
func (s *Server) publishToSubscribers(pk *packets.Packet) {
	if pk.Ignore {
		return
	}

	if pk.Created == 0 {
		pk.Created = time.Now().Unix()
	}

	if pk.Expiry == 0 {
		if expiry := minimum(s.Options.Capabilities.MaximumMessageExpiryInterval,
			int64(pk.Properties.MessageExpiryInterval)); expiry > 0 {
			pk.Expiry = pk.Created + expiry
		}
	}

	// faceagent patch (publish allocations): the subscribers on the stack, a lone client
	// and a lone inline subscription outside their maps (TopicsIndex.route); the hooks get
	// a copy on the heap with everything in the maps, as upstream.
	var subscribers Subscribers
	s.Topics.route(pk.TopicName, pk.Origin, &subscribers)
	if len(subscribers.Shared) > 0 {
		s.selectShared(&subscribers, pk)
	}

	if subscribers.hasInline || len(subscribers.InlineSubscriptions) > 0 {
		s.publishToInline(&subscribers, pk)
	}

	if subscribers.hasOne {
		s.publishToSubscriber(subscribers.oneClient, subscribers.oneSub, pk)
	}
	for id, subs := range subscribers.Subscriptions {
		s.publishToSubscriber(id, subs, pk)
	}
}

// publishToSubscriber publishes pk to the client id, if it is known.
func (s *Server) publishToSubscriber(id string, sub packets.Subscription, pk *packets.Packet) {
	if cl, ok := s.Clients.Get(id); ok {
		err := s.publishToClient(cl, sub, pk)
		if err != nil {
			s.Log.Debug("failed publishing packet", "error", err, "client", cl.ID, "packet", logPacket(pk)) // faceagent patch (no packets in logs)
		}
	}
}

// publishToInline hands pk to the inline subscribers. faceagent patch (stack): out of
// publishToSubscribers, with the copy of the packet the handlers take by value, so that
// routing to clients does not carry it.
//
//go:noinline
func (s *Server) publishToInline(subscribers *Subscribers, pk *packets.Packet) {
	if subscribers.hasInline {
		subscribers.oneInl.Handler(s.inlineClient, subscribers.oneInl.Subscription, *pk)
	}
	for _, inlineSubscription := range subscribers.InlineSubscriptions {
		inlineSubscription.Handler(s.inlineClient, inlineSubscription.Subscription, *pk)
	}
}

// selectShared picks the shared subscriptions' receivers; the hooks get a copy on the heap
// with everything in the maps, as upstream. faceagent patch (stack): out of
// publishToSubscribers, with the packet copy the hooks take.
//
//go:noinline
func (s *Server) selectShared(subscribers *Subscribers, pk *packets.Packet) {
	subscribers.spill()
	selected := new(Subscribers)
	*selected = *subscribers
	selected = s.hooks.OnSelectSubscribers(selected, *pk)
	if len(selected.SharedSelected) == 0 {
		selected.SelectShared()
	}
	selected.MergeSharedSelected()
	*subscribers = *selected
}

// publishToClient queues pk for a subscriber. faceagent patch (stack): it took and
// returned packets by value; nothing used the returned copy.
//
// faceagent patch (publish allocations): the copy it queues comes from outboundPackets
// (newOutbound) and goes back there once written (writeOutbound), or here when it is not
// queued; each message routed took a new ~800-byte packet, and the copy made on this frame
// first is on newOutbound's, which returns before anything else runs.
func (s *Server) publishToClient(cl *Client, sub packets.Subscription, pk *packets.Packet) error {
	if sub.NoLocal && pk.Origin == cl.ID {
		return nil // [MQTT-3.8.3-3]
	}

	if !s.hooks.OnACLCheck(cl, pk.TopicName, false) {
		return packets.ErrNotAuthorized
	}
	if err := s.refuseEarly(cl, sub, pk); err != nil { // faceagent patch (byte bounds)
		return err
	}
	out := newOutbound(pk)
	if !sub.FwdRetainedFlag && ((cl.Properties.ProtocolVersion == 5 && !sub.RetainAsPublished) || cl.Properties.ProtocolVersion < 5) { // ![MQTT-3.3.1-13] [v3 MQTT-3.3.1-9]
		out.FixedHeader.Retain = false // [MQTT-3.3.1-12]
	}

	if len(sub.Identifiers) > 0 { // [MQTT-3.3.4-3]
		out.Properties.SubscriptionIdentifier = []int{}
		for _, id := range sub.Identifiers {
			out.Properties.SubscriptionIdentifier = append(out.Properties.SubscriptionIdentifier, id) // [MQTT-3.3.4-4] ![MQTT-3.3.4-5]
		}
		sort.Ints(out.Properties.SubscriptionIdentifier)
	}

	if out.FixedHeader.Qos > sub.Qos {
		out.FixedHeader.Qos = sub.Qos
	}

	if out.FixedHeader.Qos > s.Options.Capabilities.MaximumQos {
		out.FixedHeader.Qos = s.Options.Capabilities.MaximumQos // [MQTT-3.2.2-9]
	}

	if cl.Properties.Props.TopicAliasMaximum > 0 {
		var aliasExists bool
		out.Properties.TopicAlias, aliasExists = cl.State.TopicAliases.Outbound.Set(pk.TopicName)
		if out.Properties.TopicAlias > 0 {
			out.Properties.TopicAliasFlag = true
			if aliasExists {
				out.TopicName = ""
			}
		}
	}

	if out.FixedHeader.Qos > 0 {
		if cl.State.Inflight.Len() >= int(s.Options.Capabilities.MaximumInflight) {
			releaseOutbound(out)
			atomic.AddInt64(&s.Info.InflightDropped, 1)
			// faceagent patch (byte bounds): to the hooks, which may log it rate-limited
			// (upstream logged a warning for every message).
			s.quotaExceeded(cl, QuotaInflight, false, pk)
			return packets.ErrQuotaExceeded
		}

		i, err := cl.NextPacketID() // [MQTT-4.3.2-1] [MQTT-4.3.3-1]
		if err != nil {
			releaseOutbound(out)
			s.packetIDExhausted(cl, pk, err)
			return packets.ErrQuotaExceeded
		}

		out.PacketID = uint16(i) // [MQTT-2.2.1-4]

		// faceagent patch (byte bounds): within the session's bounds, or dropped for it alone.
		// faceagent patch (counter drift): it takes send quota or waits for it in one step.
		q, waiting := s.putInflight(cl, out) // [MQTT-4.3.2-3] [MQTT-4.3.3-3]
		if q != 0 {
			releaseOutbound(out)
			s.quotaExceeded(cl, q, false, pk)
			return packets.ErrQuotaExceeded
		}

		if waiting { // no send quota left: sent once a PUBACK or PUBCOMP gives one back
			releaseOutbound(out)
			return nil
		}
	}

	if cl.Net.Conn == nil || cl.Closed() {
		releaseOutbound(out)
		return packets.CodeDisconnect
	}

	// faceagent patch (byte bounds): the queue is bounded in bytes too, and a QoS 1/2
	// message that does not fit is held in the session rather than dropped (upstream
	// dropped it and took it out of the session: lost for good unless the broker restarted).
	held := out.FixedHeader.Qos > 0 && cl.State.Inflight.hasWaiting() // in order, behind what waits
	if n := outboundBytes(out); !held && cl.reservePending(n) {
		select {
		case cl.State.outbound <- out: // the writer's now (writeOutbound)
			atomic.AddInt32(&cl.State.outboundQty, 1)
			if cl.Closed() {
				cl.dropQueued() // faceagent patch (counter drift): its writer may have ended
			}
			return nil
		default:
			cl.unreservePending(n)
		}
	}
	if out.FixedHeader.Qos > 0 {
		if !held {
			s.quotaExceeded(cl, QuotaWritesHeld, false, pk)
		}
		cl.holdForWriter(out)
		releaseOutbound(out)
		return nil
	}
	s.publishDropped(cl, pk)
	s.quotaExceeded(cl, QuotaWritesDropped, false, pk)
	releaseOutbound(out)
	return packets.ErrPendingClientWritesExceeded
}

// putInflight puts out in cl's in-flight set; a new entry is counted, stored by the hooks
// (OnQosPublish) and takes send quota, or waits for it when none is left (waiting).
// faceagent patch (stack): out of publishToClient, with the copies of out that Set and the
// hooks take.
//
// faceagent patch (byte bounds): within the session's bounds (admitInflight); it returns the
// bound that refused out, or 0.
//
//go:noinline
func (s *Server) putInflight(cl *Client, out *packets.Packet) (q Quota, waiting bool) {
	q, counted, waiting := s.admitInflight(cl, out, true)
	if q != 0 {
		return q, false
	}
	if counted { // faceagent patch (counter drift): not in a set whose session ended (Inflight.end)
		atomic.AddInt64(&s.Info.Inflight, 1)
	}
	s.hooks.OnQosPublish(cl, *out, out.Created, 0)
	return 0, waiting
}

// packetIDExhausted reports that pk found no packet id free for cl. faceagent patch
// (stack): out of publishToClient, with the copy of pk the hooks take.
//
//go:noinline
func (s *Server) packetIDExhausted(cl *Client, pk *packets.Packet, err error) {
	s.hooks.OnPacketIDExhausted(cl, *pk)
	atomic.AddInt64(&s.Info.InflightDropped, 1)
	s.Log.Warn("packet ids exhausted", "error", err, "client", cl.ID, "listener", cl.Net.Listener)
}

// publishDropped reports pk dropped for cl, its queue of pending writes full. faceagent
// patch (stack): out of publishToClient, with the copy of pk the hooks take.
//
//go:noinline
func (s *Server) publishDropped(cl *Client, pk *packets.Packet) {
	atomic.AddInt64(&s.Info.MessagesDropped, 1)
	cl.ops.hooks.OnPublishDropped(cl, *pk)
}

// newOutbound returns a packet from outboundPackets holding pk.Copy(false). faceagent
// patch (publish allocations): see publishToClient.
//
//go:noinline
func newOutbound(pk *packets.Packet) *packets.Packet {
	out := outboundPackets.Get().(*packets.Packet)
	*out = pk.Copy(false)
	return out
}

func (s *Server) publishRetainedToClient(cl *Client, sub packets.Subscription, existed bool) {
	if IsSharedFilter(sub.Filter) {
		return // 4.8.2 Non-normative - Shared Subscriptions - No Retained Messages are sent to the Session when it first subscribes.
	}

	if sub.RetainHandling == 1 && existed || sub.RetainHandling == 2 { // [MQTT-3.3.1-10] [MQTT-3.3.1-11]
		return
	}

	sub.FwdRetainedFlag = true
	for _, pkv := range s.Topics.Messages(sub.Filter) { // [MQTT-3.8.4-4]
		err := s.publishToClient(cl, sub, &pkv)
		if err != nil {
			s.Log.Debug("failed to publish retained message", "error", err, "client", cl.ID, "listener", cl.Net.Listener, "packet", logPacket(&pkv)) // faceagent patch (no packets in logs)
			continue
		}
		s.hooks.OnRetainPublished(cl, pkv)
	}
}

// buildAck builds a standardised ack message for Puback, Pubrec, Pubrel, Pubcomp packets.
func (s *Server) buildAck(packetID uint16, pkt, qos byte, properties packets.Properties, reason packets.Code) packets.Packet {
	if s.Options.Capabilities.Compatibilities.NoInheritedPropertiesOnAck {
		properties = packets.Properties{}
	}
	if reason.Code >= packets.ErrUnspecifiedError.Code {
		properties.ReasonString = reason.Reason
	}

	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type: pkt,
			Qos:  qos,
		},
		PacketID:   packetID,    // [MQTT-2.2.1-5]
		ReasonCode: reason.Code, // [MQTT-3.4.2-1]
		Properties: properties,
		Created:    time.Now().Unix(),
		Expiry:     time.Now().Unix() + s.Options.Capabilities.MaximumMessageExpiryInterval,
	}

	return pk
}

// processPuback processes a Puback packet, denoting completion of a QOS 1 packet sent from the server.
//
// faceagent patch (inflight allocations): no Get first, which copied the message in
// flight only to see that there was one; Delete reports it (an unknown id: omitted, but
// would be packets.ErrPacketIdentifierNotFound).
func (s *Server) processPuback(cl *Client, pk *packets.Packet) error {
	if ok, _, counted := cl.State.Inflight.remove(pk.PacketID); ok { // [MQTT-4.3.2-5]
		cl.State.Inflight.IncreaseSendQuota()
		if counted { // faceagent patch (counter drift): see Inflight.remove
			atomic.AddInt64(&s.Info.Inflight, -1)
		}
		s.hooks.OnQosComplete(cl, *pk)
	}

	return nil
}

// processPubrec processes a Pubrec packet, denoting receipt of a QOS 2 packet sent from the server.
func (s *Server) processPubrec(cl *Client, pk *packets.Packet) error {
	if !cl.State.Inflight.Has(pk.PacketID) { // [MQTT-4.3.3-7] [MQTT-4.3.3-13] faceagent patch (inflight allocations): no copy
		return cl.WritePacket(s.buildAck(pk.PacketID, packets.Pubrel, 1, pk.Properties, packets.ErrPacketIdentifierNotFound))
	}

	if pk.ReasonCode >= packets.ErrUnspecifiedError.Code || !pk.ReasonCodeValid() { // [MQTT-4.3.3-4]
		if ok, _, counted := cl.State.Inflight.remove(pk.PacketID); ok {
			// faceagent patch (counter drift): the flow ends, and its unit of send quota
			// comes back (MQTT 5, 4.9); upstream kept it, and a client that refused
			// Receive Maximum QoS 2 messages was sent nothing more.
			cl.State.Inflight.IncreaseSendQuota()
			if counted {
				atomic.AddInt64(&s.Info.Inflight, -1)
			}
		}
		cl.ops.hooks.OnQosDropped(cl, *pk)
		return nil // as per MQTT5 Section 4.13.2 paragraph 2
	}

	// faceagent patch (packet-id spaces): the PUBREL stage of a message the server sends
	// takes no receive quota (upstream took one here and gave it back at PUBCOMP): that
	// quota counts the client's own publishes; the message keeps its send quota until PUBCOMP.
	ack := s.buildAck(pk.PacketID, packets.Pubrel, 1, pk.Properties, packets.CodeSuccess) // [MQTT-4.3.3-4] ![MQTT-4.3.3-6]
	// faceagent patch (counter drift): in place of the message, not back in the set when it
	// left since the check above (expired): counted nowhere, its PUBCOMP would count it out
	// of Info.Inflight a second time.
	if !cl.State.Inflight.replace(&ack) { // [MQTT-4.3.3-5]
		return cl.WritePacket(s.buildAck(pk.PacketID, packets.Pubrel, 1, pk.Properties, packets.ErrPacketIdentifierNotFound))
	}
	return cl.WritePacket(ack)
}

// processPubrel processes a Pubrel packet, denoting completion of a QOS 2 packet sent from the client.
//
// faceagent patch (packet-id spaces): the flow is in cl's Inbound, not its in-flight set;
// its end gives back the receive quota it took and no send quota (upstream gave back both),
// and the hooks' OnQosComplete and OnQosDropped no longer see it (their storage hooks took
// the PUBREL for the message in flight to the client under the same id). A PUBCOMP that
// cannot be written leaves the flow: the client sends PUBREL again on a resumed session.
func (s *Server) processPubrel(cl *Client, pk *packets.Packet) error {
	if !cl.State.Inbound.Has(pk.PacketID) { // [MQTT-4.3.3-7] [MQTT-4.3.3-13]
		return cl.WritePacket(s.buildAck(pk.PacketID, packets.Pubcomp, 0, pk.Properties, packets.ErrPacketIdentifierNotFound))
	}

	if pk.ReasonCode >= packets.ErrUnspecifiedError.Code || !pk.ReasonCodeValid() { // [MQTT-4.3.3-9]
		if cl.State.Inbound.end(pk.PacketID) {
			cl.State.Inflight.IncreaseReceiveQuota()
		}
		return nil
	}

	ack := s.buildAck(pk.PacketID, packets.Pubcomp, 0, pk.Properties, packets.CodeSuccess) // [MQTT-4.3.3-11]
	if err := cl.WritePacket(ack); err != nil {
		return err
	}
	if cl.State.Inbound.end(pk.PacketID) { // [MQTT-4.3.3-12]
		cl.State.Inflight.IncreaseReceiveQuota() // +1 RECV QUOTA
	}
	return nil
}

// processPubcomp processes a Pubcomp packet, denoting completion of a QOS 2 packet sent from the server.
//
// faceagent patch (packet-id spaces): it gives back the send quota the message took, and
// only for a message in flight under the id; upstream also gave back a receive quota (for
// the one its PUBREC stage took) and did both for any id.
func (s *Server) processPubcomp(cl *Client, pk *packets.Packet) error {
	// regardless of whether the pubcomp is a success or failure, we end the qos flow, delete inflight, and restore the quota.
	if ok, _, counted := cl.State.Inflight.remove(pk.PacketID); ok {
		cl.State.Inflight.IncreaseSendQuota() // +1 SENT QUOTA
		// faceagent patch (counter drift): see Inflight.remove
		if counted {
			atomic.AddInt64(&s.Info.Inflight, -1)
		}
		s.hooks.OnQosComplete(cl, *pk)
	}

	return nil
}

// processSubscribe processes a Subscribe packet.
func (s *Server) processSubscribe(cl *Client, pk *packets.Packet) error {
	*pk = s.hooks.OnSubscribe(cl, *pk)
	code := packets.CodeSuccess
	if cl.State.Inbound.Has(pk.PacketID) { // faceagent patch (packet-id spaces): the client's ids, not those of messages sent to it
		code = packets.ErrPacketIdentifierInUse
	}

	filterExisted := make([]bool, len(pk.Filters))
	reasonCodes := make([]byte, len(pk.Filters))
	// faceagent patch (session takeover): not a session another connection took over
	// (sessionLocks); its subscriptions went with it.
	unlock := s.sessions.lock(cl.ID)
	if cl.IsTakenOver() && code == packets.CodeSuccess {
		code = packets.ErrUnspecifiedError
	}
	for i, sub := range pk.Filters {
		if code != packets.CodeSuccess {
			reasonCodes[i] = code.Code // NB 3.9.3 Non-normative 0x91
			continue
		} else if !IsValidFilter(sub.Filter, false) {
			reasonCodes[i] = packets.ErrTopicFilterInvalid.Code
		} else if sub.NoLocal && IsSharedFilter(sub.Filter) {
			reasonCodes[i] = packets.ErrProtocolViolationInvalidSharedNoLocal.Code // [MQTT-3.8.3-4]
		} else if !s.hooks.OnACLCheck(cl, sub.Filter, false) {
			reasonCodes[i] = packets.ErrNotAuthorized.Code
			if s.Options.Capabilities.Compatibilities.ObscureNotAuthorized {
				reasonCodes[i] = packets.ErrUnspecifiedError.Code
			}
		} else if q := s.subscriptionRefused(cl, sub.Filter); q != 0 { // faceagent patch (byte bounds)
			s.quotaExceeded(cl, q, true, pk)
			reasonCodes[i] = packets.ErrQuotaExceeded.Code
		} else {
			isNew := s.Topics.Subscribe(cl.ID, sub) // [MQTT-3.8.4-3]
			if isNew {
				atomic.AddInt64(&s.Info.Subscriptions, 1)
			}
			cl.State.Subscriptions.Add(sub.Filter, sub) // [MQTT-3.2.2-10]

			if sub.Qos > s.Options.Capabilities.MaximumQos {
				sub.Qos = s.Options.Capabilities.MaximumQos // [MQTT-3.2.2-9]
			}

			filterExisted[i] = !isNew
			reasonCodes[i] = sub.Qos // [MQTT-3.9.3-1] [MQTT-3.8.4-7]
		}

		if reasonCodes[i] > packets.CodeGrantedQos2.Code && cl.Properties.ProtocolVersion < 5 { // MQTT3
			reasonCodes[i] = packets.ErrUnspecifiedError.Code
		}
	}
	unlock()

	ack := packets.Packet{ // [MQTT-3.8.4-1] [MQTT-3.8.4-5]
		FixedHeader: packets.FixedHeader{
			Type: packets.Suback,
		},
		PacketID:    pk.PacketID, // [MQTT-2.2.1-6] [MQTT-3.8.4-2]
		ReasonCodes: reasonCodes, // [MQTT-3.8.4-6]
		Properties: packets.Properties{
			User: pk.Properties.User,
		},
	}

	if code.Code >= packets.ErrUnspecifiedError.Code {
		ack.Properties.ReasonString = code.Reason
	}

	s.hooks.OnSubscribed(cl, *pk, reasonCodes)
	err := cl.WritePacket(ack)
	if err != nil {
		return err
	}

	for i, sub := range pk.Filters { // [MQTT-3.3.1-9]
		if reasonCodes[i] >= packets.ErrUnspecifiedError.Code {
			continue
		}

		s.publishRetainedToClient(cl, sub, filterExisted[i])
	}

	return nil
}

// processUnsubscribe processes an unsubscribe packet.
func (s *Server) processUnsubscribe(cl *Client, pk *packets.Packet) error {
	code := packets.CodeSuccess
	if cl.State.Inbound.Has(pk.PacketID) { // faceagent patch (packet-id spaces): the client's ids, not those of messages sent to it
		code = packets.ErrPacketIdentifierInUse
	}

	*pk = s.hooks.OnUnsubscribe(cl, *pk)
	reasonCodes := make([]byte, len(pk.Filters))
	// faceagent patch (session takeover): not a session another connection took over: the
	// index holds the new connection's subscriptions under the same client id.
	unlock := s.sessions.lock(cl.ID)
	if cl.IsTakenOver() && code == packets.CodeSuccess {
		code = packets.ErrUnspecifiedError
	}
	for i, sub := range pk.Filters { // [MQTT-3.10.4-6] [MQTT-3.11.3-1]
		if code != packets.CodeSuccess {
			reasonCodes[i] = code.Code // NB 3.11.3 Non-normative 0x91
			continue
		}

		if q := s.Topics.Unsubscribe(sub.Filter, cl.ID); q {
			atomic.AddInt64(&s.Info.Subscriptions, -1)
			reasonCodes[i] = packets.CodeSuccess.Code
		} else {
			reasonCodes[i] = packets.CodeNoSubscriptionExisted.Code
		}

		cl.State.Subscriptions.Delete(sub.Filter) // [MQTT-3.10.4-2] [MQTT-3.10.4-2] ~[MQTT-3.10.4-3]
	}
	unlock()

	ack := packets.Packet{ // [MQTT-3.10.4-4]
		FixedHeader: packets.FixedHeader{
			Type: packets.Unsuback,
		},
		PacketID:    pk.PacketID, // [MQTT-2.2.1-6]  [MQTT-3.10.4-5]
		ReasonCodes: reasonCodes, // [MQTT-3.11.3-2]
		Properties: packets.Properties{
			User: pk.Properties.User,
		},
	}

	if code.Code >= packets.ErrUnspecifiedError.Code {
		ack.Properties.ReasonString = code.Reason
	}

	s.hooks.OnUnsubscribed(cl, *pk)
	return cl.WritePacket(ack)
}

// UnsubscribeClient unsubscribes a client from all of their subscriptions.
func (s *Server) UnsubscribeClient(cl *Client) {
	i := 0
	filterMap := cl.State.Subscriptions.GetAll()
	filters := make([]packets.Subscription, len(filterMap))
	for k := range filterMap {
		cl.State.Subscriptions.Delete(k)
	}

	if cl.IsTakenOver() {
		return
	}

	for k, v := range filterMap {
		if s.Topics.Unsubscribe(k, cl.ID) {
			atomic.AddInt64(&s.Info.Subscriptions, -1)
		}
		filters[i] = v
		i++
	}
	s.hooks.OnUnsubscribed(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe}, Filters: filters})
}

// processAuth processes an Auth packet.
//
//go:noinline
func (s *Server) processAuth(cl *Client, pk *packets.Packet) error {
	_, err := s.hooks.OnAuthPacket(cl, *pk)
	if err != nil {
		return err
	}

	return nil
}

// processDisconnect processes a Disconnect packet.
func (s *Server) processDisconnect(cl *Client, pk *packets.Packet) error {
	if pk.Properties.SessionExpiryIntervalFlag {
		if pk.Properties.SessionExpiryInterval > 0 && cl.Properties.Props.SessionExpiryInterval == 0 {
			return packets.ErrProtocolViolationZeroNonZeroExpiry
		}

		cl.Properties.Props.SessionExpiryInterval = pk.Properties.SessionExpiryInterval
		cl.Properties.Props.SessionExpiryIntervalFlag = true
	}

	if pk.ReasonCode == packets.CodeDisconnectWillMessage.Code { // [MQTT-3.1.2.5] Non-normative comment
		return packets.CodeDisconnectWillMessage
	}

	s.loop.willDelayed.Delete(cl.ID) // [MQTT-3.1.3-9] [MQTT-3.1.2-8]
	cl.Stop(packets.CodeDisconnect)  // [MQTT-3.14.4-2]

	return nil
}

// DisconnectClient sends a Disconnect packet to a client and then closes the client connection.
func (s *Server) DisconnectClient(cl *Client, code packets.Code) error {
	out := packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type: packets.Disconnect,
		},
		ReasonCode: code.Code,
		Properties: packets.Properties{},
	}

	if code.Code >= packets.ErrUnspecifiedError.Code {
		out.Properties.ReasonString = code.Reason //  // [MQTT-3.14.2-1]
	}

	// We already have a code we are using to disconnect the client, so we are not
	// interested if the write packet fails due to a closed connection (as we are closing it).
	err := cl.WritePacket(out)
	if !s.Options.Capabilities.Compatibilities.PassiveClientDisconnect {
		if err == nil {
			cl.lingerOnStop() // faceagent patch (DISCONNECT delivered): see DisconnectLinger
		}
		cl.Stop(code)
		if code.Code >= packets.ErrUnspecifiedError.Code {
			return code
		}
	}

	return err
}

// publishSysTopics publishes the current values to the server $SYS topics.
// Due to the int to string conversions this method is not as cheap as
// some of the others so the publishing interval should be set appropriately.
func (s *Server) publishSysTopics() {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type:   packets.Publish,
			Retain: true,
		},
		Created: time.Now().Unix(),
	}

	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	atomic.StoreInt64(&s.Info.MemoryAlloc, int64(m.HeapInuse))
	atomic.StoreInt64(&s.Info.Threads, int64(runtime.NumGoroutine()))
	atomic.StoreInt64(&s.Info.Time, time.Now().Unix())
	atomic.StoreInt64(&s.Info.Uptime, time.Now().Unix()-atomic.LoadInt64(&s.Info.Started))
	atomic.StoreInt64(&s.Info.ClientsTotal, int64(s.Clients.Len()))
	atomic.StoreInt64(&s.Info.ClientsDisconnected, atomic.LoadInt64(&s.Info.ClientsTotal)-atomic.LoadInt64(&s.Info.ClientsConnected))

	info := s.Info.Clone()
	topics := map[string]string{
		SysPrefix + "/broker/version":              s.Info.Version,
		SysPrefix + "/broker/time":                 Int64toa(info.Time),
		SysPrefix + "/broker/uptime":               Int64toa(info.Uptime),
		SysPrefix + "/broker/started":              Int64toa(info.Started),
		SysPrefix + "/broker/load/bytes/received":  Int64toa(info.BytesReceived),
		SysPrefix + "/broker/load/bytes/sent":      Int64toa(info.BytesSent),
		SysPrefix + "/broker/clients/connected":    Int64toa(info.ClientsConnected),
		SysPrefix + "/broker/clients/disconnected": Int64toa(info.ClientsDisconnected),
		SysPrefix + "/broker/clients/maximum":      Int64toa(info.ClientsMaximum),
		SysPrefix + "/broker/clients/total":        Int64toa(info.ClientsTotal),
		SysPrefix + "/broker/packets/received":     Int64toa(info.PacketsReceived),
		SysPrefix + "/broker/packets/sent":         Int64toa(info.PacketsSent),
		SysPrefix + "/broker/messages/received":    Int64toa(info.MessagesReceived),
		SysPrefix + "/broker/messages/sent":        Int64toa(info.MessagesSent),
		SysPrefix + "/broker/messages/dropped":     Int64toa(info.MessagesDropped),
		SysPrefix + "/broker/messages/inflight":    Int64toa(info.Inflight),
		SysPrefix + "/broker/retained":             Int64toa(info.Retained),
		SysPrefix + "/broker/subscriptions":        Int64toa(info.Subscriptions),
		SysPrefix + "/broker/system/memory":        Int64toa(info.MemoryAlloc),
		SysPrefix + "/broker/system/threads":       Int64toa(info.Threads),
	}

	for topic, payload := range topics {
		pk.TopicName = topic
		pk.Payload = []byte(payload)
		s.Topics.RetainMessage(pk.Copy(false))
		s.publishToSubscribers(&pk)
	}

	s.hooks.OnSysInfoTick(info)
}

// Close attempts to gracefully shut down the server, all listeners, clients, and stores.
func (s *Server) Close() error {
	close(s.done)
	s.Log.Info("gracefully stopping server")
	s.Listeners.CloseAll(s.closeListenerClients)
	s.hooks.OnStopped()
	s.hooks.Stop()

	s.Log.Info("mochi mqtt server stopped")
	return nil
}

// closeListenerClients closes all clients on the specified listener.
func (s *Server) closeListenerClients(listener string) {
	clients := s.Clients.GetByListener(listener)
	for _, cl := range clients {
		_ = s.DisconnectClient(cl, packets.ErrServerShuttingDown)
	}
}

// sendLWT issues an LWT message to a topic when a client disconnects.
func (s *Server) sendLWT(cl *Client) {
	if atomic.LoadUint32(&cl.Properties.Will.Flag) == 0 {
		return
	}

	modifiedLWT := s.hooks.OnWill(cl, cl.Properties.Will)

	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{
			Type:   packets.Publish,
			Retain: modifiedLWT.Retain, // [MQTT-3.1.2-14] [MQTT-3.1.2-15]
			Qos:    modifiedLWT.Qos,
		},
		TopicName: modifiedLWT.TopicName,
		Payload:   modifiedLWT.Payload,
		Properties: packets.Properties{
			User: modifiedLWT.User,
		},
		Origin:  cl.ID,
		Created: time.Now().Unix(),
	}

	if cl.Properties.Will.WillDelayInterval > 0 {
		pk.Connect.WillProperties.WillDelayInterval = cl.Properties.Will.WillDelayInterval
		pk.Expiry = time.Now().Unix() + int64(pk.Connect.WillProperties.WillDelayInterval)
		s.loop.willDelayed.Add(cl.ID, pk)
		return
	}

	if pk.FixedHeader.Retain {
		s.retainMessage(cl, &pk)
	}

	s.publishToSubscribers(&pk)                     // [MQTT-3.1.2-8]
	atomic.StoreUint32(&cl.Properties.Will.Flag, 0) // [MQTT-3.1.2-10]
	s.hooks.OnWillSent(cl, pk)
}

// readStore reads in any data from the persistent datastore (if applicable).
func (s *Server) readStore() error {
	if s.hooks.Provides(StoredClients) {
		clients, err := s.hooks.StoredClients()
		if err != nil {
			return fmt.Errorf("failed to load clients; %w", err)
		}
		s.loadClients(clients)
		s.Log.Debug("loaded clients from store", "len", len(clients))
	}

	if s.hooks.Provides(StoredSubscriptions) {
		subs, err := s.hooks.StoredSubscriptions()
		if err != nil {
			return fmt.Errorf("load subscriptions; %w", err)
		}
		s.loadSubscriptions(subs)
		s.Log.Debug("loaded subscriptions from store", "len", len(subs))
	}

	if s.hooks.Provides(StoredInflightMessages) {
		inflight, err := s.hooks.StoredInflightMessages()
		if err != nil {
			return fmt.Errorf("load inflight; %w", err)
		}
		s.loadInflight(inflight)
		s.Log.Debug("loaded inflights from store", "len", len(inflight))
	}

	if s.hooks.Provides(StoredRetainedMessages) {
		retained, err := s.hooks.StoredRetainedMessages()
		if err != nil {
			return fmt.Errorf("load retained; %w", err)
		}
		s.loadRetained(retained)
		s.Log.Debug("loaded retained messages from store", "len", len(retained))
	}

	if s.hooks.Provides(StoredSysInfo) {
		sysInfo, err := s.hooks.StoredSysInfo()
		if err != nil {
			return fmt.Errorf("load server info; %w", err)
		}
		s.loadServerInfo(sysInfo.Info)
		s.Log.Debug("loaded $SYS info from store")
	}

	return nil
}

// loadServerInfo restores server info from the datastore.
func (s *Server) loadServerInfo(v system.Info) {
	if s.Options.Capabilities.Compatibilities.RestoreSysInfoOnRestart {
		atomic.StoreInt64(&s.Info.BytesReceived, v.BytesReceived)
		atomic.StoreInt64(&s.Info.BytesSent, v.BytesSent)
		atomic.StoreInt64(&s.Info.ClientsMaximum, v.ClientsMaximum)
		atomic.StoreInt64(&s.Info.ClientsTotal, v.ClientsTotal)
		atomic.StoreInt64(&s.Info.ClientsDisconnected, v.ClientsDisconnected)
		atomic.StoreInt64(&s.Info.MessagesReceived, v.MessagesReceived)
		atomic.StoreInt64(&s.Info.MessagesSent, v.MessagesSent)
		atomic.StoreInt64(&s.Info.MessagesDropped, v.MessagesDropped)
		atomic.StoreInt64(&s.Info.PacketsReceived, v.PacketsReceived)
		atomic.StoreInt64(&s.Info.PacketsSent, v.PacketsSent)
		atomic.StoreInt64(&s.Info.InflightDropped, v.InflightDropped)
	}
	atomic.StoreInt64(&s.Info.Retained, v.Retained)
	atomic.StoreInt64(&s.Info.Inflight, v.Inflight)
	atomic.StoreInt64(&s.Info.Subscriptions, v.Subscriptions)
}

// loadSubscriptions restores subscriptions from the datastore.
//
// faceagent patch (counter drift): each one counts in Info.Subscriptions, and each message in
// Info.Inflight (loadInflight), as they count when a client subscribes or is sent a
// message; the session's expiry counts them out. Upstream left both to a stored $SYS
// snapshot (StoredSysInfo, which loadServerInfo still applies after these), and with a
// storage hook without one both counters went below zero as restored sessions ended. A
// subscription of a client id not restored (its session ended at the restart) is not put in
// the topics index: upstream put it there, where nothing could ever remove it (no session
// holds it) and no message it matched found a client.
func (s *Server) loadSubscriptions(v []storage.Subscription) {
	for _, sub := range v {
		cl, ok := s.Clients.Get(sub.Client)
		if !ok {
			continue
		}
		sb := packets.Subscription{
			Filter:            sub.Filter,
			RetainHandling:    sub.RetainHandling,
			Qos:               sub.Qos,
			RetainAsPublished: sub.RetainAsPublished,
			NoLocal:           sub.NoLocal,
			Identifier:        sub.Identifier,
		}
		if s.Topics.Subscribe(sub.Client, sb) {
			atomic.AddInt64(&s.Info.Subscriptions, 1)
			cl.State.Subscriptions.Add(sub.Filter, sb)
		}
	}
}

// loadClients restores clients from the datastore.
func (s *Server) loadClients(v []storage.Client) {
	for _, c := range v {
		cl := s.NewClient(nil, c.Listener, c.ID, false)
		cl.Properties.Username = c.Username
		cl.Properties.Clean = c.Clean
		cl.Properties.ProtocolVersion = c.ProtocolVersion
		cl.Properties.Props = packets.Properties{
			SessionExpiryInterval:     c.Properties.SessionExpiryInterval,
			SessionExpiryIntervalFlag: c.Properties.SessionExpiryIntervalFlag,
			AuthenticationMethod:      c.Properties.AuthenticationMethod,
			AuthenticationData:        c.Properties.AuthenticationData,
			RequestProblemInfoFlag:    c.Properties.RequestProblemInfoFlag,
			RequestProblemInfo:        c.Properties.RequestProblemInfo,
			RequestResponseInfo:       c.Properties.RequestResponseInfo,
			ReceiveMaximum:            c.Properties.ReceiveMaximum,
			TopicAliasMaximum:         c.Properties.TopicAliasMaximum,
			User:                      c.Properties.User,
			MaximumPacketSize:         c.Properties.MaximumPacketSize,
		}
		cl.Properties.Will = Will(c.Will)
		cl.State.willBytes.Store(WillBytes(&cl.Properties.Will)) // faceagent patch (byte bounds)
		s.bounds.queued.Add(cl.State.willBytes.Load())

		// cancel the context, update cl.State such as disconnected time and stopCause.
		cl.Stop(packets.ErrServerShuttingDown)

		expire := (cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.SessionExpiryInterval == 0) || (cl.Properties.ProtocolVersion < 5 && cl.Properties.Clean)
		s.hooks.OnDisconnect(cl, packets.ErrServerShuttingDown, expire)
		if expire {
			cl.ClearInflights()
			s.UnsubscribeClient(cl)
			s.releaseSession(cl) // faceagent patch (byte bounds)
		} else {
			s.Clients.Add(cl)
		}
	}
}

// loadInflight restores inflight messages from the datastore.
func (s *Server) loadInflight(v []storage.Message) {
	for _, msg := range v {
		if client, ok := s.Clients.Get(msg.Client); ok && client.State.Inflight.Set(msg.ToPacket()) {
			atomic.AddInt64(&s.Info.Inflight, 1) // faceagent patch (counter drift): see loadSubscriptions
		}
	}
}

// loadRetained restores retained messages from the datastore.
func (s *Server) loadRetained(v []storage.Message) {
	for _, msg := range v {
		s.Topics.RetainMessage(msg.ToPacket())
	}
}

// clearExpiredClients deletes all clients which have been disconnected for longer
// than their given expiry intervals.
func (s *Server) clearExpiredClients(dt int64) {
	for id, client := range s.Clients.GetAll() {
		disconnected := client.StopTime()
		if disconnected == 0 {
			continue
		}

		expire := s.Options.Capabilities.MaximumSessionExpiryInterval
		if client.Properties.ProtocolVersion == 5 && client.Properties.Props.SessionExpiryIntervalFlag {
			expire = client.Properties.Props.SessionExpiryInterval
		}

		if disconnected+int64(expire) < dt {
			s.expireClient(id, client)
		}
	}
}

// expireClient expires the session client held, unless a connection has taken it over
// since. faceagent patch (byte bounds): not a client that took the id over since, and the
// session's subscriptions, messages and will go with it (expireSession). faceagent patch
// (session takeover): under the client id's lock, so not while a connection resumes it
// (sessionLocks).
func (s *Server) expireClient(id string, client *Client) {
	unlock := s.sessions.lock(id)
	defer unlock()
	if cur, ok := s.Clients.Get(id); !ok || cur != client || client.IsTakenOver() {
		return
	}
	s.hooks.OnClientExpired(client)
	s.expireSession(client) // [MQTT-4.1.0-2]
}

// clearExpiredRetainedMessage deletes retained messages from topics if they have expired.
func (s *Server) clearExpiredRetainedMessages(now int64) {
	for filter, pk := range s.Topics.Retained.GetAll() {
		expired := pk.ProtocolVersion == 5 && pk.Expiry > 0 && pk.Expiry < now // [MQTT-3.3.2-5]

		// If the maximum message expiry interval is set (greater than 0), and the message
		// retention period exceeds the maximum expiry, the message will be forcibly removed.
		enforced := s.Options.Capabilities.MaximumMessageExpiryInterval > 0 &&
			now-pk.Created > s.Options.Capabilities.MaximumMessageExpiryInterval

		if expired || enforced {
			s.Topics.expireRetained(filter) // faceagent patch (byte bounds): counted out, particles trimmed
			s.hooks.OnRetainedExpired(filter)
		}
	}
}

// clearExpiredInflights deletes any inflight messages which have expired.
func (s *Server) clearExpiredInflights(now int64) {
	for _, client := range s.Clients.GetAll() {
		if deleted := client.ClearExpiredInflights(now, s.Options.Capabilities.MaximumMessageExpiryInterval); len(deleted) > 0 {
			for _, id := range deleted {
				s.hooks.OnQosDropped(client, packets.Packet{PacketID: id})
			}
		}
	}
}

// sendDelayedLWT sends any LWT messages which have reached their issue time.
func (s *Server) sendDelayedLWT(dt int64) {
	for id, pk := range s.loop.willDelayed.GetAll() {
		if dt > pk.Expiry {
			s.publishToSubscribers(&pk) // [MQTT-3.1.2-8]
			if cl, ok := s.Clients.Get(id); ok {
				if pk.FixedHeader.Retain {
					s.retainMessage(cl, &pk)
				}
				cl.Properties.Will = Will{} // [MQTT-3.1.2-10]
				s.hooks.OnWillSent(cl, pk)
			}
			s.loop.willDelayed.Delete(id)
		}
	}
}

// Int64toa converts an int64 to a string.
func Int64toa(v int64) string {
	return strconv.FormatInt(v, 10)
}

// minimum differs from built-in min, it returns minimum of the non-zero value a and b.
// If both a and b are zero value, it reutrns 0.
func minimum(a, b int64) (m int64) {
	if a != 0 {
		m = a
		if b != 0 && b < a {
			m = b
		}
		return
	}

	if b != 0 {
		m = b
	}
	return
}
