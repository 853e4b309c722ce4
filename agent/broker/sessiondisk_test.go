package broker

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// connectClean connects a raw MQTT client whose session ends with its connection.
func connectClean(t *testing.T, addr, id string) *memClient {
	t.Helper()
	c := dialMem(t, addr)
	c.write(t, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect:     packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: id},
	})
	if body := expectWithin(t, c, packets.Connack, id+"'s CONNACK"); len(body) < 2 || body[1] != 0 {
		t.Fatalf("%s's CONNACK % x, want success", id, body)
	}
	return c
}

// publishQoS1 sends a QoS 1 PUBLISH with packet id id.
func publishQoS1(t *testing.T, c *memClient, id uint16, topic, payload string, retain bool) {
	t.Helper()
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: retain},
		PacketID: id, TopicName: topic, Payload: []byte(payload)})
}

// readPacket reads c's next packet within promptly.
func readPacket(t *testing.T, c *memClient) (byte, []byte) {
	t.Helper()
	first, body, err := readWithin(c, promptly)
	if err != nil {
		t.Fatalf("no packet within %v: %v", promptly, err)
	}
	return first >> 4, body
}

// storedFilters are the filters of client's stored subscriptions.
func storedFilters(t *testing.T, b *Broker, client string) []string {
	t.Helper()
	var out []string
	for _, v := range b.sessions.commit.records(kindSubscription) {
		var s storage.Subscription
		if err := s.UnmarshalBinary(v); err != nil {
			t.Fatal(err)
		}
		if s.Client == client {
			out = append(out, s.Filter)
		}
	}
	slices.Sort(out)
	return out
}

// TestSessionsJournalSurvivesFullDisk: on a real filesystem that fills up, the broker
// refuses what it cannot store (a publisher to a kept session gets no PUBACK but a
// DISCONNECT, a retained message likewise, a subscription of a kept session SUBACK 0x80,
// the CONNECT of a kept session CONNACK 0x88, MQTT 3.1.1 0x03), says so (SessionsErr),
// logs the failure once, and once space is freed takes records again without a restart;
// after a restart every acknowledged message is delivered and nothing refused is there.
func TestSessionsJournalSurvivesFullDisk(t *testing.T) {
	dir := testutil.SmallFS(t, 4<<20)
	var logs logBuffer
	o := Options{DataDir: dir, SessionsSegmentSize: 256 << 10, Logger: logs.logger()}
	b := startBroker(t, o)
	bo, _ := connectKept(t, b.Addr(), "bo", true)
	subscribeMem(t, bo, "results")
	bo.close() // offline: what comes for it waits in its session, and in the journal
	sub, _ := connectKept(t, b.Addr(), "sub", true)
	subscribeMem(t, sub, "before")

	pub := connectClean(t, b.Addr(), "pub")
	for i := range 10 {
		publishQoS1(t, pub, uint16(i+1), "results", fmt.Sprintf("m-%d", i), false)
		expectWithin(t, pub, packets.Puback, "PUBACK of a message stored")
	}
	publishQoS1(t, pub, 11, "state/kept", "v1", true)
	expectWithin(t, pub, packets.Puback, "PUBACK of a retained message stored")

	free := testutil.FillFS(t, dir)
	// What still fits in the journal's last block is taken; then a message is refused.
	acked := 10
	for ; ; acked++ {
		if acked == 100 {
			t.Fatal("90 messages stored on a full disk")
		}
		publishQoS1(t, pub, uint16(acked+2), "results", fmt.Sprintf("m-%d", acked), false)
		typ, body := readPacket(t, pub)
		if typ == packets.Puback {
			continue
		}
		if typ != packets.Disconnect || len(body) < 1 || body[0] != packets.ErrUnspecifiedError.Code {
			t.Fatalf("packet type %d % x, want PUBACK or DISCONNECT 0x80", typ, body)
		}
		break
	}
	if err := b.SessionsErr(); !errors.Is(err, journal.ErrNoSpace) {
		t.Fatalf("SessionsErr on a full disk: %v", err)
	}
	retainer := connectClean(t, b.Addr(), "retainer") // its session needs no record
	publishQoS1(t, retainer, 1, "state/lost", "x", true)
	expectWithin(t, retainer, packets.Disconnect, "a retained message not stored")

	sub.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 2,
		Filters: packets.Subscriptions{{Filter: "refused/#", Qos: 1}}})
	if body := expectWithin(t, sub, packets.Suback, "SUBACK of a subscription not stored"); !bytes.HasSuffix(body, []byte{packets.ErrUnspecifiedError.Code}) {
		t.Fatalf("SUBACK % x, want reason 0x80", body)
	}
	if _, ok := b.Server().Topics.Subscribers("refused/x").Subscriptions["sub"]; ok {
		t.Fatal("the refused subscription routes messages")
	}
	late := dialMem(t, b.Addr())
	late.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 60, ClientIdentifier: "late"},
		Properties: packets.Properties{SessionExpiryInterval: 3600, SessionExpiryIntervalFlag: true}})
	if body := expectWithin(t, late, packets.Connack, "CONNACK of a session not stored"); len(body) < 2 || body[1] != packets.ErrServerUnavailable.Code {
		t.Fatalf("CONNACK % x, want reason 0x88", body)
	}
	late311 := dialMem(t, b.Addr())
	var buf bytes.Buffer
	if err := brokertest.EncodeClientPacket(&buf, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 60, ClientIdentifier: "late311"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := late311.conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if body := expectWithin(t, late311, packets.Connack, "MQTT 3.1.1 CONNACK of a session not stored"); len(body) < 2 || body[1] != packets.Err3ServerUnavailable.Code {
		t.Fatalf("MQTT 3.1.1 CONNACK % x, want return code 0x03", body)
	}

	free()
	eventually(t, "the sessions journal taking records again", func() bool { return b.SessionsErr() == nil })
	pub = connectClean(t, b.Addr(), "pub")
	total := acked + 10 // the refused one sent again, as a publisher does, and more
	for i := acked; i < total; i++ {
		publishQoS1(t, pub, uint16(i+2), "results", fmt.Sprintf("m-%d", i), false)
		expectWithin(t, pub, packets.Puback, "PUBACK once space is back")
	}
	publishQoS1(t, pub, 40, "state/kept", "v2", true)
	expectWithin(t, pub, packets.Puback, "PUBACK of a retained message once space is back")
	subscribeMem(t, sub, "after")
	if st := b.SessionsStats(); st.Failures != 1 || st.Resets != 1 || st.RefusedWrites == 0 {
		t.Fatalf("stats %+v", st)
	}
	if n := strings.Count(logs.String(), "the sessions journal refuses writes"); n != 1 {
		t.Fatalf("the failure was logged %d times, want once", n)
	}
	pub.close()
	sub.close()
	closeWithin(t, b, waitFor, "after the disk was full")

	b2 := startBroker(t, o)
	if got, want := storedFilters(t, b2, "sub"), []string{"after", "before"}; !slices.Equal(got, want) {
		t.Fatalf("sub's stored subscriptions %v, want %v", got, want)
	}
	for _, id := range []string{"late", "late311"} {
		if b2.sessions.commit.hasClient(id) {
			t.Fatalf("the refused session of %s was stored", id)
		}
	}
	retained := map[string]string{}
	for _, v := range b2.sessions.commit.records(kindRetained) {
		var m storage.Message
		if err := m.UnmarshalBinary(v); err != nil {
			t.Fatal(err)
		}
		retained[m.TopicName] = string(m.Payload)
	}
	if fmt.Sprint(retained) != fmt.Sprint(map[string]string{"state/kept": "v2"}) {
		t.Fatalf("stored retained messages %v, want state/kept=v2 only", retained)
	}
	back, present := connectKept(t, b2.Addr(), "bo", false)
	if !present {
		t.Fatal("the back office's session was not restored")
	}
	seen := map[string]bool{}
	for len(seen) < total {
		seen[string(back.expectPublishAndAck(t))] = true
	}
	for i := range total {
		if !seen[fmt.Sprintf("m-%d", i)] {
			t.Fatalf("acknowledged message m-%d not delivered after the restart (got %v)", i, seen)
		}
	}
}

