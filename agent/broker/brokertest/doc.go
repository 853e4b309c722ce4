// Package brokertest helps tests that play a raw MQTT client against the embedded broker
// (agent/broker): EncodeClientPacket writes the packets a client sends, with the broker's
// own packet codec. It lives under agent/broker because only agent/broker may import that
// codec (mochi's packets package); tests elsewhere use it through this package.
//
// # Tutorial
//
//	var buf bytes.Buffer
//	err := brokertest.EncodeClientPacket(&buf, packets.Packet{
//		FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 4,
//		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, ClientIdentifier: "c"}})
//	_, err = conn.Write(buf.Bytes())
//
// # Caveats
//
//   - Only the packet types a client sends are encoded; any other type is an error.
package brokertest
