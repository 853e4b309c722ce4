package broker

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"golang.org/x/crypto/bcrypt"

	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
	"github.com/seed0e69bba5/faceagent/internal/mqttwire"
)

// FuzzConnectSubscribeSequences drives the broker's listener and hooks (auth, sessions
// journal, takeover and clash guards, the state store) with a sequence of packets over up
// to fuzzConns connections, decoded from the fuzz input by fuzzProgram: CONNECT (client
// ids from a small set, so sessions are resumed and taken over; users; clean start;
// session expiry; receive maximum; keepalive; wills; MQTT 3.1.1 or 5), SUBSCRIBE and
// UNSUBSCRIBE (filters, options, subscription identifiers), PUBLISH (QoS 0-2, retained,
// to the store's invoke topic too), PUBACK, PUBREC, PUBREL and PUBCOMP with any packet
// id, DISCONNECT, and raw bytes. Each write is bounded by a deadline. After the sequence:
// the broker still accepts a fresh client and routes a message to it, and once the
// sequence's connections are closed the goroutines come back to what they were before.
// A panic in the broker, a deadlock (the check times out), or a leaked goroutine fails.
//
//	go test -run '^$' -fuzz '^FuzzConnectSubscribeSequences$' -fuzztime 5m ./agent/broker/
func FuzzConnectSubscribeSequences(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		f.Fatal(err)
	}
	b := startBroker(f, Options{
		AllowAnonymous: true,
		DataDir:        f.TempDir(),
		Users: []User{{Name: "u1", PasswordHash: string(hash), Rules: Rules{
			Publish: []string{"a/#", InvokeTopic, "clients/%c/#"}, Subscribe: []string{"a/#", "clients/%c/#", "$share/g/a/#"},
			ReadKeys: []string{"k"}, WriteKeys: []string{"k"},
		}}},
		// Kept sessions queue what is published while they are away: bound it, or the
		// sessions of a long run hold every message of every input.
		MaxInflight:    64,
		ConnectTimeout: time.Second,
		WriteTimeout:   time.Second,
	})
	var round int
	f.Fuzz(func(t *testing.T, program []byte) {
		round++
		before := runtime.NumGoroutine()
		run := &fuzzRun{t: t, addr: b.Addr()}
		run.execute(program)
		checkRoutes(t, b.Addr(), round)
		run.closeAll()
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Fatalf("%d goroutines, %d before the sequence:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(time.Millisecond)
		}
	})
}

const (
	fuzzConns = 4
	fuzzSteps = 64
	// fuzzWrite bounds each write of the sequence: a broker that stops reading a
	// connection makes the write time out, which is no failure by itself (the check
	// after the sequence decides).
	fuzzWrite = time.Second
)

// Tables the program's bytes index into: few client ids (sessions meet again), topics
// and filters that reach every hook, valid and not.
var (
	fuzzIDs     = []string{"a", "b", "c", "d", "", "u1-client", "$deferred-inline", "x/y"}
	fuzzTopics  = []string{"a", "a/b", "a/b/c", InvokeTopic, "clients/a/r", NotifyTopicPrefix + "/61/command/notify/6B", "$SYS/x", "x/+", "", "b"}
	fuzzFilters = []string{"#", "a/#", "+", "a/+", "$share/g/a/#", "$share/g/#", "$SYS/#", "clients/#", "", "a/#/b", "$share/", "b", "a/b"}
	fuzzExpiry  = []uint32{0, 1, 10, 3600, 0xFFFFFFFF}
	fuzzRecvMax = []uint16{0, 1, 2, 10, 65535}
	fuzzKeep    = []uint16{0, 1, 30, 65535}
	// Payloads of publishes to InvokeTopic are state store commands.
	fuzzCommands = [][]byte{cmd("SET", "k", "v"), cmd("GET", "k"), cmd("KEYNOTIFY", "k"), cmd("DEL", "k"), cmd("SET", "k", "v", "PX", "1"), []byte("garbage")}
)

