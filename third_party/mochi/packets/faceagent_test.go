package packets

import (
	"bytes"
	"testing"
)

// validPacketProperties is upstream mochi's table of the properties valid for each packet
// type, which propertyPackets replaces. faceagent patch (encode CPU).
var validPacketProperties = map[byte]map[byte]byte{
	PropPayloadFormat:          {Publish: 1, WillProperties: 1},
	PropMessageExpiryInterval:  {Publish: 1, WillProperties: 1},
	PropContentType:            {Publish: 1, WillProperties: 1},
	PropResponseTopic:          {Publish: 1, WillProperties: 1},
	PropCorrelationData:        {Publish: 1, WillProperties: 1},
	PropSubscriptionIdentifier: {Publish: 1, Subscribe: 1},
	PropSessionExpiryInterval:  {Connect: 1, Connack: 1, Disconnect: 1},
	PropAssignedClientID:       {Connack: 1},
	PropServerKeepAlive:        {Connack: 1},
	PropAuthenticationMethod:   {Connect: 1, Connack: 1, Auth: 1},
	PropAuthenticationData:     {Connect: 1, Connack: 1, Auth: 1},
	PropRequestProblemInfo:     {Connect: 1},
	PropWillDelayInterval:      {WillProperties: 1},
	PropRequestResponseInfo:    {Connect: 1},
	PropResponseInfo:           {Connack: 1},
	PropServerReference:        {Connack: 1, Disconnect: 1},
	PropReasonString:           {Connack: 1, Puback: 1, Pubrec: 1, Pubrel: 1, Pubcomp: 1, Suback: 1, Unsuback: 1, Disconnect: 1, Auth: 1},
	PropReceiveMaximum:         {Connect: 1, Connack: 1},
	PropTopicAliasMaximum:      {Connect: 1, Connack: 1},
	PropTopicAlias:             {Publish: 1},
	PropMaximumQos:             {Connack: 1},
	PropRetainAvailable:        {Connack: 1},
	PropUser:                   {Connect: 1, Connack: 1, Publish: 1, Puback: 1, Pubrec: 1, Pubrel: 1, Pubcomp: 1, Subscribe: 1, Suback: 1, Unsubscribe: 1, Unsuback: 1, Disconnect: 1, Auth: 1, WillProperties: 1},
	PropMaximumPacketSize:      {Connect: 1, Connack: 1},
	PropWildcardSubAvailable:   {Connack: 1},
	PropSubIDAvailable:         {Connack: 1},
	PropSharedSubAvailable:     {Connack: 1},
}

// TestValidPropertyAsMap: faceagent patch (encode CPU): the bit sets say what upstream's
// validPacketProperties says, for every property and packet type byte.
func TestValidPropertyAsMap(t *testing.T) {
	for k := 0; k < 256; k++ {
		for pkt := 0; pkt < 256; pkt++ {
			_, want := validPacketProperties[byte(k)][byte(pkt)]
			if got := validProperty(byte(k), byte(pkt)); got != want {
				t.Fatalf("validProperty(%d, %d) = %v, the map says %v", k, pkt, got, want)
			}
		}
	}
}

// TestDecodeLengthBytesAsDecodeLength: faceagent patch (decode allocations): the same
// values and errors as DecodeLength, and Properties.Decode consumes what it did.
func TestDecodeLengthBytesAsDecodeLength(t *testing.T) {
	inputs := [][]byte{
		{}, {0}, {1}, {0x7f}, {0x80}, {0x80, 0x01}, {0xff, 0x7f}, {0x80, 0x80, 0x01},
		{0xff, 0xff, 0xff, 0x7f}, {0xff, 0xff, 0xff, 0xff, 0x01}, {0x80, 0x80, 0x80, 0x80, 0x80},
		{0xc1, 0x02, 0x09}, {0x80, 0x80},
	}
	for _, in := range inputs {
		n, bu, err := DecodeLength(bytes.NewBuffer(in))
		gn, gbu, gerr := decodeLengthBytes(in)
		if n != gn || bu != gbu || err != gerr {
			t.Errorf("%x: decodeLengthBytes = %d, %d, %v; DecodeLength = %d, %d, %v", in, gn, gbu, gerr, n, bu, err)
		}
	}

	b := bytes.NewBuffer([]byte{2, PropPayloadFormat, 1, 0xee, 0xaa})
	var p Properties
	n, err := p.Decode(Publish, b)
	if err != nil || n != 3 || !p.PayloadFormatFlag || p.PayloadFormat != 1 {
		t.Fatalf("Decode = %d, %v, %+v", n, err, p)
	}
	if !bytes.Equal(b.Bytes(), []byte{PropPayloadFormat, 1, 0xee, 0xaa}) {
		t.Fatalf("Decode left %x in the buffer, want what follows the length", b.Bytes())
	}
}

// BenchmarkEncodeDecode: what the broker does per QoS 1 message with an MQTT 5 peer:
// encode a PUBLISH and a PUBACK, decode a PUBACK with an empty property list.
//
//	go test -run '^$' -bench EncodeDecode -benchmem github.com/mochi-mqtt/server/v2/packets
func BenchmarkEncodeDecode(b *testing.B) {
	pub := Packet{
		FixedHeader:     FixedHeader{Type: Publish, Qos: 1},
		ProtocolVersion: 5, PacketID: 7, TopicName: "faceagent/gw-b/results",
		Payload: []byte(`{"taskId":"t-1","deviceId":"b01","status":"done","tries":1}`),
		Mods:    Mods{AllowResponseInfo: true},
	}
	ack := Packet{FixedHeader: FixedHeader{Type: Puback}, ProtocolVersion: 5, PacketID: 7}
	wire := []byte{0, 7, 0, 0} // a PUBACK's body: id 7, reason 0, no properties
	var buf bytes.Buffer
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf.Reset()
		if err := pub.PublishEncode(&buf); err != nil {
			b.Fatal(err)
		}
		if err := ack.PubackEncode(&buf); err != nil {
			b.Fatal(err)
		}
		in := Packet{FixedHeader: FixedHeader{Type: Puback, Remaining: len(wire)}, ProtocolVersion: 5}
		if err := in.PubackDecode(wire); err != nil {
			b.Fatal(err)
		}
	}
}
