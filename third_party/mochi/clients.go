// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co
// SPDX-FileContributor: mochi-co

package mqtt

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/xid"

	"github.com/mochi-mqtt/server/v2/mempool"
	"github.com/mochi-mqtt/server/v2/packets"
)

// disconnectWriteGrace is how long a DISCONNECT may take to be written, waiting for a write
// in progress included, before the client is stopped without it. faceagent patch (wedged
// peer): a peer that reads gets it within microseconds; one that stopped reading never.
const disconnectWriteGrace = 500 * time.Millisecond

const (
	defaultKeepalive             uint16 = 10 // the default connection keepalive value in seconds.
	defaultClientProtocolVersion byte   = 4  // the default mqtt protocol version of connecting clients (if somehow unspecified).
	minimumKeepalive             uint16 = 5  // the minimum recommended keepalive - values under with display a warning.
)

var (
	ErrMinimumKeepalive = errors.New("client keepalive is below minimum recommended value and may exhibit connection instability")
)

// ReadFn is the function signature for the function used for reading and processing new packets.
type ReadFn func(*Client, *packets.Packet) error // faceagent patch (stack): by pointer

// Clients contains a map of the clients known by the broker.
type Clients struct {
	internal map[string]*Client // clients known by the broker, keyed on client id.
	sync.RWMutex
	// faceagent patch (byte bounds): the network (not inline) clients in internal, for
	// Capabilities.MaximumClients (clientsFull).
	network atomic.Int64
}

// NewClients returns an instance of Clients.
func NewClients() *Clients {
	return &Clients{
		internal: make(map[string]*Client),
	}
}

// Add adds a new client to the clients map, keyed on client id.
func (cl *Clients) Add(val *Client) {
	cl.Lock()
	defer cl.Unlock()
	cl.countOut(val.ID) // faceagent patch (byte bounds)
	cl.internal[val.ID] = val
	if !val.Net.Inline {
		cl.network.Add(1)
	}
}

// countOut takes the client under id, if a network one, out of the count (under the lock).
// faceagent patch (byte bounds).
func (cl *Clients) countOut(id string) {
	if old, ok := cl.internal[id]; ok && !old.Net.Inline {
		cl.network.Add(-1)
	}
}

// deleteIf removes the client under id if it is val. faceagent patch (byte bounds): an
// expiring session must not remove a client that has since connected under its id.
func (cl *Clients) deleteIf(id string, val *Client) {
	cl.Lock()
	defer cl.Unlock()
	if cl.internal[id] == val {
		cl.countOut(id)
		delete(cl.internal, id)
	}
}

// GetAll returns all the clients.
func (cl *Clients) GetAll() map[string]*Client {
	cl.RLock()
	defer cl.RUnlock()
	m := map[string]*Client{}
	for k, v := range cl.internal {
		m[k] = v
	}
	return m
}

// Get returns the value of a client if it exists.
func (cl *Clients) Get(id string) (*Client, bool) {
	cl.RLock()
	defer cl.RUnlock()
	val, ok := cl.internal[id]
	return val, ok
}

// Len returns the length of the clients map.
func (cl *Clients) Len() int {
	cl.RLock()
	defer cl.RUnlock()
	val := len(cl.internal)
	return val
}

// Delete removes a client from the internal map.
func (cl *Clients) Delete(id string) {
	cl.Lock()
	defer cl.Unlock()
	cl.countOut(id) // faceagent patch (byte bounds)
	delete(cl.internal, id)
}

// GetByListener returns clients matching a listener id.
//
// faceagent patch (deadlock): sized from the map under the read lock already held. Len
// would read-lock again, and an Add or Delete waiting between the two would block the
// second for good (sync.RWMutex), and Server.Close with it
// (https://github.com/mochi-mqtt/server/issues/488).
func (cl *Clients) GetByListener(id string) []*Client {
	cl.RLock()
	defer cl.RUnlock()
	clients := make([]*Client, 0, len(cl.internal))
	for _, client := range cl.internal {
		if client.Net.Listener == id && !client.Closed() {
			clients = append(clients, client)
		}
	}
	return clients
}

// Client contains information about a client known by the broker.
type Client struct {
	Properties   ClientProperties // client properties
	State        ClientState      // the operational state of the client.
	Net          ClientConnection // network connection state of the client
	ID           string           // the client id.
	ops          *ops             // ops provides a reference to server ops.
	sync.RWMutex                  // mutex

	// inbound is the packet Read hands to its handler, reused from one read to the next.
	// faceagent patch (stack): the handlers take packets by pointer; a packet of Read's
	// own would move to the heap on every read (the handler is a function value).
	inbound packets.Packet
}

// ClientConnection contains the connection transport and metadata for the client.
type ClientConnection struct {
	Conn     net.Conn      // the net.Conn used to establish the connection
	bconn    *bufio.Reader // a buffered net.Conn for reading packets
	outbuf   *bytes.Buffer // a buffer for writing packets
	Remote   string        // the remote address of the client
	Listener string        // listener id of the client
	Inline   bool          // if true, the client is the built-in 'inline' embedded client
}

