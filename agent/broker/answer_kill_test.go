package broker

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/hlc"
)

// The child of TestPersistentChangeAnsweredAfterSIGKILL: a broker with DataDir on the
// address given, its store holding answerBallastKeys persistent keys of answerBallastSize
// bytes (every snapshot rewrites them: a few milliseconds for each, the window in which a
// change is made but not yet on disk), until the parent kills it. It says "ready" when the
// client publishes on answerStartTopic, just before its first request (the service's
// OnPublish hook ends the hooks' turn for a request).
const answerChildEnv = "FACEAGENT_BROKER_ANSWER_CHILD" // "dir addr"

const answerStartTopic = "answer/start"

const (
	answerBallastKeys = 16
	answerBallastSize = 64 << 10
	answerWindow      = 16   // persistent SETs in flight
	answerMax         = 5000 // the stream's length, if the kill does not end it first
)

func init() {
	runBrokerChild(answerChildEnv, answerStartTopic, Options{}, func(b *Broker) error { return loadBallast(b.Store()) })
}

// loadBallast writes the persistent keys that make each snapshot take a while.
func loadBallast(s *statestore.Store) error {
	value := strings.Repeat("x", answerBallastSize)
	clock := hlc.NewClock("ballast")
	for i := range answerBallastKeys {
		out, _ := s.Do(&statestore.Request{Payload: cmd("SET", "ballast/"+strconv.Itoa(i), value), Persist: true,
			Timestamp: clock.Now().String(), HasTimestamp: true}, nil)
		if string(out) != "+OK\r\n" {
			return fmt.Errorf("ballast: %q", out)
		}
	}
	return s.Flush()
}

// persistentSet is request i of the stream: a SET of a key of its own, kept with
// aio-persistence.
func (c *sdkClient) persistentSet(i int, id uint16) packets.Packet {
	pk := c.request(2*i, id) // a SET
	pk.Payload = cmd("SET", "answer/key-"+strconv.Itoa(i), "v-"+strconv.Itoa(i))
	pk.Properties.CorrelationData = fmt.Appendf(nil, "%016d", i)
	pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: "aio-persistence", Val: "true"})
	return pk
}

// A PUBACK of a request that changes a persistent key means the change is on disk and its
// answer is the session's: the broker is SIGKILLed 0.2-0.6 s into a stream of persistent
// SETs (16 in flight) from a client with a kept session; after a restart on the same
// DataDir the resumed session is answered every request the broker had acknowledged and
// the client had no answer to, and each acknowledged change is in the store. The store's
// persistence goroutine answers such a request once its snapshot is fsynced; a PUBACK
// written before that would let a kill in between lose the answer, and the change.
func TestPersistentChangeAnsweredAfterSIGKILL(t *testing.T) {
	for round := range 3 {
		acked, owed := answerKillRound(t, 200*time.Millisecond+time.Duration(round)*200*time.Millisecond)
		if t.Failed() {
			return
		}
		t.Logf("round %d: %d persistent SETs acknowledged before SIGKILL, %d of them answered after the restart", round, acked, owed)
	}
}

