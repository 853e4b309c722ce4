package broker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/hlc"
)

// sdkClient is a raw MQTT 5 client shaped like the Azure IoT Operations Go SDK's session
// client talking to the state store: it connects with CleanStart false, a session expiry of
// 0xFFFFFFFF and Receive Maximum 65535, takes its packet ids in sequence (skipping those
// still unacknowledged), sends each request with QoS 1, a response topic, correlation data
// and its timeout in Message Expiry, and acknowledges every PUBLISH with the long form of
// PUBACK (reason code 0 and a property length of 0: 40 04 id 00 00).
type sdkClient struct {
	*wireClient
	id            string
	responseTopic string
	clock         *hlc.Clock
	lastID        uint16 // the last packet id taken
}

// sdkConnect connects id as the SDK does and subscribes to its response topic (No Local,
// QoS 1) with packet id 1.
func sdkConnect(addr, id string) (*sdkClient, error) {
	conn, err := dialRetry(addr)
	if err != nil {
		return nil, err
	}
	c := &sdkClient{wireClient: conn, id: id, clock: hlc.NewClock(id), lastID: 1,
		responseTopic: "clients/" + id + "/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/response"}
	if err := c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: false, Keepalive: 60, ClientIdentifier: id},
		Properties: packets.Properties{SessionExpiryInterval: 0xFFFFFFFF, SessionExpiryIntervalFlag: true,
			ReceiveMaximum: 65535}}); err != nil {
		c.close()
		return nil, err
	}
	if err := c.expect(packets.Connack); err != nil {
		c.close()
		return nil, err
	}
	if err := c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: c.responseTopic, Qos: 1, NoLocal: true}}}); err != nil {
		c.close()
		return nil, err
	}
	if err := c.expect(packets.Suback); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// dialRetry opens a raw connection to addr, trying again until a broker started in another
// process listens there (at most 20 s).
func dialRetry(addr string) (*wireClient, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := dialWireRaw(addr)
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(5 * time.Millisecond) // polling for a child's listener
	}
}

// nextID takes the next packet id in sequence that inUse does not hold (1-65535).
func (c *sdkClient) nextID(inUse map[uint16]int) uint16 {
	for {
		c.lastID++
		if c.lastID == 0 {
			c.lastID = 1
		}
		if _, ok := inUse[c.lastID]; !ok {
			return c.lastID
		}
	}
}

// request is the i-th request of an exchange: SET and GET of one key, alternately.
func (c *sdkClient) request(i int, id uint16) packets.Packet {
	key := "sdk/key-" + strconv.Itoa(i/2)
	payload := cmd("SET", key, "v-"+strconv.Itoa(i/2))
	if i%2 == 1 {
		payload = cmd("GET", key)
	}
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: id,
		TopicName: InvokeTopic, Payload: payload, Mods: packets.Mods{AllowResponseInfo: true}, // mochi encodes a response topic only so
		Properties: packets.Properties{ContentType: "application/octet-stream", ResponseTopic: c.responseTopic,
			CorrelationData: fmt.Appendf(nil, "%016d", i), MessageExpiryInterval: 10,
			User: []packets.UserProperty{{Key: "__srcId", Val: c.id}, {Key: "__protVer", Val: "1.0"},
				{Key: "__ts", Val: c.clock.Now().String()}}}}
}

// wantResponse is the payload the i-th request of an exchange is answered with.
func wantResponse(i int) string {
	if i%2 == 0 {
		return "+OK\r\n"
	}
	v := "v-" + strconv.Itoa(i/2)
	return "$" + strconv.Itoa(len(v)) + "\r\n" + v + "\r\n"
}

// exchangeStats is what an exchange saw.
type exchangeStats struct {
	// sharedIDs counts responses that arrived under the packet id of a request of the
	// client's still waiting for its PUBACK: both directions used the id at once.
	sharedIDs int
}

// exchange sends n requests with up to window of them in flight (sent, and not both
// acknowledged and answered), acknowledges every response, and returns once every request
// is answered and acknowledged. It fails when the broker sends nothing for waitFor while
// something is outstanding, or sends anything unexpected.
func (c *sdkClient) exchange(n, window int) (exchangeStats, error) {
	var (
		mu       sync.Mutex
		awaiting = map[uint16]int{} // packet id of a request waiting for its PUBACK → request number
		acked    = make([]bool, n)
		answered = make([]bool, n)
		stats    exchangeStats
	)
	slots := make(chan struct{}, window)
	done := make(chan error, 1)
	go func() {
		done <- c.readResponses(n, func(i int, sharedID bool) error { // a response to request i
			mu.Lock()
			defer mu.Unlock()
			if answered[i] {
				return fmt.Errorf("request %d answered twice", i)
			}
			answered[i] = true
			if sharedID {
				stats.sharedIDs++
			}
			if acked[i] {
				<-slots
			}
			return nil
		}, func(id uint16) error { // the PUBACK of the request sent under id
			mu.Lock()
			defer mu.Unlock()
			i, ok := awaiting[id]
			if !ok {
				return fmt.Errorf("PUBACK for packet id %d, which no request waits for", id)
			}
			delete(awaiting, id)
			acked[i] = true
			if answered[i] {
				<-slots
			}
			return nil
		}, func(id uint16) bool {
			mu.Lock()
			defer mu.Unlock()
			_, ok := awaiting[id]
			return ok
		})
	}()
	for i := range n {
		select {
		case slots <- struct{}{}:
		case err := <-done:
			return stats, fmt.Errorf("before request %d of %d was sent: %w", i, n, err)
		}
		mu.Lock()
		id := c.nextID(awaiting)
		awaiting[id] = i
		mu.Unlock()
		if err := c.send(c.request(i, id)); err != nil {
			return stats, err
		}
	}
	err := <-done
	mu.Lock()
	defer mu.Unlock()
	return stats, err
}