// ClientProperties contains the properties which define the client behaviour.
type ClientProperties struct {
	Props           packets.Properties
	Will            Will
	Username        []byte
	ProtocolVersion byte
	Clean           bool
}

// Will contains the last will and testament details for a client connection.
type Will struct {
	Payload           []byte                 // -
	User              []packets.UserProperty // -
	TopicName         string                 // -
	Flag              uint32                 // 0,1
	WillDelayInterval uint32                 // -
	Qos               byte                   // -
	Retain            bool                   // -
}

// ClientState tracks the state of the client.
type ClientState struct {
	TopicAliases  TopicAliases   // a map of topic aliases
	stopCause     atomic.Value   // reason for stopping
	Inflight      *Inflight      // a map of in-flight qos messages (faceagent patch (packet-id spaces): those sent to the client)
	Inbound       *Inbound       // faceagent patch (packet-id spaces): the client's own unfinished QoS 1/2 publishes
	Subscriptions *Subscriptions // a map of the subscription filters a client maintains
	disconnected  atomic.Int64   // the time the client disconnected in unix time, for calculating expiry; faceagent patch (arm alignment): atomic.Int64, not int64

	outbound        chan *packets.Packet // queue for pending outbound packets
	endOnce         sync.Once            // only end once
	isTakenOver     atomic.Bool          // used to identify orphaned clients
	packetID        uint32               // the current highest packetID
	packetIDMu      sync.Mutex           // faceagent patch (wedged peer): serialises NextPacketID, apart from the client's lock
	open            context.Context      // indicate that the client is open for packet exchange
	cancelOpen      context.CancelFunc   // cancel function for open context
	outboundQty     int32                // number of messages currently in the outbound queue
	Keepalive       uint16               // the number of seconds the connection can wait
	ServerKeepalive bool                 // keepalive was set by the server

	// faceagent patch (terminal queues): a ResizeOutbound waiting for the writer goroutine.
	resize atomic.Pointer[outboundResize]
	// faceagent patch (byte bounds): the bytes of the messages in outbound
	// (MaximumClientWritesPendingBytes), and of the will the session holds (counted in
	// its session's bytes; bounds.go).
	pendingBytes atomic.Int64
	willBytes    atomic.Int64
	// inboundHeld is the share of the server's inbound budget the packet being read and
	// handled holds (reader goroutine only; takeInbound).
	inboundHeld int64
	// faceagent patch (DISCONNECT delivered): lingerWanted: Stop shuts the write side and
	// the reader drains before closing (DisconnectLinger).
	linger atomic.Uint32
	// faceagent patch (CONNACK first): closed once the CONNACK is written (connectClient);
	// the writer goroutine writes nothing before. nil: no wait (a client not connected by
	// attachClient).
	connacked chan struct{}
}

// newClient returns a new instance of Client. This is almost exclusively used by Server
// for creating new clients, but it lives here because it's not dependent.
func newClient(c net.Conn, o *ops) *Client {
	ctx, cancel := context.WithCancel(context.Background())
	cl := &Client{
		State: ClientState{
			Inflight:      NewInflights(),
			Inbound:       NewInbound(),
			Subscriptions: NewSubscriptions(),
			TopicAliases:  NewTopicAliases(o.options.Capabilities.TopicAliasMaximum),
			open:          ctx,
			cancelOpen:    cancel,
			Keepalive:     defaultKeepalive,
			outbound:      make(chan *packets.Packet, o.options.Capabilities.MaximumClientWritesPending),
		},
		Properties: ClientProperties{
			ProtocolVersion: defaultClientProtocolVersion, // default protocol version
		},
		ops: o,
	}
	// faceagent patch (byte bounds): the session's messages and subscriptions count in the
	// server's total.
	if o.bounds != nil {
		cl.State.Inflight.global = &o.bounds.queued
		cl.State.Subscriptions.costed, cl.State.Subscriptions.global = true, &o.bounds.queued
	}

	if c != nil {
		cl.Net = ClientConnection{
			Conn:   c,
			bconn:  bufio.NewReaderSize(c, o.options.ClientNetReadBufferSize),
			Remote: c.RemoteAddr().String(),
		}
	}

	return cl
}

// WriteLoop ranges over pending outbound messages and writes them to the client connection.
func (cl *Client) WriteLoop() {
	// faceagent patch (CONNACK first): a client is registered, and messages are routed to
	// its queue, before its CONNACK is written (connectClient); written as they came, a
	// PUBLISH went out ahead of the CONNACK [MQTT-3.2.0-1], and the client dropped the
	// connection.
	if g := cl.State.connacked; g != nil {
		select {
		case <-g:
		case <-cl.State.open.Done():
			cl.dropQueued()
			return
		}
	}
	for {
		select {
		case pk := <-cl.State.outbound:
			cl.writeOutbound(pk)
			atomic.AddInt32(&cl.State.outboundQty, -1)
			// faceagent patch (byte bounds): messages held in the session while the queue
			// was full go once it is empty.
			if len(cl.State.outbound) == 0 {
				cl.drainWaiting()
				cl.flushIdle()
			}
		case <-cl.State.open.Done():
			cl.dropQueued() // faceagent patch (counter drift)
			return
		}
	}
}

