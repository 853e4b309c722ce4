package broker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
)

// The child of TestAcknowledgedPublishSurvivesSIGKILL: a broker with DataDir on the
// address given, until the parent kills it (runBrokerChild); it says "ready" at the first
// message (the stream's, on pubackTopic: the back office only subscribes), so that the kill
// is timed from the start of the stream, however long the parent took to connect (a loaded
// machine).
const pubackChildEnv = "FACEAGENT_BROKER_PUBACK_CHILD" // "dir addr"

func init() { runBrokerChild(pubackChildEnv, pubackTopic, pubackBounds, nil) }

// pubackBounds hold every message the publisher can send (pubackMax, some 850 bytes each
// as a session counts it) in the back office's offline session, before and after the
// restart. With the defaults the session is full after some 4,900 messages (4 MiB) or
// 8,192 (MaxInflight) and drops the rest, acknowledged all the same (the publisher's
// PUBACK is about the publication, not about one subscriber): that is another test's
// matter, and a machine without the race detector gets that far before the kill.
var pubackBounds = Options{MaxSessionBytes: 256 << 20, MaxQueuedBytes: 256 << 20, MaxInflight: pubackMax + 1}

const (
	pubackTopic  = "results/gw-k"
	pubackWindow = 64 // QoS 1 PUBLISHes the publisher keeps unacknowledged
	pubackMax    = 60000
)

// A PUBACK means the message is the broker's: for a subscriber with a kept session that is
// offline, the message is in the sessions journal before its publisher is acknowledged.
// The broker is SIGKILLed 0.3-0.7 s into a stream of QoS 1 messages from a publisher with a
// window of 64 in flight (as an upstream faceagent publishes its results); after a restart
// on the same DataDir the back office's session holds every message that was
// acknowledged. A PUBACK written before the message is routed and committed (mochi's own
// order) would lose acknowledged messages in every run.
func TestAcknowledgedPublishSurvivesSIGKILL(t *testing.T) {
	for round := range 3 {
		acked, got := pubackKillRound(t, 300*time.Millisecond+time.Duration(round)*200*time.Millisecond)
		if t.Failed() {
			return
		}
		t.Logf("round %d: %d messages acknowledged before SIGKILL, %d delivered after the restart", round, acked, got)
	}
}

// pubackKillRound runs the child broker, kills it killAfter after it is ready and checks
// the restarted broker; it returns how many messages were acknowledged and delivered.
func pubackKillRound(t *testing.T, killAfter time.Duration) (acked, delivered int) {
	var (
		mu     sync.Mutex
		ackSet = map[int]bool{}
	)
	dir, pubErr := killBrokerChild(t, pubackChildEnv, 20*time.Second, killAfter, func(addr string) error {
		return pubackPublish(addr, func(n int) {
			mu.Lock()
			ackSet[n] = true
			mu.Unlock()
		})
	})
	mu.Lock()
	defer mu.Unlock()
	if pubErr != nil {
		t.Fatalf("publisher: %v", pubErr)
	}
	if len(ackSet) == 0 {
		t.Fatal("no message was acknowledged before the kill")
	}
	if len(ackSet) >= pubackMax {
		t.Fatalf("all %d messages acknowledged before the kill: the kill came too late to test anything", len(ackSet))
	}

	o := pubackBounds
	o.DataDir = dir
	b := startBroker(t, o)
	// The session's CONNACK waits for an fsync, and so may each read behind the resent
	// messages' acks: on a machine busy with other suites that can take seconds. What
	// this test is about is that nothing is lost, so it waits long.
	bo, err := dialWireWithin(b.Addr(), "bo", false, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer bo.close()
	seen := map[int]bool{}
	for missing := len(ackSet); missing > 0; {
		payload, err := bo.nextPublishAndAck()
		if err != nil {
			var lost []int
			for n := range ackSet {
				if !seen[n] {
					lost = append(lost, n)
				}
			}
			t.Fatalf("%d of %d acknowledged messages lost (e.g. m-%d): %v", len(lost), len(ackSet), lost[0], err)
		}
		n, err := strconv.Atoi(strings.TrimPrefix(string(payload), "m-"))
		if err != nil {
			t.Fatalf("unexpected payload %q", payload)
		}
		if ackSet[n] && !seen[n] {
			missing--
		}
		seen[n] = true
	}
	return len(ackSet), len(seen)
}

// pubackPublish connects the back office's kept session (subscribed, then offline), then
// publishes m-0, m-1, … with QoS 1 and a window of pubackWindow, reporting each message
// acknowledged, until the broker goes away or pubackMax were sent. It dials until the
// broker listens.
func pubackPublish(addr string, onAck func(n int)) error {
	deadline := time.Now().Add(20 * time.Second)
	var bo *wireClient
	for {
		c, err := dialWire(addr, "bo", false)
		if err == nil {
			bo = c
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond) // polling for the child's listener
	}
	err := bo.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: pubackTopic, Qos: 1}}})
	if err == nil {
		err = bo.expect(packets.Suback)
	}
	bo.close() // offline: the session is kept and queues what is published
	if err != nil {
		return fmt.Errorf("subscribing the back office: %w", err)
	}
	pub, err := dialWire(addr, "publisher", true)
	if err != nil {
		return err
	}
	defer pub.close()

	window := make(chan struct{}, pubackWindow)
	var mu sync.Mutex
	inFlight := map[uint16]int{} // packet id → message number
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			typ, body, err := pub.read()
			if err != nil {
				return // the kill
			}
			if typ != packets.Puback || len(body) < 2 {
				continue
			}
			id := uint16(body[0])<<8 | uint16(body[1])
			if len(body) > 2 && body[2] >= 0x80 {
				continue // refused: not the broker's
			}
			mu.Lock()
			n, ok := inFlight[id]
			delete(inFlight, id)
			mu.Unlock()
			if ok {
				onAck(n)
				<-window
			}
		}
	}()
	for n := 0; n < pubackMax; n++ {
		select {
		case window <- struct{}{}:
		case <-readerDone:
			return nil
		}
		id := uint16(n%65535 + 1)
		mu.Lock()
		inFlight[id] = n
		mu.Unlock()
		err := pub.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
			TopicName: pubackTopic, PacketID: id, Payload: fmt.Appendf(nil, "m-%d", n)})
		if err != nil {
			break // the kill
		}
	}
	<-readerDone
	return nil
}

