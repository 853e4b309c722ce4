// faceagent patch (counter drift): random client lifecycles against a server with every
// bound set; once every client is gone and every session expired, each counter is back at
// its baseline.

package mqtt

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// lifecycleHooks lets everyone in, refuses one topic, and fails the storage of a session
// (ConnackWaiter) or of a client's messages (AckWaiter) now and then.
type lifecycleHooks struct {
	HookBase
	mu  sync.Mutex
	rng *rand.Rand
}

func (h *lifecycleHooks) ID() string { return "lifecycle" }
func (h *lifecycleHooks) Provides(b byte) bool {
	return b == OnConnectAuthenticate || b == OnACLCheck
}
func (h *lifecycleHooks) OnConnectAuthenticate(*Client, packets.Packet) bool { return true }
func (h *lifecycleHooks) OnACLCheck(_ *Client, topic string, _ bool) bool {
	return topic != "deny/x"
}

// oneIn reports true once in n calls, at random.
func (h *lifecycleHooks) oneIn(n int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rng.Intn(n) == 0
}

func (h *lifecycleHooks) WaitBeforeConnack(*Client) error {
	if h.oneIn(12) {
		return errors.New("session not stored")
	}
	return nil
}

func (h *lifecycleHooks) WaitBeforeAck(*Client) error {
	if h.oneIn(40) {
		return errors.New("message not stored")
	}
	return nil
}

// lifecycleClient is one connection of a random client.
type lifecycleClient struct {
	conn    net.Conn
	version byte
	wmu     sync.Mutex
	stall   atomic.Bool // its reader stops reading (the server's writes back up)
	nextID  uint16
	pong    chan struct{} // a PINGRESP came
	gone    chan struct{} // closed when its reader ends
}

func (c *lifecycleClient) send(pk packets.Packet) {
	pk.ProtocolVersion = c.version
	var buf bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(&buf)
	case packets.Subscribe:
		err = pk.SubscribeEncode(&buf)
	case packets.Unsubscribe:
		err = pk.UnsubscribeEncode(&buf)
	case packets.Publish:
		err = pk.PublishEncode(&buf)
	case packets.Puback:
		err = pk.PubackEncode(&buf)
	case packets.Pubrec:
		err = pk.PubrecEncode(&buf)
	case packets.Pubrel:
		err = pk.PubrelEncode(&buf)
	case packets.Pubcomp:
		err = pk.PubcompEncode(&buf)
	case packets.Disconnect:
		err = pk.DisconnectEncode(&buf)
	case packets.Pingreq:
		err = pk.PingreqEncode(&buf)
	}
	if err != nil {
		panic(err)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.conn.Write(buf.Bytes()) // a connection the server ended fails: no matter
}

// read returns the next packet's type, flags and body.
func (c *lifecycleClient) read(r *bufio.Reader) (byte, []byte, error) {
	first, err := r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, _, err := packets.DecodeLength(r)
	if err != nil {
		return 0, nil, err
	}
	body := make([]byte, n)
	_, err = io.ReadFull(r, body)
	return first, body, err
}

// answer reads the connection, acknowledging what the server sends (now and then with an
// error code), until it ends or the client stalls.
func (c *lifecycleClient) answer(r *bufio.Reader, rng *rand.Rand) {
	defer close(c.gone)
	for !c.stall.Load() {
		first, body, err := c.read(r)
		if err != nil {
			return
		}
		typ, qos := first>>4, first>>1&3
		var id uint16
		switch typ {
		case packets.Publish:
			if qos == 0 || len(body) < 2 {
				continue
			}
			l := int(body[0])<<8 | int(body[1])
			if len(body) < 4+l {
				return
			}
			id = uint16(body[2+l])<<8 | uint16(body[3+l])
		case packets.Pubrec, packets.Pubrel:
			id = uint16(body[0])<<8 | uint16(body[1])
		case packets.Pingresp:
			select {
			case c.pong <- struct{}{}:
			default:
			}
			continue
		default:
			continue
		}
		var reason byte
		if c.version == 5 && rng.Intn(8) == 0 {
			reason = packets.ErrUnspecifiedError.Code
		}
		switch {
		case typ == packets.Publish && qos == 1:
			c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id, ReasonCode: reason})
		case typ == packets.Publish:
			c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: id, ReasonCode: reason})
		case typ == packets.Pubrec:
			c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel, Qos: 1}, PacketID: id})
		default:
			c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubcomp}, PacketID: id})
		}
	}
}

var (
	lifecycleFilters = []string{"t/#", "t/a", "t/+", "$share/g/t/#", "r/#", "deny/x", "+/+", "#"}
	lifecycleTopics  = []string{"t/a", "t/b", "r/x", "r/y", "deny/x"}
	lifecycleSizes   = []int{0, 10, 10, 300, 3000, 70 << 10}
)