// writeOutbound writes one packet for WriteLoop. faceagent patch (stack): the copy of the
// packet that WritePacket takes by value lives in this frame, not in WriteLoop's, so a
// writer parked between packets holds a small stack that the GC can shrink to its minimum.
//
// faceagent patch (publish allocations): the queue owns its packets (publishToClient,
// QueueWrite and ResizeOutbound each queue a copy of their own, and nothing else keeps a
// pointer to it), so once written the packet goes back to outboundPackets, for
// publishToClient's next message.
//
// faceagent patch (byte bounds): the packet's bytes leave the count of pending writes; a
// writerKick only wakes the writer (WriteLoop then sends what waits).
//
//go:noinline
func (cl *Client) writeOutbound(pk *packets.Packet) {
	if pk == writerKick {
		return
	}
	if cl.applyOutboundResize(pk) { // faceagent patch (terminal queues)
		return
	}
	n := outboundBytes(pk)
	if err := cl.WritePacket(*pk); err != nil {
		// TODO : Figure out what to do with error
		cl.ops.log.Debug("failed publishing packet", "error", err, "client", cl.ID, "packet", logPacket(pk)) // faceagent patch (no packets in logs)
	}
	cl.unreservePending(n)
	releaseOutbound(pk)
}

// outboundPackets are packets for publishToClient to queue, zeroed. faceagent patch
// (publish allocations): each message routed to a client took a new ~800-byte packet.
var outboundPackets = sync.Pool{New: func() any { return new(packets.Packet) }}

// releaseOutbound zeroes pk (it no longer holds its payload) and gives it back to
// outboundPackets; pk must be referenced nowhere else. faceagent patch (publish
// allocations).
func releaseOutbound(pk *packets.Packet) {
	*pk = packets.Packet{}
	outboundPackets.Put(pk)
}

// writeBuffers hold the packets WritePacket encodes and the writes it gathers (outbuf).
// Larger ones (a big message) are left to the garbage collector rather than kept.
// faceagent patch (write allocations): each packet written took a new buffer, grown two or
// three times while encoding, and each gathered batch another.
var writeBuffers = mempool.NewBuffer(64 << 10)

// ParseConnect parses the connect parameters and properties for a client.
func (cl *Client) ParseConnect(lid string, pk packets.Packet) {
	cl.Net.Listener = lid

	cl.Properties.ProtocolVersion = pk.ProtocolVersion
	cl.Properties.Username = pk.Connect.Username
	cl.Properties.Clean = pk.Connect.Clean
	cl.Properties.Props = pk.Properties.Copy(false)

	if cl.Properties.Props.ReceiveMaximum > cl.ops.options.Capabilities.MaximumInflight { // 3.3.4 Non-normative
		cl.Properties.Props.ReceiveMaximum = cl.ops.options.Capabilities.MaximumInflight
	}

	if pk.Connect.Keepalive <= minimumKeepalive {
		cl.ops.log.Warn(
			ErrMinimumKeepalive.Error(),
			"client", cl.ID,
			"keepalive", pk.Connect.Keepalive,
			"recommended", minimumKeepalive,
		)
	}

	cl.State.Keepalive = pk.Connect.Keepalive                                              // [MQTT-3.2.2-22]
	cl.State.Inflight.ResetReceiveQuota(int32(cl.ops.options.Capabilities.ReceiveMaximum)) // server receive max per client
	cl.State.Inflight.ResetSendQuota(int32(cl.Properties.Props.ReceiveMaximum))            // client receive max
	cl.State.TopicAliases.Outbound = NewOutboundTopicAliases(cl.Properties.Props.TopicAliasMaximum)

	cl.ID = pk.Connect.ClientIdentifier
	if cl.ID == "" {
		cl.ID = xid.New().String() // [MQTT-3.1.3-6] [MQTT-3.1.3-7]
		cl.Properties.Props.AssignedClientID = cl.ID
	}

	if pk.Connect.WillFlag {
		cl.Properties.Will = Will{
			Qos:               pk.Connect.WillQos,
			Retain:            pk.Connect.WillRetain,
			Payload:           pk.Connect.WillPayload,
			TopicName:         pk.Connect.WillTopic,
			WillDelayInterval: pk.Connect.WillProperties.WillDelayInterval,
			User:              pk.Connect.WillProperties.User,
		}
		if pk.Properties.SessionExpiryIntervalFlag &&
			pk.Properties.SessionExpiryInterval < pk.Connect.WillProperties.WillDelayInterval {
			cl.Properties.Will.WillDelayInterval = pk.Properties.SessionExpiryInterval
		}
		if pk.Connect.WillFlag {
			cl.Properties.Will.Flag = 1 // atomic for checking
		}
	}
}

