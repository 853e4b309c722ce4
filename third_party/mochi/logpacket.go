package mqtt

import (
	"log/slog"

	"github.com/mochi-mqtt/server/v2/packets"
)

// packetLog is what a log line says about a packet: its type, packet id, QoS and the size
// of its payload, never what it carries (payload, topic, properties, user name, password).
//
// faceagent patch (no packets in logs): upstream logged whole packets ("pk", *pk), a
// payload as decimal bytes: a refused 1 MB request made a 3 MB line, and a second CONNECT
// logged its password, a state store request its values. It is also a small value, where
// the 800-byte packet copy for the logger sat on the reader's stack.
type packetLog struct {
	kind    byte
	qos     byte
	id      uint16
	payload int
}

// logPacket describes pk for a log line.
func logPacket(pk *packets.Packet) packetLog {
	return packetLog{kind: pk.FixedHeader.Type, qos: pk.FixedHeader.Qos, id: pk.PacketID, payload: len(pk.Payload)}
}

// LogValue implements slog.LogValuer.
func (p packetLog) LogValue() slog.Value {
	attrs := make([]slog.Attr, 1, 4)
	attrs[0] = slog.String("type", packets.PacketNames[p.kind&0x0f])
	if p.id != 0 {
		attrs = append(attrs, slog.Int("id", int(p.id)))
	}
	if p.kind == packets.Publish {
		attrs = append(attrs, slog.Int("qos", int(p.qos)), slog.Int("payload_bytes", p.payload))
	}
	return slog.GroupValue(attrs...)
}