// refusingStore is a session store (mochi's ConnackWaiter) that cannot store sessions
// while refuse is set.
type refusingStore struct {
	mqtt.HookBase
	refuse atomic.Bool
}

func (*refusingStore) ID() string         { return "test-refusing-store" }
func (*refusingStore) Provides(byte) bool { return false }
func (s *refusingStore) WaitBeforeConnack(*mqtt.Client) error {
	if s.refuse.Load() {
		return errors.New("disk full")
	}
	return nil
}

// TestRefusedSessionKeepsTheEarlierConnection: a CONNECT whose session could not be stored
// gets CONNACK 0x88 before mochi takes over the session: the connection already using the
// client id stays connected, with its subscription.
func TestRefusedSessionKeepsTheEarlierConnection(t *testing.T) {
	store := &refusingStore{}
	b := startBroker(t, Options{}, store)
	first, _ := connectKept(t, b.Addr(), "office", true)
	subscribeMem(t, first, "results")
	store.refuse.Store(true)
	second := dialMem(t, b.Addr())
	second.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Keepalive: 60, ClientIdentifier: "office"},
		Properties: packets.Properties{SessionExpiryInterval: 3600, SessionExpiryIntervalFlag: true}})
	if body := expectWithin(t, second, packets.Connack, "CONNACK of a session not stored"); len(body) < 2 || body[1] != packets.ErrServerUnavailable.Code {
		t.Fatalf("CONNACK % x, want reason 0x88", body)
	}
	if err := b.Server().Publish("results", []byte("r-1"), false, 1); err != nil {
		t.Fatal(err)
	}
	if got := first.expectPublishAndAck(t); string(got) != "r-1" {
		t.Fatalf("the earlier connection got %q, want r-1", got)
	}
	if cl, ok := b.Server().Clients.Get("office"); !ok || cl.Closed() {
		t.Fatal("the earlier connection was taken over by a refused one")
	}
	// The refused connection's end (OnDisconnect, after its CONNACK is written) makes the
	// takeover guard forget it; were it kept, the earlier connection's end would wait for
	// it (settleTimeout).
	g := b.takeover
	eventually(t, "the takeover guard to forget the refused connection", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.settling["office"] == nil && g.incoming["office"] == nil
	})
}
