package brokertest

import (
	"bytes"
	"fmt"

	"github.com/mochi-mqtt/server/v2/packets"
)

// EncodeClientPacket appends pk's wire form to buf, for tests that play a raw MQTT client
// against the broker: the packet types a client sends (CONNECT, PUBLISH and its
// acknowledgements, SUBSCRIBE, UNSUBSCRIBE, PINGREQ, DISCONNECT, AUTH). mochi has an
// encoder per type and none that picks by type.
func EncodeClientPacket(buf *bytes.Buffer, pk packets.Packet) error {
	switch pk.FixedHeader.Type {
	case packets.Connect:
		return pk.ConnectEncode(buf)
	case packets.Subscribe:
		return pk.SubscribeEncode(buf)
	case packets.Unsubscribe:
		return pk.UnsubscribeEncode(buf)
	case packets.Publish:
		return pk.PublishEncode(buf)
	case packets.Puback:
		return pk.PubackEncode(buf)
	case packets.Pubrec:
		return pk.PubrecEncode(buf)
	case packets.Pubrel:
		return pk.PubrelEncode(buf)
	case packets.Pubcomp:
		return pk.PubcompEncode(buf)
	case packets.Pingreq:
		return pk.PingreqEncode(buf)
	case packets.Disconnect:
		return pk.DisconnectEncode(buf)
	case packets.Auth:
		return pk.AuthEncode(buf)
	}
	return fmt.Errorf("brokertest: cannot encode client packet type %d", pk.FixedHeader.Type)
}