// fuzzRun is one sequence's connections.
type fuzzRun struct {
	t       *testing.T
	addr    string
	conns   [fuzzConns]*fuzzConn
	step    int
	readers sync.WaitGroup
}

// fuzzConn is one connection of a sequence, with a goroutine reading it.
type fuzzConn struct {
	net.Conn
	version byte          // 4 or 5, of the CONNECT sent on it
	pong    chan struct{} // a PINGRESP came
	gone    chan struct{} // closed once reading ended: the connection is closed
}

// fuzzReader reads a program's bytes; past the end it returns zeros.
type fuzzReader struct {
	b []byte
}

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzReader) uint16() uint16 { return uint16(r.byte())<<8 | uint16(r.byte()) }

func (r *fuzzReader) bytes(n int) []byte {
	n = min(n, len(r.b))
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func pick[T any](r *fuzzReader, from []T) T { return from[int(r.byte())%len(from)] }

// execute runs the program: each step is an opcode byte (connection in the low two bits,
// packet kind above it, modulo 10) and its operands:
//
//	0 CONNECT      flags, client id, keepalive, session expiry, receive maximum[, will topic, will delay]
//	1 SUBSCRIBE    packet id (2 bytes), filters-1, then per filter: filter, options, identifier
//	2 UNSUBSCRIBE  packet id (2 bytes), filter
//	3 PUBLISH      packet id (2 bytes), flags, topic, payload (a command for the invoke
//	               topic; else a length and the bytes)[, response topic][, topic alias]
//	4-7 PUBACK, PUBREC, PUBREL, PUBCOMP   packet id (2 bytes), reason
//	8 DISCONNECT   reason, 1 for a session expiry property[, session expiry]
//	9 raw bytes    length, the bytes
//
// Operands index into the tables above (modulo their length). A packet on a connection
// that has none yet opens it with a CONNECT decoded from the same bytes.
func (run *fuzzRun) execute(program []byte) {
	r := &fuzzReader{b: program}
	for run.step = 0; run.step < fuzzSteps && len(r.b) > 0; run.step++ {
		op := r.byte()
		slot := int(op % fuzzConns)
		kind := op / fuzzConns % 10
		if kind == 0 || run.conns[slot] == nil {
			run.connect(slot, r)
			run.sync(slot)
			continue
		}
		pk := packets.Packet{ProtocolVersion: run.conns[slot].version}
		switch kind {
		case 1:
			pk.FixedHeader = packets.FixedHeader{Type: packets.Subscribe, Qos: 1}
			pk.PacketID = r.uint16()
			for range 1 + int(r.byte()%3) {
				filter, opts := pick(r, fuzzFilters), r.byte()
				pk.Filters = append(pk.Filters, packets.Subscription{Filter: filter, Qos: opts % 3,
					NoLocal: opts&0x04 != 0, RetainAsPublished: opts&0x08 != 0, RetainHandling: opts >> 4 % 3,
					Identifier: int(r.byte() % 4)})
			}
			if id := pk.Filters[0].Identifier; id > 0 && pk.ProtocolVersion == 5 {
				pk.Properties.SubscriptionIdentifier = []int{id}
			}
		case 2:
			pk.FixedHeader = packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}
			pk.PacketID = r.uint16()
			pk.Filters = packets.Subscriptions{{Filter: pick(r, fuzzFilters)}}
		case 3:
			pk.PacketID = r.uint16()
			flags := r.byte()
			pk.FixedHeader = packets.FixedHeader{Type: packets.Publish, Qos: flags % 3, Retain: flags&0x04 != 0, Dup: flags&0x08 != 0}
			pk.TopicName = pick(r, fuzzTopics)
			if pk.TopicName == InvokeTopic {
				pk.Payload = pick(r, fuzzCommands)
				pk.Properties.CorrelationData = []byte("0123456789abcdef")
				pk.Properties.User = []packets.UserProperty{{Key: "__ts", Val: "1696374425000:0:fuzz"}}
			} else {
				pk.Payload = r.bytes(int(r.byte()))
			}
			if flags&0x10 != 0 {
				pk.Properties.ResponseTopic = pick(r, fuzzTopics)
			}
			if flags&0x20 != 0 {
				pk.Properties.MessageExpiryInterval = 1
			}
			if flags&0x40 != 0 {
				pk.Properties.TopicAlias = 1 + uint16(r.byte()%3)
			}
		case 4, 5, 6, 7:
			pk.FixedHeader = packets.FixedHeader{Type: []byte{packets.Puback, packets.Pubrec, packets.Pubrel, packets.Pubcomp}[kind-4]}
			if pk.FixedHeader.Type == packets.Pubrel {
				pk.FixedHeader.Qos = 1
			}
			pk.PacketID = r.uint16()
			pk.ReasonCode = pick(r, []byte{0, 0x10, 0x80, 0x92})
		case 8:
			pk.FixedHeader = packets.FixedHeader{Type: packets.Disconnect}
			pk.ReasonCode = pick(r, []byte{0, 0x04, 0x81})
			if r.byte()%2 == 1 && pk.ProtocolVersion == 5 {
				pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = pick(r, fuzzExpiry), true
			}
		case 9:
			// No sync after raw bytes: a packet cut short would swallow the PINGREQ.
			run.write(slot, r.bytes(int(r.byte()%64)))
			continue
		}
		var buf bytes.Buffer
		pk.Mods.AllowResponseInfo = true
		if err := brokertest.EncodeClientPacket(&buf, pk); err != nil {
			continue // mochi's encoder refuses it (QoS > 0 without a packet id): nothing to send
		}
		run.write(slot, buf.Bytes())
		run.sync(slot)
	}
}

