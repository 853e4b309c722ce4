package broker

import (
	"bytes"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
)

// readPublish reads a QoS 1 PUBLISH within promptly: its payload, packet id and DUP flag.
func readPublish(t *testing.T, c *memClient) (string, uint16, bool) {
	t.Helper()
	first, body, err := readWithin(c, promptly)
	if err != nil {
		t.Fatalf("no PUBLISH within %v: %v", promptly, err)
	}
	if first>>4 != packets.Publish || len(body) < 2 {
		t.Fatalf("got packet 0x%02x, want a PUBLISH", first)
	}
	n := int(body[0])<<8 | int(body[1])
	if len(body) < 4+n {
		t.Fatal("PUBLISH without a packet id")
	}
	id := uint16(body[2+n])<<8 | uint16(body[3+n])
	return string(publishPayload(t, body[4+n:])), id, first&0x08 != 0
}

// write311 writes pk to c as an MQTT 3.1.1 client (memClient.write: MQTT 5).
func write311(t *testing.T, c *memClient, pk packets.Packet) {
	t.Helper()
	pk.ProtocolVersion = 4
	var buf bytes.Buffer
	if err := brokertest.EncodeClientPacket(&buf, pk); err != nil {
		t.Fatal(err)
	}
	if _, err := c.conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}

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
