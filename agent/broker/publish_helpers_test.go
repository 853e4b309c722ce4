package broker

import (
	"bytes"
	"slices"
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

// parsePublish returns a PUBLISH's topic and subscription identifiers (sorted), and
// acknowledges it when its QoS is 1.
func parsePublish(t *testing.T, c *wireClient, body []byte, qos byte) (string, []int) {
	t.Helper()
	if len(body) < 2 || len(body) < 2+(int(body[0])<<8|int(body[1])) {
		t.Fatalf("short PUBLISH % x", body)
	}
	n := int(body[0])<<8 | int(body[1])
	topic, rest := string(body[2:2+n]), body[2+n:]
	if qos > 0 {
		if len(rest) < 2 {
			t.Fatalf("PUBLISH without packet id % x", body)
		}
		id := uint16(rest[0])<<8 | uint16(rest[1])
		if err := c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id}); err != nil {
			t.Fatal(err)
		}
		rest = rest[2:]
	}
	if _, ids, ok := parseProps(rest); ok {
		return topic, ids
	}
	t.Fatalf("malformed PUBLISH % x", body)
	return "", nil
}

// parseProps parses an MQTT 5 properties block holding only subscription identifiers and a
// message expiry: its length in bytes and the identifiers, sorted.
func parseProps(b []byte) (int, []int, bool) {
	n, shift, i := 0, 0, 0
	for ; ; i++ {
		if i >= len(b) || i >= 4 {
			return 0, nil, false
		}
		n |= int(b[i]&0x7f) << shift
		shift += 7
		if b[i]&0x80 == 0 {
			break
		}
	}
	props := b[i+1:]
	if n > len(props) {
		return 0, nil, false
	}
	props = props[:n]
	var ids []int
	for len(props) > 0 {
		if props[0] == packets.PropMessageExpiryInterval && len(props) >= 5 { // mochi's maximum
			props = props[5:]
			continue
		}
		if props[0] != packets.PropSubscriptionIdentifier {
			return 0, nil, false
		}
		v, shift, j := 0, 0, 1
		for ; ; j++ {
			if j >= len(props) {
				return 0, nil, false
			}
			v |= int(props[j]&0x7f) << shift
			shift += 7
			if props[j]&0x80 == 0 {
				break
			}
		}
		ids = append(ids, v)
		props = props[j+1:]
	}
	slices.Sort(ids)
	return i + 1 + n, ids, true
}