// fuzzStep bounds the broker's handling of one step: the PINGREQ sent after it must be
// answered (or the connection closed) within it. Nothing the broker does for one packet
// waits longer: an fsync, a takeover's grace for a wedged peer (0.5 s).
const fuzzStep = 5 * time.Second

// sync sends a PINGREQ on slot's connection and waits for the PINGRESP, which the broker
// sends once it handled every packet before it, or for the connection to close.
func (run *fuzzRun) sync(slot int) {
	fc := run.conns[slot]
	if fc == nil {
		return
	}
	for len(fc.pong) > 0 { // PINGRESPs to PINGREQs among raw bytes
		<-fc.pong
	}
	run.write(slot, []byte{packets.Pingreq << 4, 0})
	select {
	case <-fc.pong:
	case <-fc.gone:
	case <-time.After(fuzzStep):
		run.t.Fatalf("step %d: connection %d neither answered a PINGREQ nor closed within %v", run.step, slot, fuzzStep)
	}
}

// connect opens a new connection in slot (closing the one there) and sends a CONNECT
// decoded from r: flags (bit 0 clean start, 1 will, 2-3 will QoS, 4 will retain, 5-6
// none, u1 with its password or a wrong one, 7 MQTT 3.1.1), client id, keepalive,
// session expiry, receive maximum, and for a will its topic and delay.
func (run *fuzzRun) connect(slot int, r *fuzzReader) {
	run.close(slot)
	flags := r.byte()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: flags&0x01 != 0,
			ClientIdentifier: pick(r, fuzzIDs), Keepalive: pick(r, fuzzKeep)}}
	if flags&0x80 != 0 {
		pk.ProtocolVersion = 4
	}
	expiry, recvMax := pick(r, fuzzExpiry), pick(r, fuzzRecvMax)
	if pk.ProtocolVersion == 5 {
		if expiry > 0 {
			pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = expiry, true
		}
		pk.Properties.ReceiveMaximum = recvMax
		pk.Properties.TopicAliasMaximum = 3
	}
	switch flags >> 5 & 0x03 {
	case 1:
		pk.Connect.UsernameFlag, pk.Connect.Username = true, []byte("u1")
		pk.Connect.PasswordFlag, pk.Connect.Password = true, []byte("pw")
	case 2:
		pk.Connect.UsernameFlag, pk.Connect.Username = true, []byte("u1")
		pk.Connect.PasswordFlag, pk.Connect.Password = true, []byte("wrong")
	}
	if flags&0x02 != 0 {
		pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload = true, pick(r, fuzzTopics), []byte("will")
		pk.Connect.WillQos, pk.Connect.WillRetain = flags>>2&0x03%3, flags&0x10 != 0
		if delay := uint32(r.byte() % 3); pk.ProtocolVersion == 5 {
			pk.Connect.WillProperties.WillDelayInterval = delay
		}
	}
	var buf bytes.Buffer
	if err := brokertest.EncodeClientPacket(&buf, pk); err != nil {
		return
	}
	conn, err := net.DialTimeout("tcp", run.addr, time.Second)
	if err != nil {
		run.t.Fatalf("dial: %v", err) // the listener must take connections throughout
	}
	fc := &fuzzConn{Conn: conn, version: pk.ProtocolVersion, pong: make(chan struct{}, 64), gone: make(chan struct{})}
	run.conns[slot] = fc
	run.readers.Add(1)
	go func() { // reads all the broker sends, so it never waits on us to read
		defer run.readers.Done()
		defer close(fc.gone)
		r := bufio.NewReader(conn)
		var buf []byte
		for {
			first, _, grown, err := mqttwire.ReadPacket(r, buf)
			if err != nil {
				return
			}
			buf = grown
			if first>>4 == packets.Pingresp {
				select {
				case fc.pong <- struct{}{}:
				default:
				}
			}
		}
	}()
	run.write(slot, buf.Bytes())
}