// runLifecycle connects to addr as a random client: a CONNECT (client id from a few, so
// sessions are resumed and taken over; clean or kept; a will, delayed or not), then random
// SUBSCRIBEs, UNSUBSCRIBEs and PUBLISHes of every QoS (retained, expiring, large, now and
// then beyond the server's Receive Maximum), answering what the server sends or stalling, and an end
// of any kind (DISCONNECT with or without the will, a dropped connection, or none: the
// connection is left to be taken over or closed at the end, in conns).
func runLifecycle(addr string, seed int64, conns chan<- net.Conn, connected, refused *atomic.Int64) {
	rng := rand.New(rand.NewSource(seed))
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	conns <- conn
	c := &lifecycleClient{conn: conn, version: 5, pong: make(chan struct{}, 1), gone: make(chan struct{})}
	if rng.Intn(4) == 0 {
		c.version = 4
	}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 30,
			ClientIdentifier: "c" + strconv.Itoa(rng.Intn(8)), Clean: rng.Intn(3) == 0}}
	if c.version == 5 {
		pk.Properties.SessionExpiryInterval = []uint32{0, 1, 3600}[rng.Intn(3)]
		pk.Properties.SessionExpiryIntervalFlag = true
		pk.Properties.ReceiveMaximum = []uint16{0, 1, 2, 8}[rng.Intn(4)]
	}
	if rng.Intn(3) == 0 {
		pk.Connect.WillFlag, pk.Connect.WillTopic = true, lifecycleTopics[rng.Intn(len(lifecycleTopics))]
		pk.Connect.WillQos, pk.Connect.WillRetain = byte(rng.Intn(3)), rng.Intn(2) == 0
		pk.Connect.WillPayload = make([]byte, []int{10, 3000}[rng.Intn(2)])
		if c.version == 5 && rng.Intn(2) == 0 {
			pk.Connect.WillProperties.WillDelayInterval = 1
		}
	}
	c.send(pk)
	r := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	first, body, err := c.read(r)
	if err != nil || first>>4 != packets.Connack || len(body) < 2 || body[1] != 0 {
		_ = conn.Close() // refused
		refused.Add(1)

		return
	}
	connected.Add(1)
	_ = conn.SetReadDeadline(time.Time{})
	go c.answer(r, rand.New(rand.NewSource(seed+1)))

	for op := 0; op < 24; op++ {
		c.nextID++
		if c.nextID == 0 {
			c.nextID = 1
		}
		switch rng.Intn(8) {
		case 0, 1:
			sub := packets.Subscription{Filter: lifecycleFilters[rng.Intn(len(lifecycleFilters))], Qos: byte(rng.Intn(3)),
				RetainHandling: byte(rng.Intn(3))}
			sub.NoLocal = !IsSharedFilter(sub.Filter) && rng.Intn(3) == 0
			c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: c.nextID,
				Filters: packets.Subscriptions{sub}})
		case 2:
			c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, PacketID: c.nextID,
				Filters: packets.Subscriptions{{Filter: lifecycleFilters[rng.Intn(len(lifecycleFilters))]}}})
		case 3:
			switch rng.Intn(8) {
			case 0, 1:
				c.stall.Store(true)
			case 2: // beyond the server's Receive Maximum: DISCONNECT 0x93
				for id := uint16(100); id < 120; id++ {
					c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
						PacketID: id, TopicName: "t/a", Payload: []byte("flood")})
				}
			}
		default:
			p := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: byte(rng.Intn(3)), Retain: rng.Intn(5) == 0},
				TopicName: lifecycleTopics[rng.Intn(len(lifecycleTopics))], Payload: make([]byte, lifecycleSizes[rng.Intn(len(lifecycleSizes))])}
			if p.FixedHeader.Qos > 0 {
				p.PacketID = c.nextID % 12 // ids reused before their flow ended, now and then
				if p.PacketID == 0 {
					p.PacketID = 12
				}
			}
			if c.version == 5 && rng.Intn(4) == 0 {
				p.Properties.MessageExpiryInterval = 1
			}
			c.send(p)
		}
	}
	if !c.stall.Load() && rng.Intn(2) == 0 {
		// until the server has handled everything sent (or ended the connection)
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
		select {
		case <-c.pong:
		case <-c.gone:
		case <-time.After(2 * time.Second):
		}
	}
	switch rng.Intn(5) {
	case 0:
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}})
	case 1:
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ReasonCode: packets.CodeDisconnectWillMessage.Code})
	case 2:
		_ = conn.Close()
	}
	// otherwise left open: taken over by a later client of its id, or closed at the end
}

