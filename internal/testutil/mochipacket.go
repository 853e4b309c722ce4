package testutil

import (
	"bytes"
	"fmt"

	"github.com/mochi-mqtt/server/v2/packets"
)

// EncodeClientPacket appends pk's wire form to buf, for tests that play a raw MQTT client
// against the broker: the packet types a client sends (CONNECT, SUBSCRIBE, PUBLISH, PUBACK,
// PUBREL, PINGREQ). mochi has an encoder per type and none that picks by type.
func EncodeClientPacket(buf *bytes.Buffer, pk packets.Packet) error {
	switch pk.FixedHeader.Type {
	case packets.Connect:
		return pk.ConnectEncode(buf)
	case packets.Subscribe:
		return pk.SubscribeEncode(buf)
	case packets.Publish:
		return pk.PublishEncode(buf)
	case packets.Puback:
		return pk.PubackEncode(buf)
	case packets.Pubrel:
		return pk.PubrelEncode(buf)
	case packets.Pingreq:
		return pk.PingreqEncode(buf)
	}
	return fmt.Errorf("testutil: cannot encode client packet type %d", pk.FixedHeader.Type)
}