func (run *fuzzRun) write(slot int, b []byte) {
	c := run.conns[slot]
	if c == nil || len(b) == 0 {
		return
	}
	_ = c.SetWriteDeadline(time.Now().Add(fuzzWrite))
	_, _ = c.Write(b) // a closed connection is an answer too
}

func (run *fuzzRun) close(slot int) {
	if c := run.conns[slot]; c != nil {
		_ = c.Close()
		run.conns[slot] = nil
	}
}

// closeAll closes every connection and waits for their readers.
func (run *fuzzRun) closeAll() {
	for slot := range run.conns {
		run.close(slot)
	}
	run.readers.Wait()
}

// checkRoutes fails t unless a fresh client can connect, subscribe and get a message a
// second fresh client publishes, each exchange within promptly.
func checkRoutes(t *testing.T, addr string, round int) {
	t.Helper()
	topic := fmt.Sprintf("check/%d", round)
	sub := rawCheckClient(t, addr, fmt.Sprintf("check-sub-%d", round))
	defer sub.Close()
	r := bufio.NewReader(sub)
	writeCheck(t, sub, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: topic, Qos: 1}}})
	readCheck(t, sub, r, packets.Suback)
	pub := rawCheckClient(t, addr, fmt.Sprintf("check-pub-%d", round))
	defer pub.Close()
	writeCheck(t, pub, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: topic, Payload: []byte("alive")})
	readCheck(t, sub, r, packets.Publish)
}

func rawCheckClient(t *testing.T, addr, id string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, promptly)
	if err != nil {
		t.Fatalf("the broker takes no new connection after the sequence: %v", err)
	}
	writeCheck(t, c, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: id}})
	readCheck(t, c, bufio.NewReader(c), packets.Connack)
	return c
}

func writeCheck(t *testing.T, c net.Conn, pk packets.Packet) {
	t.Helper()
	pk.ProtocolVersion = 5
	var buf bytes.Buffer
	if err := brokertest.EncodeClientPacket(&buf, pk); err != nil {
		t.Fatal(err)
	}
	_ = c.SetWriteDeadline(time.Now().Add(promptly))
	if _, err := c.Write(buf.Bytes()); err != nil {
		t.Fatalf("after the sequence: write %d: %v", pk.FixedHeader.Type, err)
	}
}