// readResponses reads until n responses came and every request is acknowledged, answering
// each PUBLISH with a long-form PUBACK; answer and ack account for each, shared reports
// whether a request waits for its PUBACK under a packet id.
func (c *sdkClient) readResponses(n int, answer func(i int, sharedID bool) error, ack func(id uint16) error, shared func(id uint16) bool) error {
	answers, acks := 0, 0
	for answers < n || acks < n {
		first, body, err := c.readWithHeader()
		if err != nil {
			return fmt.Errorf("%d of %d requests answered, %d acknowledged: %w", answers, n, acks, err)
		}
		switch first >> 4 {
		case packets.Publish:
			pk := packets.Packet{ProtocolVersion: 5}
			if err := pk.FixedHeader.Decode(first); err != nil {
				return err
			}
			if err := pk.PublishDecode(body); err != nil {
				return err
			}
			c.wmu.Lock()
			_, err := c.conn.Write([]byte{packets.Puback << 4, 4, byte(pk.PacketID >> 8), byte(pk.PacketID), 0, 0})
			c.wmu.Unlock()
			if err != nil {
				return err
			}
			i, err := strconv.Atoi(string(pk.Properties.CorrelationData))
			if err != nil || i < 0 || i >= n || pk.TopicName != c.responseTopic {
				return fmt.Errorf("unexpected PUBLISH on %s, correlation %q", pk.TopicName, pk.Properties.CorrelationData)
			}
			if string(pk.Payload) != wantResponse(i) {
				return fmt.Errorf("request %d answered %q, want %q", i, pk.Payload, wantResponse(i))
			}
			if err := answer(i, shared(pk.PacketID)); err != nil {
				return err
			}
			answers++
		case packets.Puback:
			if len(body) < 2 || len(body) > 2 && body[2] >= 0x80 {
				return fmt.Errorf("PUBACK % x", body)
			}
			if err := ack(uint16(body[0])<<8 | uint16(body[1])); err != nil {
				return err
			}
			acks++
		default:
			return fmt.Errorf("unexpected packet type %d (% x)", first>>4, body)
		}
	}
	return nil
}

// pingRoundTrip returns once the broker answered a PINGREQ: every packet sent before it is
// processed.
func (c *sdkClient) pingRoundTrip() error {
	if err := c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}}); err != nil {
		return err
	}
	return c.expect(packets.Pingresp)
}

// dialWireRaw opens a raw MQTT connection to addr; the caller sends CONNECT.
func dialWireRaw(addr string) (*wireClient, error) {
	conn, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		return nil, err
	}
	return &wireClient{conn: conn, r: bufio.NewReader(conn)}, nil
}

// A client shaped like the Azure IoT Operations Go SDK (see sdkClient) keeps 8 or 64 state
// store requests in flight on one connection, more in all than the broker's per-client
// limit of messages in flight (its send quota towards the client). The broker numbers its
// responses in step with the client's requests, so a response is often sent under the id
// of a request whose PUBACK is not written yet. With both in one set keyed by packet id
// (mochi v2.7.9), the PUBACK held until the request was routed would overwrite the
// response, the client's PUBACK for the response would find nothing, and that unit of send
// quota would never come back; after max-in-flight such clashes no response would be sent.
func TestSDKShapedClientGetsEveryResponse(t *testing.T) {
	const maxInflight = 200
	for _, window := range []int{8, 64} {
		t.Run(fmt.Sprintf("inflight=%d", window), func(t *testing.T) {
			b := startBroker(t, Options{MaxInflight: maxInflight})
			c, err := sdkConnect(b.Addr(), "sdk")
			if err != nil {
				t.Fatal(err)
			}
			defer c.close()
			const n = 5 * maxInflight
			stats, err := c.exchange(n, window)
			if err != nil {
				t.Fatal(err)
			}
			if stats.sharedIDs == 0 {
				t.Fatal("no response came under the id of a request waiting for its PUBACK: the test proves nothing")
			}
			t.Logf("%d requests, %d responses under the id of a request awaiting its PUBACK", n, stats.sharedIDs)
			if err := c.pingRoundTrip(); err != nil {
				t.Fatal(err)
			}
			cl, ok := b.Server().Clients.Get("sdk")
			if !ok {
				t.Fatal("client gone")
			}
			if got := cl.State.Inflight.Len(); got != 0 {
				t.Fatalf("%d messages in flight to the client after it acknowledged all", got)
			}
		})
	}
}

