package mqttwire

import (
	"bufio"
	"bytes"
	"errors"
	"testing"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// The packets of the Azure IoT Operations SDK's session client, which writes them through
// paho: byte for byte what paho writes for the same fields.
func TestSessionClientPacketsAreWhatPahoWrites(t *testing.T) {
	expiry, recvMax := uint32(0xFFFFFFFF), uint16(65535)
	conn := &paho.Connect{ClientID: "sdk-client", KeepAlive: 60, Properties: &paho.ConnectProperties{
		SessionExpiryInterval: &expiry, ReceiveMaximum: &recvMax, RequestProblemInfo: true,
		User: paho.UserProperties{{Key: "metriccategory", Value: "aiosdk-go"}},
	}}
	cp := conn.Packet()
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", 5
	got := AppendConnectProps(nil, &Connect{ClientID: "sdk-client", KeepAlive: 60, SessionExpiry: expiry,
		ReceiveMaximum: recvMax, RequestProblemInfo: true, User: []UserProperty{{[]byte("metriccategory"), []byte("aiosdk-go")}}})
	if want := pahoBytes(t, cp); !bytes.Equal(got, want) {
		t.Errorf("CONNECT:\n got % x\nwant % x", got, want)
	}
	conn = &paho.Connect{ClientID: "c", KeepAlive: 5, CleanStart: true, Properties: &paho.ConnectProperties{}}
	cp = conn.Packet()
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", 5
	if got, want := AppendConnectProps(nil, &Connect{ClientID: "c", KeepAlive: 5, CleanStart: true}), pahoBytes(t, cp); !bytes.Equal(got, want) {
		t.Errorf("CONNECT, clean, problem info 0:\n got % x\nwant % x", got, want)
	}

	sp := (&paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "clients/AB/x/response", QoS: 1, NoLocal: true}}}).Packet()
	sp.PacketID = 1
	if got, want := AppendSubscribeOptions(nil, 1, "clients/AB/x/response", 1|SubNoLocal), pahoBytes(t, sp); !bytes.Equal(got, want) {
		t.Errorf("SUBSCRIBE:\n got % x\nwant % x", got, want)
	}

	zero, msgExpiry := byte(0), uint32(10)
	corr := []byte{0: 0xde, 15: 0xad}
	big := bytes.Repeat([]byte("v"), 200)
	for _, dup := range []bool{false, true} {
		pub := (&paho.Publish{QoS: 1, Topic: "statestore/v1/x/command/invoke", Payload: big, Properties: &paho.PublishProperties{
			PayloadFormat: &zero, MessageExpiry: &msgExpiry, ContentType: "application/octet-stream",
			ResponseTopic: "clients/AB/response", CorrelationData: corr,
			User: paho.UserProperties{{Key: "__ts", Value: "000000000000001:00000:n"}, {Key: "$high_priority", Value: ""}},
		}}).Packet()
		pub.PacketID, pub.Duplicate = 0x1234, dup
		got := AppendPublishProps(nil, "statestore/v1/x/command/invoke", 1, dup, 0x1234, &PublishProps{
			WritePayloadFormat: true, MessageExpiry: msgExpiry, ContentType: "application/octet-stream",
			ResponseTopic: "clients/AB/response", CorrelationData: corr,
			User: []UserProperty{{[]byte("__ts"), []byte("000000000000001:00000:n")}, {[]byte("$high_priority"), nil}},
		}, big)
		if want := pahoBytes(t, pub); !bytes.Equal(got, want) {
			t.Errorf("PUBLISH dup=%v:\n got % x\nwant % x", dup, got, want)
		}
	}
	var none uint32
	dp := (&paho.Disconnect{Properties: &paho.DisconnectProperties{SessionExpiryInterval: &none}}).Packet()
	if got, want := AppendDisconnectExpiry(nil, 0), pahoBytes(t, dp); !bytes.Equal(got, want) {
		t.Errorf("DISCONNECT:\n got % x\nwant % x", got, want)
	}
}