// refreshDeadline refreshes the read/write deadline for the net.Conn connection.
func (cl *Client) refreshDeadline(keepalive uint16) {
	var expiry time.Time // nil time can be used to disable deadline if keepalive = 0
	if keepalive > 0 {
		expiry = time.Now().Add(time.Duration(keepalive+(keepalive/2)) * time.Second) // [MQTT-3.1.2-22]
	}

	if cl.Net.Conn != nil {
		_ = cl.Net.Conn.SetDeadline(expiry) // [MQTT-3.1.2-22]
	}
}

// NextPacketID returns the next available (unused) packet id for the client.
// If no unused packet ids are available, an error is returned and the client
// should be disconnected.
//
// faceagent patch (wedged peer): the ids have a mutex of their own. They took the
// client's lock, which WritePacket holds while it writes to the socket: with a peer that
// stopped reading, every QoS 1/2 publish routed to it (publishToClient, on the
// publisher's goroutine) waited up to the write timeout. The mutex keeps what the lock
// gave: one caller at a time advances packetID, so concurrent callers get different ids,
// each not in flight when it was taken.
func (cl *Client) NextPacketID() (i uint32, err error) {
	cl.State.packetIDMu.Lock()
	defer cl.State.packetIDMu.Unlock()

	i = atomic.LoadUint32(&cl.State.packetID)
	started := i
	overflowed := false
	for {
		if overflowed && i == started {
			return 0, packets.ErrQuotaExceeded
		}

		if i >= cl.ops.options.Capabilities.maximumPacketID {
			overflowed = true
			i = 0
			continue
		}

		i++

		if !cl.State.Inflight.Has(uint16(i)) { // faceagent patch (inflight allocations): no copy
			atomic.StoreUint32(&cl.State.packetID, i)
			return i, nil
		}
	}
}

// ResendInflightMessages attempts to resend any pending inflight messages to connected clients.
//
// faceagent patch (wedged peer): only those the session brought and those waiting for send
// quota (Inflight.takeResend), not the ones routed to this connection since, which its writer
// sends.
//
// faceagent patch (send quota): of the QoS 1/2 PUBLISHes, only as many as the client's send
// quota allows; the rest wait for quota (takeResend).
func (cl *Client) ResendInflightMessages(force bool) error {
	if cl.State.Inflight.Len() == 0 {
		return nil
	}

	for _, tk := range cl.State.Inflight.takeResend() {
		// faceagent patch (send quota): not a message that waited for send quota (Expiry < 0),
		// which takeResend sends now for the first time.
		if tk.FixedHeader.Type == packets.Publish && tk.Expiry >= 0 {
			tk.FixedHeader.Dup = true // [MQTT-3.3.1-1] [MQTT-3.3.1-3]
		}

		cl.ops.hooks.OnQosPublish(cl, tk, tk.Created, 0)
		err := cl.WritePacket(tk)
		if err != nil {
			return err
		}

		if tk.FixedHeader.Type == packets.Puback || tk.FixedHeader.Type == packets.Pubcomp {
			if ok, _, counted := cl.State.Inflight.remove(tk.PacketID); ok {
				cl.ops.hooks.OnQosComplete(cl, tk)
				if counted { // faceagent patch (counter drift)
					atomic.AddInt64(&cl.ops.info.Inflight, -1)
				}
			}
		}
	}

	return nil
}

// ClearInflights deletes all inflight messages for the client, e.g. for a disconnected user with a clean session.
//
// faceagent patch (counter drift): it ends the client's in-flight set (Inflight.end): every
// caller ends the session (a clean session's connection closed, a session taken over), and
// a message a publisher still routes to it counts nowhere.
func (cl *Client) ClearInflights() {
	for _, tk := range cl.State.Inflight.end() {
		cl.ops.hooks.OnQosDropped(cl, tk)
		atomic.AddInt64(&cl.ops.info.Inflight, -1)
	}
}

// ClearExpiredInflights deletes any inflight messages which have expired.
func (cl *Client) ClearExpiredInflights(now, maximumExpiry int64) []uint16 {
	deleted := []uint16{}
	for _, tk := range cl.State.Inflight.GetAll(false) {
		expired := tk.ProtocolVersion == 5 && tk.Expiry > 0 && tk.Expiry < now // [MQTT-3.3.2-5]

		// If the maximum message expiry interval is set (greater than 0), and the message
		// retention period exceeds the maximum expiry, the message will be forcibly removed.
		enforced := maximumExpiry > 0 && now-tk.Created > maximumExpiry

		if expired || enforced {
			// faceagent patch (counter drift): a message sent gives back its unit of send
			// quota, which its PUBACK, finding nothing, no longer can; upstream kept it, and
			// each message expiring unacknowledged cost the connection a unit for good.
			if ok, sent, counted := cl.State.Inflight.remove(tk.PacketID); ok {
				if sent {
					cl.State.Inflight.IncreaseSendQuota()
				}
				cl.ops.hooks.OnQosDropped(cl, tk)
				if counted {
					atomic.AddInt64(&cl.ops.info.Inflight, -1)
				}
				deleted = append(deleted, tk.PacketID)
			}
		}
	}

	return deleted
}

