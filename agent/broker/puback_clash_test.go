package broker

import (
	"bytes"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
)

// readPublishID reads a QoS 1 PUBLISH without acknowledging it: its payload and packet id.
func readPublishID(t *testing.T, c *wireClient) (string, uint16) {
	t.Helper()
	first, body, err := c.readWithHeader()
	if err != nil || first>>4 != packets.Publish || len(body) < 2 {
		t.Fatalf("got 0x%02x, %v; want a PUBLISH", first, err)
	}
	n := int(body[0])<<8 | int(body[1])
	if len(body) < 2+n+3 {
		t.Fatal("short PUBLISH")
	}
	id := uint16(body[2+n])<<8 | uint16(body[3+n])
	rest := body[4+n:]
	return string(rest[1+int(rest[0]):]), id // properties: none but their length (< 128)
}

// A back office's burst of QoS 1 PUBLISHes in which a later one uses the packet id of a
// result in flight to it: the acknowledgements held for the earlier ones are written
// before that one's, in order, and the result stays in flight (the PUBACK held under the
// same id is the client's, kept apart from it) and is sent again when the session resumes.
func TestHeldAcknowledgementsKeepDisplacedMessage(t *testing.T) {
	b := startBroker(t, Options{})
	bo := subscribeKept(t, b.Addr(), "bo", "results", 1)
	if err := b.Server().Publish("results", []byte("result-1"), false, 1); err != nil {
		t.Fatal(err)
	}
	payload, id := readPublishID(t, bo) // not acknowledged: in flight
	if payload != "result-1" {
		t.Fatalf("got %q, want result-1", payload)
	}

	var burst bytes.Buffer
	for _, pid := range []uint16{id + 100, id} { // the second reuses the result's id
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: 5,
			TopicName: "tasks", PacketID: pid, Payload: []byte("task")}
		if err := brokertest.EncodeClientPacket(&burst, pk); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bo.conn.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []uint16{id + 100, id} {
		typ, body, err := bo.read()
		if err != nil || typ != packets.Puback || len(body) < 2 || uint16(body[0])<<8|uint16(body[1]) != want {
			t.Fatalf("got type %d, body % x, %v; want the PUBACK of %d", typ, body, err, want)
		}
	}
	bo.close()

	again, err := dialWire(b.Addr(), "bo", false)
	if err != nil {
		t.Fatal(err)
	}
	defer again.close()
	if payload, _ := readPublishID(t, again); payload != "result-1" {
		t.Fatalf("the resumed session got %q, want result-1 again", payload)
	}
}