// wireClient is an MQTT 5 client on a raw connection whose methods return errors, so it
// can run outside the test goroutine.
type wireClient struct {
	conn    net.Conn
	r       *bufio.Reader
	wmu     sync.Mutex
	timeout time.Duration // of each read and write
}

// dialWire connects id: a clean session, or a kept one (one hour).
func dialWire(addr, id string, clean bool) (*wireClient, error) {
	return dialWireWithin(addr, id, clean, waitFor)
}

// dialWireWithin is dialWire with timeout for the dial and each read and write after.
func dialWireWithin(addr, id string, clean bool, timeout time.Duration) (*wireClient, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	c := &wireClient{conn: conn, r: bufio.NewReader(conn), timeout: timeout}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: clean, Keepalive: 60, ClientIdentifier: id}}
	if !clean {
		pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 3600, true
	}
	if err := c.send(pk); err != nil {
		c.close()
		return nil, err
	}
	if err := c.expect(packets.Connack); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// subscribeKept connects id with a kept session and subscribes it to filter at qos; the
// caller closes it (leaving the session offline) or goes on using it.
func subscribeKept(t *testing.T, addr, id, filter string, qos byte) *wireClient {
	t.Helper()
	c := pubackConnect(t, addr, id)
	if err := c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: filter, Qos: qos}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.expect(packets.Suback); err != nil {
		t.Fatal(err)
	}
	return c
}

// pubackConnect resumes id's kept session on the test goroutine.
func pubackConnect(t *testing.T, addr, id string) *wireClient {
	t.Helper()
	c, err := dialWire(addr, id, false)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *wireClient) send(pk packets.Packet) error {
	pk.ProtocolVersion = 5
	var buf bytes.Buffer
	if err := brokertest.EncodeClientPacket(&buf, pk); err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(c.within()))
	_, err := c.conn.Write(buf.Bytes())
	return err
}

// read returns the next packet's type and body (after the fixed header).
func (c *wireClient) read() (byte, []byte, error) {
	first, body, err := c.readWithHeader()
	return first >> 4, body, err
}

// readWithHeader returns the next packet's first byte (type and flags) and body.
func (c *wireClient) readWithHeader() (byte, []byte, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(c.within()))
	first, err := c.r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, mul := 0, 1
	for {
		d, err := c.r.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		n += int(d&0x7f) * mul
		if d&0x80 == 0 {
			break
		}
		if mul *= 128; mul > 128*128*128 {
			return 0, nil, errors.New("malformed remaining length")
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return 0, nil, err
	}
	return first, body, nil
}

func (c *wireClient) expect(typ byte) error {
	got, _, err := c.read()
	if err == nil && got != typ {
		err = fmt.Errorf("got packet type %d, want %d", got, typ)
	}
	return err
}

// nextPublishAndAck reads a QoS 1 PUBLISH, acknowledges it and returns its payload.
func (c *wireClient) nextPublishAndAck() ([]byte, error) {
	typ, body, err := c.read()
	if err != nil {
		return nil, err
	}
	if typ != packets.Publish || len(body) < 2 {
		return nil, fmt.Errorf("got packet type %d, want a PUBLISH", typ)
	}
	topicLen := int(body[0])<<8 | int(body[1])
	if len(body) < 2+topicLen+3 {
		return nil, errors.New("short PUBLISH")
	}
	id := uint16(body[2+topicLen])<<8 | uint16(body[3+topicLen])
	if err := c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id}); err != nil {
		return nil, err
	}
	rest := body[4+topicLen:]
	return skipProperties(rest)
}

func (c *wireClient) close() { _ = c.conn.Close() }

// within is the timeout of one read or write.
func (c *wireClient) within() time.Duration {
	if c.timeout == 0 {
		return waitFor
	}
	return c.timeout
}