// Read reads incoming packets from the connected client and transforms them into
// packets to be handled by the packetHandler.
func (cl *Client) Read(packetHandler ReadFn) error {
	var err error

	for {
		if cl.Closed() {
			return nil
		}

		cl.refreshDeadline(cl.State.Keepalive)
		// faceagent patch (DISCONNECT delivered): a lingering Stop (which wakes a blocked
		// read with a deadline, the connection still open) may have come since the check
		// above, its deadline replaced: end as a read of a closed connection would have.
		if cl.Closed() {
			return ErrConnectionClosed
		}
		fh := new(packets.FixedHeader)
		err = cl.ReadFixedHeader(fh)
		if err != nil {
			return err
		}

		err = cl.readAndHandle(fh, packetHandler)
		if err != nil {
			return err
		}
	}
}

// readAndHandle reads the packet fh starts and hands it to packetHandler. faceagent patch
// (stack): ReadPacket's result, a packet by value, lives in this frame, not in Read's, so a
// reader parked waiting for the next fixed header holds a small stack that the GC can
// shrink; handlers get it by pointer, in cl.inbound. No handler keeps that pointer.
//
// faceagent patch (byte bounds): a large packet's share of the server's inbound budget
// (readPacket) is given back once it is handled.
//
//go:noinline
func (cl *Client) readAndHandle(fh *packets.FixedHeader, packetHandler ReadFn) error {
	defer cl.releaseInbound()
	err := cl.readInbound(fh)
	if err != nil {
		return err
	}
	err = packetHandler(cl, &cl.inbound) // Process inbound packet.
	cl.inbound = packets.Packet{}        // the payload and properties are not kept alive
	return err
}

// readInbound reads the packet fh starts into cl.inbound. faceagent patch (stack): the
// packet is decoded in place (readPacket), not returned by value; on an error cl.inbound
// is cleared, and the read loop ends.
//
//go:noinline
func (cl *Client) readInbound(fh *packets.FixedHeader) error {
	err := cl.readPacket(fh, &cl.inbound)
	if err != nil {
		cl.inbound = packets.Packet{}
	}
	return err
}

// Stop instructs the client to shut down all processing goroutines and disconnect.
func (cl *Client) Stop(err error) {
	cl.State.endOnce.Do(func() {
		// faceagent patch (DISCONNECT delivered): after a DISCONNECT the connection is
		// not closed here but by the reader once the peer has read it (finishLinger).
		linger := cl.lingering()
		if linger {
			cl.stopLingering()
		} else if cl.Net.Conn != nil {
			_ = cl.Net.Conn.Close() // omit close error
		}

		if err != nil {
			cl.State.stopCause.Store(err)
		}

		if cl.State.cancelOpen != nil {
			cl.State.cancelOpen()
		}
		if linger {
			cl.wakeReader() // after cancelOpen: see wakeReader
		}

		cl.State.disconnected.Store(time.Now().Unix())
	})
}

// StopCause returns the reason the client connection was stopped, if any.
func (cl *Client) StopCause() error {
	if cl.State.stopCause.Load() == nil {
		return nil
	}
	return cl.State.stopCause.Load().(error)
}

// StopTime returns the the time the client disconnected in unix time, else zero.
func (cl *Client) StopTime() int64 {
	return cl.State.disconnected.Load()
}

// Closed returns true if client connection is closed.
func (cl *Client) Closed() bool {
	return cl.State.open == nil || cl.State.open.Err() != nil
}

func (cl *Client) IsTakenOver() bool {
	return cl.State.isTakenOver.Load()
}

// ReadFixedHeader reads in the values of the next packet's fixed header.
func (cl *Client) ReadFixedHeader(fh *packets.FixedHeader) error {
	if cl.Net.bconn == nil {
		return ErrConnectionClosed
	}

	b, err := cl.Net.bconn.ReadByte()
	if err != nil {
		return err
	}

	err = fh.Decode(b)
	if err != nil {
		return err
	}

	var bu int
	fh.Remaining, bu, err = packets.DecodeLength(cl.Net.bconn)
	if err != nil {
		return err
	}

	if cl.ops.options.Capabilities.MaximumPacketSize > 0 && uint32(fh.Remaining+1) > cl.ops.options.Capabilities.MaximumPacketSize {
		return packets.ErrPacketTooLarge // [MQTT-3.2.2-15]
	}

	atomic.AddInt64(&cl.ops.info.BytesReceived, int64(bu+1))
	return nil
}

// ReadPacket reads the remaining buffer into an MQTT packet.
func (cl *Client) ReadPacket(fh *packets.FixedHeader) (pk packets.Packet, err error) {
	err = cl.readPacket(fh, &pk)
	return pk, err
}