// Random client lifecycles, with every bound of the server set and the housekeeping (in
// flight messages and sessions expiring) running among them: once every connection is
// closed and every session, message and will has expired, nothing is counted any more:
// the total of the sessions' bytes (MaximumQueuedBytes), the retained messages' bytes, the
// inbound budget, Info.Inflight, Info.Subscriptions, Info.ClientsConnected, the known
// clients (MaximumClients), the held acknowledgements, the topics index; and the
// server's goroutines are gone. A counter that leaks a little per event would, on a daemon
// running for months, end by refusing everything.
//
//	FACEAGENT_LIFECYCLE_SEED=n FACEAGENT_LIFECYCLE_CLIENTS=n go test -race -run TestLifecycleCountersReturnToBaseline github.com/mochi-mqtt/server/v2
func TestLifecycleCountersReturnToBaseline(t *testing.T) {
	seed := time.Now().UnixNano()
	if v, err := strconv.ParseInt(os.Getenv("FACEAGENT_LIFECYCLE_SEED"), 10, 64); err == nil {
		seed = v
	}
	clients := 120
	if v, err := strconv.Atoi(os.Getenv("FACEAGENT_LIFECYCLE_CLIENTS")); err == nil && v > 0 {
		clients = v
	}
	t.Logf("seed %d, %d clients (FACEAGENT_LIFECYCLE_SEED, FACEAGENT_LIFECYCLE_CLIENTS)", seed, clients)
	goroutines := runtime.NumGoroutine()

	caps := NewDefaultServerCapabilities()
	caps.MaximumClients = 8
	caps.MaximumClientWritesPending = 16
	caps.MaximumClientWritesPendingBytes = 4 << 10
	caps.MaximumSessionBytes = 24 << 10
	caps.MaximumQueuedBytes = 96 << 10
	caps.MaximumRetainedBytes = 8 << 10
	caps.MaximumSubscriptions = 4
	caps.MaximumInboundBytes = 100 << 10
	caps.ReceiveMaximum = 16
	caps.MaximumInflight = 64
	caps.MaximumMessageExpiryInterval = 3600
	caps.MaximumSessionExpiryInterval = 3600
	ticks := NewLoopTicks()
	s := New(&Options{Capabilities: caps, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), LoopTicks: ticks})
	hooks := &lifecycleHooks{rng: rand.New(rand.NewSource(seed - 1))}
	if err := s.AddHook(hooks, nil); err != nil {
		t.Fatal(err)
	}
	l := listeners.NewTCP(listeners.Config{ID: "tcp", Address: "127.0.0.1:0"})
	if err := s.AddListener(l); err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(); err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = s.Close()
		}
	})
	// The housekeeping runs as time passes (the loop's tasks, now and then), and now and
	// then as if an hour had passed: every message in flight and every session away expires.
	stop := make(chan struct{})
	var house sync.WaitGroup
	house.Add(1)
	go func() {
		defer house.Done()
		rng := rand.New(rand.NewSource(seed - 2))
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				for _, c := range ticks.C {
					select {
					case c <- now:
					default:
					}
				}
				switch rng.Intn(20) {
				case 0:
					s.clearExpiredInflights(now.Unix() + 7200)
				case 1:
					s.clearExpiredClients(now.Unix() + 7200)
				}
			}
		}
	}()

	conns := make(chan net.Conn, 2*clients)
	var connected, refused atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < clients && time.Now().Before(deadline); i += 6 {
		for j := i; j < min(i+6, clients); j++ { // six at once
			wg.Add(1)
			go func(seed int64) {
				defer wg.Done()
				runLifecycle(l.Address(), seed, conns, &connected, &refused)
			}(seed + int64(j)*7919)
		}
		wg.Wait()
	}
	t.Logf("%d CONNECTs let in, %d refused; %d packets received, %d sent", connected.Load(), refused.Load(),
		atomic.LoadInt64(&s.Info.PacketsReceived), atomic.LoadInt64(&s.Info.PacketsSent))
	close(conns)
	for c := range conns {
		_ = c.Close()
	}
	waitFor(t, "every connection to end", func() bool { return atomic.LoadInt64(&s.Info.ClientsConnected) == 0 })
	close(stop)
	house.Wait()

	// Every session, message in flight, delayed will and retained message expires.
	later := time.Now().Unix() + 2*3600
	s.sendDelayedLWT(later)
	s.clearExpiredInflights(later)
	s.clearExpiredClients(later)
	s.clearExpiredRetainedMessages(later)

	check := func(what string, got, want int64) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %d, want %d", what, got, want)
		}
	}
	check("QueuedBytes (sessions' bytes, MaximumQueuedBytes)", s.QueuedBytes(), 0)
	check("RetainedBytes", s.RetainedBytes(), 0)
	check("InboundBytes (inbound budget)", s.InboundBytes(), 0)
	check("Info.Inflight", atomic.LoadInt64(&s.Info.Inflight), 0)
	check("Info.Subscriptions", atomic.LoadInt64(&s.Info.Subscriptions), 0)
	check("Info.ClientsConnected", atomic.LoadInt64(&s.Info.ClientsConnected), 0)
	check("known clients (MaximumClients)", s.Clients.network.Load(), 0)
	check("clients", int64(s.Clients.Len()), 0)
	check("clients with held acknowledgements", int64(s.held.clients.Load()), 0)
	s.held.mu.Lock()
	check("held acknowledgement lists", int64(len(s.held.ids)), 0)
	s.held.mu.Unlock()
	check("subscriptions in the topics index", int64(particleSubscriptions(s.Topics.root)), 0)
	check("delayed wills", int64(s.loop.willDelayed.Len()), 0)
	check("client ids' session locks", int64(s.sessions.held()), 0)

	_ = s.Close()
	closed = true
	waitFor(t, fmt.Sprintf("goroutines back to %d", goroutines), func() bool { return runtime.NumGoroutine() <= goroutines })
}