// readCheck reads packets until one of type typ, within promptly.
func readCheck(t *testing.T, c net.Conn, r *bufio.Reader, typ byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(promptly))
	for {
		first, _, _, err := mqttwire.ReadPacket(r, nil)
		if err != nil {
			t.Fatalf("after the sequence: no packet type %d: %v", typ, err)
		}
		if first>>4 == typ {
			return
		}
	}
}

// fuzzSeeds are programs written out step by step (operands as execute lists them): a
// kept session that subscribes, leaves and comes back to its messages; a takeover by
// another user; QoS 2 with stray acknowledgements; store requests with KEYNOTIFY on a
// client with receive maximum 1; a delayed will, MQTT 3.1.1 and garbage.
func fuzzSeeds() [][]byte {
	const (
		connect = iota
		sub
		unsub
		pub
		puback
		pubrec
		pubrel
		pubcomp
		disc
		raw
	)
	op := func(slot, kind int) byte { return byte(kind*fuzzConns + slot) }
	return [][]byte{
		{op(0, connect), 0x00, 0, 2, 3, 2, // "a", kept for an hour, receive maximum 2
			op(0, sub), 0, 1, 0, 1, 1, 0, // a/# QoS 1
			op(1, connect), 0x01, 1, 2, 0, 0, // "b", clean
			op(1, pub), 0, 2, 0x01, 1, 3, 'o', 'n', 'e', // QoS 1 to a/b
			op(1, pub), 0, 3, 0x02, 2, 3, 't', 'w', 'o', // QoS 2 to a/b/c
			op(0, disc), 0, 0,
			op(1, pub), 0, 4, 0x05, 0, 1, 'r', // QoS 2 retained to a, "a" away
			op(0, connect), 0x00, 0, 2, 3, 2, // "a" resumes
			op(0, puback), 0, 1, 0,
			op(1, unsub), 0, 5, 1},
		{op(0, connect), 0x21, 0, 2, 3, 1, // u1 as "a"
			op(0, sub), 0, 1, 0, 1, 1, 1,
			op(1, connect), 0x00, 0, 2, 3, 1, // anonymous as "a"
			op(2, connect), 0x41, 1, 2, 0, 0}, // u1 with a wrong password
		{op(0, connect), 0x01, 2, 2, 0, 3,
			op(0, sub), 0, 7, 0, 0, 2, 0, // # QoS 2
			op(0, pub), 0, 7, 0x02, 0, 1, 'x', // QoS 2 under id 7 to a
			op(0, pubrel), 0, 7, 0,
			op(0, pubcomp), 0, 1, 0,
			op(0, pubrec), 0, 9, 2,
			op(0, puback), 0xff, 0xff, 3},
		{op(0, connect), 0x01, 5, 2, 0, 1, // receive maximum 1
			op(0, sub), 0, 1, 0, 7, 1, 0, // clients/# QoS 1
			op(0, pub), 0, 1, 0x11, 3, 0, 4, // SET k v, response to clients/a/r
			op(0, pub), 0, 2, 0x11, 3, 2, 4, // KEYNOTIFY k
			op(0, pub), 0, 3, 0x11, 3, 0, 4, // SET k v: a notification
			op(0, pub), 0, 4, 0x11, 3, 1, 5}, // GET k with a notify-prefix response topic
		{op(0, connect), 0x02 | 0x04 | 0x01, 2, 1, 1, 2, 1, 1, // will on a/b, QoS 1, delay 1 s, expiry 1 s
			op(1, connect), 0x80 | 0x01, 3, 2, 0, 0, // MQTT 3.1.1
			op(1, sub), 0, 1, 0, 0, 1, 0,
			op(0, disc), 1, 0, // with will
			op(2, connect), 0x01, 4, 0, 0, 4, // empty client id, keepalive 0
			op(2, raw), 6, 0x30, 0xff, 0xff, 0xff, 0xff, 0x7f},
	}
}