// readPacket is ReadPacket decoding into *pk, which must be a zero packet. faceagent patch
// (stack): a terminal's reader decodes into its client's own packet (readInbound), and
// the OnPacketRead hooks get it by pointer (Hooks.onPacketRead); ReadPacket's result, its
// copies and the hooks' copies made a packet read take more than 8 KiB of stack, so
// every read grew a reader's stack back to 16 KiB after the GC had shrunk it. Also
// (allocations): the packet is decoded from the buffer it was read into, without a copy
// of it; that buffer is the packet's own, made for each read.
func (cl *Client) readPacket(fh *packets.FixedHeader, pk *packets.Packet) (err error) {
	atomic.AddInt64(&cl.ops.info.PacketsReceived, 1)

	pk.ProtocolVersion = cl.Properties.ProtocolVersion // inherit client protocol version for decoding
	pk.FixedHeader = *fh
	if err := cl.takeInbound(int64(pk.FixedHeader.Remaining)); err != nil { // faceagent patch (byte bounds)
		return err
	}
	px := make([]byte, pk.FixedHeader.Remaining)
	n, err := io.ReadFull(cl.Net.bconn, px)
	if err != nil {
		return err
	}

	atomic.AddInt64(&cl.ops.info.BytesReceived, int64(n))

	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectDecode(px)
	case packets.Disconnect:
		err = pk.DisconnectDecode(px)
	case packets.Connack:
		err = pk.ConnackDecode(px)
	case packets.Publish:
		err = pk.PublishDecode(px)
		if err == nil {
			atomic.AddInt64(&cl.ops.info.MessagesReceived, 1)
		}
	case packets.Puback:
		err = pk.PubackDecode(px)
	case packets.Pubrec:
		err = pk.PubrecDecode(px)
	case packets.Pubrel:
		err = pk.PubrelDecode(px)
	case packets.Pubcomp:
		err = pk.PubcompDecode(px)
	case packets.Subscribe:
		err = pk.SubscribeDecode(px)
	case packets.Suback:
		err = pk.SubackDecode(px)
	case packets.Unsubscribe:
		err = pk.UnsubscribeDecode(px)
	case packets.Unsuback:
		err = pk.UnsubackDecode(px)
	case packets.Pingreq:
	case packets.Pingresp:
	case packets.Auth:
		err = pk.AuthDecode(px)
	default:
		err = fmt.Errorf("invalid packet type; %v", pk.FixedHeader.Type)
	}

	if err != nil {
		return err
	}

	return cl.ops.hooks.onPacketRead(cl, pk)
}

