package broker

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
)

// A burst of QoS 1 and 2 PUBLISHes read together (one write) to an offline kept session:
// the acknowledgements are held while more of the burst is buffered, then written in the
// order of the PUBLISHes, each only once the record of its message is on disk; a PINGREQ
// in the middle of the burst is answered after the acknowledgements before it; the QoS 2
// flows complete with PUBREL and PUBCOMP.
func TestAcknowledgementsFollowCommitsInOrder(t *testing.T) {
	b := startBroker(t, Options{DataDir: t.TempDir()})
	bo := subscribeKept(t, b.Addr(), "bo", "results", 2)
	bo.close()

	pub, err := dialWire(b.Addr(), "publisher", true)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.close()
	const n, pingAfter = 200, 100
	qos := func(i int) byte { return byte(1 + min(1, i%10/9)) } // every tenth QoS 2
	var burst bytes.Buffer
	for i := range n {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos(i)}, ProtocolVersion: 5,
			TopicName: "results", PacketID: uint16(i + 1), Payload: fmt.Appendf(nil, "m-%d", i)}
		if err := brokertest.EncodeClientPacket(&burst, pk); err != nil {
			t.Fatal(err)
		}
		if i+1 == pingAfter {
			if err := brokertest.EncodeClientPacket(&burst, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pub.conn.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	var pubrecs []uint16
	for i := range n {
		typ, body, err := pub.read()
		if err != nil {
			t.Fatalf("acknowledgement %d: %v", i, err)
		}
		want := byte(packets.Puback)
		if qos(i) == 2 {
			want = packets.Pubrec
		}
		if typ != want || len(body) < 2 || uint16(body[0])<<8|uint16(body[1]) != uint16(i+1) {
			t.Fatalf("acknowledgement %d: type %d, body % x; want type %d for packet id %d", i, typ, body, want, i+1)
		}
		if len(body) > 2 && body[2] >= 0x80 {
			t.Fatalf("acknowledgement %d refused: reason %#x", i, body[2])
		}
		if stored := len(b.sessions.commit.records(kindInflight)); stored < i+1 {
			t.Fatalf("acknowledgement %d written with %d messages on disk", i, stored)
		}
		if want == packets.Pubrec {
			pubrecs = append(pubrecs, uint16(i+1))
		}
		if i+1 == pingAfter {
			if typ, _, err := pub.read(); err != nil || typ != packets.Pingresp {
				t.Fatalf("after acknowledgement %d: type %d, %v; want the PINGRESP", i, typ, err)
			}
		}
	}
	for _, id := range pubrecs {
		pubrel := []byte{packets.Pubrel<<4 | 2, 2, byte(id >> 8), byte(id)}
		if _, err := pub.conn.Write(pubrel); err != nil {
			t.Fatal(err)
		}
		typ, body, err := pub.read()
		if err != nil || typ != packets.Pubcomp || uint16(body[0])<<8|uint16(body[1]) != id {
			t.Fatalf("PUBREL %d: type %d, body % x, %v; want its PUBCOMP", id, typ, body, err)
		}
	}
}

// Acknowledgements wait for storage without deadlocking on the broker's own storing paths:
// a hook that publishes through the inline client inside OnPublish (the agent's intake, the
// relay here) to a kept session, a retained message (stored by its own hook), and a QoS 2
// flow, all to an offline kept session. Each is acknowledged, and the kept session gets
// every message after it reconnects.
func TestAcknowledgementWithStoringHooks(t *testing.T) {
	relay := &relayHook{topic: "tasks", relays: []string{"results/relayed"}}
	b := startBroker(t, Options{DataDir: t.TempDir()}, relay)
	relay.srv = b.Server()
	bo := subscribeKept(t, b.Addr(), "bo", "results/#", 2)
	bo.close()

	pub, err := dialWire(b.Addr(), "publisher", true)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.close()
	steps := []struct {
		pk   packets.Packet
		want byte
	}{
		{packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "tasks", PacketID: 1, Payload: []byte("task")}, packets.Puback},
		{packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true}, TopicName: "results/retained", PacketID: 2, Payload: []byte("kept")}, packets.Puback},
		{packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2}, TopicName: "results/q2", PacketID: 3, Payload: []byte("q2")}, packets.Pubrec},
	}
	for _, st := range steps {
		if err := pub.send(st.pk); err != nil {
			t.Fatal(err)
		}
		typ, body, err := pub.read()
		if err != nil || typ != st.want || len(body) < 2 || body[1] != byte(st.pk.PacketID) {
			t.Fatalf("%s: type %d, body % x, %v; want type %d", st.pk.TopicName, typ, body, err, st.want)
		}
	}
	if _, err := pub.conn.Write([]byte{packets.Pubrel<<4 | 2, 2, 0, 3}); err != nil {
		t.Fatal(err)
	}
	if err := pub.expect(packets.Pubcomp); err != nil {
		t.Fatal(err)
	}
	if stored := len(b.sessions.commit.records(kindInflight)); stored != 3 {
		t.Fatalf("%d messages stored for the kept session, want 3", stored)
	}

	bo, err = dialWire(b.Addr(), "bo", false)
	if err != nil {
		t.Fatal(err)
	}
	defer bo.close()
	got := map[string]bool{}
	for range 3 {
		first, body, err := bo.readWithHeader()
		if err != nil || first>>4 != packets.Publish {
			t.Fatalf("resumed session: %d, %v", first>>4, err)
		}
		topic, _ := parsePublish(t, bo, body, first>>1&3)
		got[topic] = true
	}
	for _, topic := range []string{"results/relayed", "results/retained", "results/q2"} {
		if !got[topic] {
			t.Errorf("the kept session did not get %s (got %v)", topic, got)
		}
	}
}