// A broker's response and CONNACK, written by paho, read back field by field.
func TestParsePropertiesReadsWhatPahoWrites(t *testing.T) {
	one, exp := byte(1), uint32(99)
	pp := &packets.Publish{Topic: "clients/AB/response", QoS: 1, PacketID: 7, Duplicate: true, Payload: []byte("+OK\r\n"),
		Properties: &packets.Properties{PayloadFormat: &one, MessageExpiry: &exp, ContentType: "application/octet-stream",
			CorrelationData: []byte{1, 2, 3}, User: []packets.User{{Key: "__stat", Value: "200"}, {Key: "__ts", Value: "t"}}}}
	first, body, _, err := ReadPacket(bufio.NewReader(bytes.NewReader(pahoBytes(t, pp))), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePublish(first, body)
	if err != nil || !p.Dup || p.ID != 7 || string(p.Payload) != "+OK\r\n" {
		t.Fatalf("publish %+v, %v", p, err)
	}
	var props Properties
	if err := ParseProperties(p.Props, &props); err != nil {
		t.Fatal(err)
	}
	stat, _ := props.UserValue("__stat")
	ts, _ := props.UserValue("__ts")
	if props.PayloadFormat != 1 || props.MessageExpiry != 99 || string(props.ContentType) != "application/octet-stream" ||
		!bytes.Equal(props.CorrelationData, []byte{1, 2, 3}) || string(stat) != "200" || string(ts) != "t" || len(props.User) != 2 ||
		!props.Present(PropContentType) || props.Present(PropResponseTopic) {
		t.Fatalf("properties %+v", props)
	}
	if _, ok := props.UserValue("__protVer"); ok {
		t.Error("a user property that was not sent")
	}

	rm, ka := uint16(1024), uint16(30)
	ca := &packets.Connack{SessionPresent: true, ReasonCode: 0, Properties: &packets.Properties{ReceiveMaximum: &rm, ServerKeepAlive: &ka, ReasonString: "hi"}}
	_, body, _, err = ReadPacket(bufio.NewReader(bytes.NewReader(pahoBytes(t, ca))), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConnackProps(body)
	if err != nil || !c.SessionPresent || c.Code != 0 {
		t.Fatalf("connack %+v, %v", c, err)
	}
	if err := ParseProperties(c.Props, &props); err != nil || props.ReceiveMaximum != 1024 || string(props.ReasonString) != "hi" || len(props.User) != 0 {
		t.Fatalf("connack properties %+v, %v", props, err)
	}
	if c, err := ParseConnackProps([]byte{0, 0x87}); err != nil || c.SessionPresent || c.Code != 0x87 {
		t.Errorf("short CONNACK: %+v, %v", c, err)
	}

	for _, bad := range [][]byte{
		{0x00},                       // identifier 0
		{0x7f, 1},                    // unknown identifier
		{PropMessageExpiry, 0, 0, 1}, // cut uint32
		{PropContentType, 0, 5, 'a'}, // string past the block
		{PropUser, 0, 1, 'k', 0},     // cut value
		{PropPayloadFormat, 0, PropPayloadFormat, 1}, // twice
		{PropSubscriptionID, 0x80, 0x80, 0x80, 0x80}, // five-byte VBI
	} {
		if err := ParseProperties(bad, &props); !errors.Is(err, ErrMalformed) {
			t.Errorf("% x: %v, want ErrMalformed", bad, err)
		}
	}
	if _, err := ParseConnackProps([]byte{2, 0}); !errors.Is(err, ErrMalformed) {
		t.Error("CONNACK with reserved flags accepted")
	}
}

// Parsing reuses the caller's user property slice: no allocation per packet.
func TestParsePropertiesAllocs(t *testing.T) {
	block := appendUser([]byte{PropContentType, 0, 1, 'x'}, []UserProperty{{[]byte("__stat"), []byte("200")}, {[]byte("a"), []byte("b")}})
	var p Properties
	if n := testing.AllocsPerRun(100, func() {
		if err := ParseProperties(block, &p); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations a parse", n)
	}
}