// WritePacket encodes and writes a packet to the client.
func (cl *Client) WritePacket(pk packets.Packet) error {
	if cl.Closed() {
		return ErrConnectionClosed
	}

	if cl.Net.Conn == nil {
		return nil
	}

	if pk.Expiry > 0 {
		expiry := pk.Expiry - time.Now().Unix()
		if expiry < 1 {
			expiry = 1
		}
		pk.Properties.MessageExpiryInterval = uint32(expiry) // [MQTT-3.3.2-6]
	}

	pk.ProtocolVersion = cl.Properties.ProtocolVersion
	if pk.Mods.MaxSize == 0 { // NB we use this statement to embed client packet sizes in tests
		pk.Mods.MaxSize = cl.Properties.Props.MaximumPacketSize
	}

	if cl.Properties.Props.RequestProblemInfoFlag && cl.Properties.Props.RequestProblemInfo == 0x0 {
		pk.Mods.DisallowProblemInfo = true // [MQTT-3.1.2-29] strict, no problem info on any packet if set
	}

	if pk.FixedHeader.Type != packets.Connack || cl.Properties.Props.RequestResponseInfo == 0x1 || cl.ops.options.Capabilities.Compatibilities.AlwaysReturnResponseInfo {
		pk.Mods.AllowResponseInfo = true // [MQTT-3.1.2-28] we need to know which properties we can encode
	}

	pk = cl.ops.hooks.OnPacketEncode(cl, pk)

	var err error
	buf := writeBuffers.Get() // faceagent patch (write allocations)
	defer writeBuffers.Put(buf)
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(buf)
	case packets.Connack:
		err = pk.ConnackEncode(buf)
	case packets.Publish:
		err = pk.PublishEncode(buf)
	case packets.Puback:
		err = pk.PubackEncode(buf)
	case packets.Pubrec:
		err = pk.PubrecEncode(buf)
	case packets.Pubrel:
		err = pk.PubrelEncode(buf)
	case packets.Pubcomp:
		err = pk.PubcompEncode(buf)
	case packets.Subscribe:
		err = pk.SubscribeEncode(buf)
	case packets.Suback:
		err = pk.SubackEncode(buf)
	case packets.Unsubscribe:
		err = pk.UnsubscribeEncode(buf)
	case packets.Unsuback:
		err = pk.UnsubackEncode(buf)
	case packets.Pingreq:
		err = pk.PingreqEncode(buf)
	case packets.Pingresp:
		err = pk.PingrespEncode(buf)
	case packets.Disconnect:
		err = pk.DisconnectEncode(buf)
	case packets.Auth:
		err = pk.AuthEncode(buf)
	default:
		err = fmt.Errorf("%w: %v", packets.ErrNoValidPacketAvailable, pk.FixedHeader.Type)
	}
	if err != nil {
		return err
	}

	if pk.Mods.MaxSize > 0 && uint32(buf.Len()) > pk.Mods.MaxSize {
		return packets.ErrPacketTooLarge // [MQTT-3.1.2-24] [MQTT-3.1.2-25]
	}

	// faceagent patch (wedged peer): a DISCONNECT is written by the goroutine ending the
	// connection (a session takeover on the new connection's, Close on its own). With a peer
	// that stopped reading it waited for the client's blocked write (up to the write timeout)
	// and could then block on the same full socket. It gets disconnectWriteGrace, the wait for
	// a write in progress included; then the client is stopped as DisconnectClient would
	// stop it, which closes the connection under both writes.
	if pk.FixedHeader.Type == packets.Disconnect && cl.Net.Conn != nil {
		cause := packets.Code{Code: pk.ReasonCode, Reason: pk.Properties.ReasonString}
		cut := time.AfterFunc(disconnectWriteGrace, func() { cl.Stop(cause) })
		defer cut.Stop()
	}

	n, err := func() (written int64, werr error) {
		cl.Lock()
		defer cl.Unlock()
		// faceagent patch (wedged peer): not a byte more once the client has stopped (while
		// this write waited for the lock, say), and stop it when a write fails: a write that
		// timed out (a peer that stopped reading) or failed part way leaves no usable stream,
		// and the next packets would each wait the write timeout again.
		if cl.Closed() {
			return 0, ErrConnectionClosed
		}
		defer func() {
			if werr != nil {
				cl.Stop(werr)
			}
		}()
		if len(cl.State.outbound) == 0 {
			if cl.Net.outbuf == nil {
				return buf.WriteTo(cl.Net.Conn)
			}

			// first write to buffer, then flush buffer
			n, _ := cl.Net.outbuf.Write(buf.Bytes()) // will always be successful
			err = cl.flushOutbuf()
			return int64(n), err
		}

		// there are more writes in the queue
		if cl.Net.outbuf == nil {
			if buf.Len() >= cl.ops.options.ClientNetWriteBufferSize {
				return buf.WriteTo(cl.Net.Conn)
			}
			cl.Net.outbuf = writeBuffers.Get() // faceagent patch (write allocations): back in flushOutbuf
		}

		n, _ := cl.Net.outbuf.Write(buf.Bytes()) // will always be successful
		if cl.Net.outbuf.Len() < cl.ops.options.ClientNetWriteBufferSize {
			return int64(n), nil
		}

		err = cl.flushOutbuf()
		return int64(n), err
	}()
	if err != nil {
		return err
	}

	atomic.AddInt64(&cl.ops.info.BytesSent, n)
	atomic.AddInt64(&cl.ops.info.PacketsSent, 1)
	if pk.FixedHeader.Type == packets.Publish {
		atomic.AddInt64(&cl.ops.info.MessagesSent, 1)
	}

	// faceagent patch (write allocations): buf goes back to writeBuffers; a hook may keep the
	// bytes it is given, so it gets a copy (none of faceagent's hooks has OnPacketSent).
	if cl.ops.hooks.Provides(OnPacketSent) {
		cl.ops.hooks.OnPacketSent(cl, pk, bytes.Clone(buf.Bytes()))
	}

	return err
}

func (cl *Client) flushOutbuf() (err error) {
	if cl.Net.outbuf == nil {
		return
	}

	_, err = cl.Net.outbuf.WriteTo(cl.Net.Conn)
	if err == nil {
		writeBuffers.Put(cl.Net.outbuf) // faceagent patch (write allocations)
		cl.Net.outbuf = nil
	}
	return
}

// faceagent patch (terminal queues): ResizeOutbound, OutboundCap, OutboundLen,
// SetReadBuffer and ReadBufferSize let an embedder give a client a shorter queue of pending
// writes and a smaller read buffer once it knows what the client is. mochi makes both in
// newClient, before CONNECT, with the sizes every client gets (a 1,024-slot queue is a
// 9,472-byte allocation); agent/broker (queues.go) shrinks them for terminals, which are
// sent one command at a time. Before, it reached these fields with reflect and unsafe.

// outboundResizeOrigin marks the packet ResizeOutbound queues: MQTT strings never hold
// U+0000 [MQTT-1.5.4-2], so no client id or packet origin equals it.
const outboundResizeOrigin = "\x00faceagent-outbound-resize"

// outboundResize is a ResizeOutbound waiting for the client's writer goroutine.
type outboundResize struct {
	slots   int
	done    chan struct{} // closed by the writer once it has decided
	resized bool          // written before done is closed
}