// answerKillRound runs the child broker with the stream against it, kills it killAfter
// after the first request and checks the restarted broker; it returns how many requests
// were acknowledged, and how many of those were answered only after the restart.
func answerKillRound(t *testing.T, killAfter time.Duration) (acked, owed int) {
	var (
		mu       sync.Mutex
		pubacked = map[int]bool{}
		answered = map[int]bool{}
	)
	dir, err := killBrokerChild(t, answerChildEnv, 20*time.Second, killAfter, func(addr string) error {
		return persistentStream(addr, func(i int) { mu.Lock(); pubacked[i] = true; mu.Unlock() },
			func(i int) { mu.Lock(); answered[i] = true; mu.Unlock() })
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	if len(pubacked) == 0 || len(pubacked) >= answerMax {
		t.Fatalf("%d of %d requests acknowledged before the kill: the kill came too early or too late to test anything", len(pubacked), answerMax)
	}
	want := map[int]bool{}
	for i := range pubacked {
		if !answered[i] {
			want[i] = true
		}
	}

	b := startBroker(t, Options{DataDir: dir})
	c, present, err := sdkResume(b.Addr(), "sdk")
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if !present {
		t.Fatal("the client's kept session is gone after the restart")
	}
	for missing := len(want); missing > 0; {
		pk, err := c.nextPublish()
		if err != nil {
			var lost []int
			for i := range want {
				lost = append(lost, i)
			}
			t.Fatalf("%d of the %d requests acknowledged and unanswered before the kill not answered after the restart (e.g. %d): %v",
				missing, len(want), lost[0], err)
		}
		i, err := strconv.Atoi(string(pk.Properties.CorrelationData))
		if err != nil || pk.TopicName != c.responseTopic || string(pk.Payload) != "+OK\r\n" {
			t.Fatalf("unexpected PUBLISH on %s, correlation %q, payload %q", pk.TopicName, pk.Properties.CorrelationData, pk.Payload)
		}
		if want[i] {
			delete(want, i)
			missing--
		}
	}
	for i := range pubacked {
		out, _ := b.Store().Do(&statestore.Request{Payload: cmd("GET", "answer/key-"+strconv.Itoa(i))}, nil)
		if v := "v-" + strconv.Itoa(i); string(out) != "$"+strconv.Itoa(len(v))+"\r\n"+v+"\r\n" {
			t.Fatalf("SET %d was acknowledged, yet after the restart its key holds %q", i, out)
		}
	}
	return len(pubacked), len(want)
}

// persistentStream connects the SDK-shaped client with a kept session and sends persistent
// SETs with answerWindow in flight (a request leaves the window once acknowledged and
// answered), reporting each PUBACK and each answer, until the broker goes away or
// answerMax were sent.
func persistentStream(addr string, onAck, onAnswer func(i int)) error {
	c, err := sdkConnect(addr, "sdk")
	if err != nil {
		return err
	}
	defer c.close()
	var (
		mu       sync.Mutex
		awaiting = map[uint16]int{} // packet id of a request waiting for its PUBACK → request number
		acked    = map[int]bool{}
		answered = map[int]bool{}
	)
	if err := c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: answerStartTopic}); err != nil {
		return err
	}
	slots := make(chan struct{}, answerWindow)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			pk, err := c.nextPublishOrPuback()
			if err != nil {
				return // the kill
			}
			mu.Lock()
			switch pk.FixedHeader.Type {
			case packets.Puback:
				if i, ok := awaiting[pk.PacketID]; ok && pk.ReasonCode < 0x80 {
					delete(awaiting, pk.PacketID)
					acked[i] = true
					onAck(i)
					if answered[i] {
						<-slots
					}
				}
			case packets.Publish:
				if i, err := strconv.Atoi(string(pk.Properties.CorrelationData)); err == nil && !answered[i] {
					answered[i] = true
					onAnswer(i)
					if acked[i] {
						<-slots
					}
				}
			}
			mu.Unlock()
		}
	}()
	for i := range answerMax {
		select {
		case slots <- struct{}{}:
		case <-readerDone:
			return nil
		}
		mu.Lock()
		id := c.nextID(awaiting)
		awaiting[id] = i
		mu.Unlock()
		if err := c.send(c.persistentSet(i, id)); err != nil {
			break // the kill
		}
	}
	<-readerDone
	return nil
}

// sdkResume connects id as the SDK does after a lost connection (CleanStart false, no
// SUBSCRIBE: the session has it) and reports whether the session was present.
func sdkResume(addr, id string) (*sdkClient, bool, error) {
	conn, err := dialRetry(addr)
	if err != nil {
		return nil, false, err
	}
	c := &sdkClient{wireClient: conn, id: id, lastID: 1,
		responseTopic: "clients/" + id + "/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/response"}
	err = c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: false, Keepalive: 60, ClientIdentifier: id},
		Properties: packets.Properties{SessionExpiryInterval: 0xFFFFFFFF, SessionExpiryIntervalFlag: true,
			ReceiveMaximum: 65535}})
	var typ byte
	var body []byte
	if err == nil {
		typ, body, err = c.read()
	}
	if err == nil && (typ != packets.Connack || len(body) < 2 || body[1] != 0) {
		err = fmt.Errorf("CONNACK expected, got type %d (% x)", typ, body)
	}
	if err != nil {
		c.close()
		return nil, false, err
	}
	return c, body[0]&1 == 1, nil
}

// nextPublishOrPuback reads the next packet, which must be a PUBLISH (acknowledged at once,
// in the long form, as the SDK does) or a PUBACK, and returns it decoded.
func (c *sdkClient) nextPublishOrPuback() (packets.Packet, error) {
	first, body, err := c.readWithHeader()
	if err != nil {
		return packets.Packet{}, err
	}
	pk := packets.Packet{ProtocolVersion: 5}
	if err := pk.FixedHeader.Decode(first); err != nil {
		return pk, err
	}
	switch pk.FixedHeader.Type {
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Publish:
		if err = pk.PublishDecode(body); err == nil {
			c.wmu.Lock()
			_, err = c.conn.Write([]byte{packets.Puback << 4, 4, byte(pk.PacketID >> 8), byte(pk.PacketID), 0, 0})
			c.wmu.Unlock()
		}
	default:
		err = fmt.Errorf("unexpected packet type %d (% x)", pk.FixedHeader.Type, body)
	}
	return pk, err
}

// nextPublish is nextPublishOrPuback for a PUBLISH only.
func (c *sdkClient) nextPublish() (packets.Packet, error) {
	pk, err := c.nextPublishOrPuback()
	if err == nil && pk.FixedHeader.Type != packets.Publish {
		err = fmt.Errorf("got packet type %d, want a PUBLISH", pk.FixedHeader.Type)
	}
	return pk, err
}
