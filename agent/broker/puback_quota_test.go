package broker

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
)

// An MQTT 3.1.1 client has no Receive Maximum: it may send more QoS 1 PUBLISHes than the
// broker's in one burst. mochi counts the acknowledgements it has not written against that
// quota and disconnects a client that has none left; upstream wrote each PUBACK before
// reading the next packet, so a 3.1.1 client never ran out. The acknowledgements held while
// more of a burst is buffered (PUBACK after storing) must not run it out either.
func TestHeldAcknowledgementsKeepReceiveQuota(t *testing.T) {
	const receiveMax, n = 8, 40
	b := startBroker(t, Options{ReceiveMaximum: receiveMax})
	conn := rawConnectVersion(t, b.Addr(), "v311-burst", "", 4)
	var burst bytes.Buffer
	for i := range n {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: 4,
			TopicName: "burst", PacketID: uint16(i + 1), Payload: fmt.Appendf(nil, "m-%d", i)}
		if err := brokertest.EncodeClientPacket(&burst, pk); err != nil {
			t.Fatal(err)
		}
	}
	_ = conn.SetDeadline(time.Now().Add(waitFor))
	if _, err := conn.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		typ, body := readRawPacket(t, conn)
		if typ != packets.Puback || len(body) != 2 || uint16(body[0])<<8|uint16(body[1]) != uint16(i+1) {
			t.Fatalf("acknowledgement %d: type %d, body % x; want the PUBACK of packet id %d", i, typ, body, i+1)
		}
	}
}