// ResizeOutbound replaces the client's queue of pending writes by an empty one of n slots,
// and reports whether it did. It does nothing when the queue has n slots or fewer, holds a
// packet, or the client is inline or closed.
//
// WriteLoop reads the queue field, unlocked, at each turn of its loop, so only the writer
// goroutine may replace it: ResizeOutbound queues a marker packet (type Reserved, never
// encoded nor written) and waits until the writer has taken it (writeOutbound), and
// swapped the field under the client's lock (WritePacket reads the queue's length under it
// on other goroutines). It returns once the writer has done so, or once the client stops.
//
// Publishers send to the queue without the client's lock (publishToClient): call
// ResizeOutbound before anything can be routed to the client, e.g. from an OnSubscribe hook
// (on its reader goroutine) while it has no subscription and no message in flight. Should
// a publisher routing on a stale subscriber list (mochi routes by client id: a client
// taking a clean session over gets what was meant for the one it replaced) queue a packet
// behind the marker, the writer keeps the old queue, which holds it. A resize already
// waiting makes a second one return false at once.
func (cl *Client) ResizeOutbound(n int) bool {
	if n <= 0 || cl.Net.Inline || cl.Closed() {
		return false
	}
	cl.RLock()
	old := cl.State.outbound
	cl.RUnlock()
	if cap(old) <= n || len(old) > 0 {
		return false
	}
	req := &outboundResize{slots: n, done: make(chan struct{})}
	if !cl.State.resize.CompareAndSwap(nil, req) {
		return false
	}
	select {
	case old <- &packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Reserved}, Origin: outboundResizeOrigin}:
		atomic.AddInt32(&cl.State.outboundQty, 1) // WriteLoop counts it out (OutboundLen)
	default: // a publisher filled it since the check: keep it
		cl.State.resize.CompareAndSwap(req, nil)
		return false
	}
	select {
	case <-req.done:
	case <-cl.State.open.Done():
		if cl.State.resize.CompareAndSwap(req, nil) {
			return false // the writer has stopped, or will drop the marker
		}
		<-req.done // the writer took the request: it closes done without waiting on anything but the client's lock
	}
	return req.resized
}

// applyOutboundResize carries out a ResizeOutbound when pk is its marker, on the writer
// goroutine (writeOutbound), and reports whether pk was the marker; any other packet is
// left alone. The marker is never written.
func (cl *Client) applyOutboundResize(pk *packets.Packet) bool {
	if pk.FixedHeader.Type != packets.Reserved || pk.Origin != outboundResizeOrigin {
		return false
	}
	req := cl.State.resize.Swap(nil)
	if req == nil {
		return true
	}
	defer close(req.done)
	if len(cl.State.outbound) > 0 {
		return true // queued behind the marker on a stale subscriber list: see ResizeOutbound
	}
	short := make(chan *packets.Packet, req.slots)
	cl.Lock()
	cl.State.outbound = short
	cl.Unlock()
	req.resized = true
	return true
}

// OutboundCap returns the number of slots of the client's queue of pending writes. It reads
// the queue under the client's read lock, so it waits for a write in progress.
func (cl *Client) OutboundCap() int {
	cl.RLock()
	defer cl.RUnlock()
	return cap(cl.State.outbound)
}

// OutboundLen returns the number of packets queued for the client's writer goroutine, the
// one it is writing included (mochi's count, updated just after each send and each write).
// It never waits.
func (cl *Client) OutboundLen() int {
	return int(atomic.LoadInt32(&cl.State.outboundQty))
}

// SetReadBuffer replaces the client's read buffer by one of n bytes and reports whether it
// did. The reader goroutine owns the buffer: call it there, between two packets (in a hook
// such as OnSubscribe). It does nothing while bytes beyond the packet being handled are
// buffered (they would be lost), when the buffer has n bytes already, or without a
// connection.
func (cl *Client) SetReadBuffer(n int) bool {
	r := cl.Net.bconn
	if r == nil || cl.Net.Conn == nil || r.Size() == n || r.Buffered() > 0 {
		return false
	}
	cl.Net.bconn = bufio.NewReaderSize(cl.Net.Conn, n)
	return true
}

// ReadBufferSize returns the size of the client's read buffer, 0 without one. Call it on
// the reader goroutine, or once the client has stopped.
func (cl *Client) ReadBufferSize() int {
	if cl.Net.bconn == nil {
		return 0
	}
	return cl.Net.bconn.Size()
}

// QueueWrite queues pk for the client's writer goroutine, as mochi's publishToClient queues
// a message, and reports whether it did: false when the client is closed or has no
// connection, or when its queue of pending writes is full. faceagent patch (takeover
// redelivery): WritePacket writes on the caller's goroutine and holds the client's lock
// while it writes, so a caller writing to a peer that stopped reading waited for it, up to
// the write timeout; QueueWrite never waits, and the writer goroutine writes pk in turn.
//
// Like publishToClient it reads the queue field without the client's lock: do not call it
// while a ResizeOutbound may be under way (before the client's first SUBSCRIBE is handled).
//
// faceagent patch (byte bounds): false too when pk does not fit in the queue's bytes
// (MaximumClientWritesPendingBytes).
func (cl *Client) QueueWrite(pk packets.Packet) bool {
	if cl.Net.Conn == nil || cl.Closed() {
		return false
	}
	n := outboundBytes(&pk)
	if !cl.reservePending(n) {
		return false
	}
	select {
	case cl.State.outbound <- &pk:
		atomic.AddInt32(&cl.State.outboundQty, 1)
		if cl.Closed() {
			cl.dropQueued() // faceagent patch (counter drift): its writer may have ended
		}
		return true
	default:
		cl.unreservePending(n)
		return false
	}
}