// storedInflightOf returns the client's in-flight records in b's sessions journal.
func storedInflightOf(t *testing.T, b *Broker, client string) int {
	t.Helper()
	msgs, err := b.sessions.StoredInflightMessages()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range msgs {
		if m.Client == client {
			n++
		}
	}
	return n
}

// checkRestoredSession fails unless the broker restored id's session with nothing in
// flight, in memory and in the journal.
func checkRestoredSession(t *testing.T, b *Broker, id string) {
	t.Helper()
	cl, ok := b.Server().Clients.Get(id)
	if !ok {
		t.Fatalf("session %s not restored", id)
	}
	if got := cl.State.Inflight.Len(); got != 0 {
		t.Errorf("restored session has %d messages in flight, all of which the client acknowledged", got)
	}
	if got := storedInflightOf(t, b, id); got != 0 {
		t.Errorf("the sessions journal holds %d messages in flight to %s, all acknowledged", got, id)
	}
}

// After the SDK-shaped client acknowledged every response, a broker restarted on the same
// DataDir restores its session with nothing in flight. Each response the broker's held
// PUBACK overwrote (see TestSDKShapedClientGetsEveryResponse) kept its record: the
// client's PUBACK found nothing to delete, and the restored session came back with all of
// them in flight (3,016 in the field).
func TestSDKShapedClientRestoredSessionHasNothingInFlight(t *testing.T) {
	dir := t.TempDir()
	b, err := New(&Options{Listen: "127.0.0.1:0", DataDir: dir, AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := sdkConnect(b.Addr(), "sdk")
	if err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	stats, err := c.exchange(600, 8)
	if err == nil {
		err = c.pingRoundTrip()
	}
	c.close()
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if stats.sharedIDs == 0 {
		t.Fatal("no response came under the id of a request waiting for its PUBACK: the test proves nothing")
	}
	checkRestoredSession(t, startBroker(t, Options{DataDir: dir}), "sdk")
}

// The child of TestSDKShapedClientRestoredAfterSIGKILL: a broker with DataDir on the address
// given until the parent kills it (runBrokerChild); it says "ready" when the parent
// publishes on idspaceKillTopic, once everything it is to check is on disk.
const idspaceChildEnv = "FACEAGENT_BROKER_IDSPACE_CHILD" // "dir addr"

const (
	idspaceKillTopic    = "idspace/kill"
	idspaceBarrierTopic = "idspace/barrier"
)

func init() { runBrokerChild(idspaceChildEnv, idspaceKillTopic, Options{}, nil) }

// The same as TestSDKShapedClientRestoredSessionHasNothingInFlight with the broker
// SIGKILLed instead of closed, once the deletions of the acknowledged responses' records
// are on disk: a QoS 1 message to an offline kept session is acknowledged only once its
// record is committed, and the journal commits in order.
func TestSDKShapedClientRestoredAfterSIGKILL(t *testing.T) {
	dir, clientErr := killBrokerChild(t, idspaceChildEnv, 60*time.Second, 10*time.Millisecond, idspaceChildWorkload)
	if clientErr != nil {
		t.Fatal(clientErr)
	}
	checkRestoredSession(t, startBroker(t, Options{DataDir: dir}), "sdk")
}

// idspaceChildWorkload runs the SDK-shaped client's exchange against the child broker at
// addr, waits until its effects are on disk, and has the child say "ready" for the kill.
func idspaceChildWorkload(addr string) error {
	sink, err := dialRetry(addr)
	if err != nil {
		return err
	}
	sink.close()
	sink, err = dialWire(addr, "sink", false)
	if err == nil {
		err = sink.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
			Filters: packets.Subscriptions{{Filter: idspaceBarrierTopic, Qos: 1}}})
	}
	if err == nil {
		err = sink.expect(packets.Suback)
	}
	if sink != nil {
		sink.close() // offline: its kept session stores what is published to it
	}
	if err != nil {
		return fmt.Errorf("sink: %w", err)
	}
	c, err := sdkConnect(addr, "sdk")
	if err != nil {
		return err
	}
	defer c.close()
	stats, err := c.exchange(600, 8)
	if err != nil {
		return err
	}
	if stats.sharedIDs == 0 {
		return errors.New("no response came under the id of a request waiting for its PUBACK: the test proves nothing")
	}
	barrier := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		PacketID: c.nextID(nil), TopicName: idspaceBarrierTopic, Payload: []byte("b")}
	if err := c.send(barrier); err != nil {
		return err
	}
	typ, body, err := c.read()
	if err != nil {
		return err
	}
	if typ != packets.Puback || len(body) < 2 || !bytes.Equal(body[:2], []byte{byte(barrier.PacketID >> 8), byte(barrier.PacketID)}) {
		return fmt.Errorf("barrier: got type %d (% x), want its PUBACK", typ, body)
	}
	return c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: idspaceKillTopic})
}
