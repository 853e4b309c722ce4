package mqttwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// pahoBytes is what paho writes for p (the client, the session state and the pinger all
// write packets through WriteTo).
func pahoBytes(t *testing.T, p interface {
	WriteTo(io.Writer) (int64, error)
}) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := p.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The packets are byte for byte the ones paho writes, built as paho builds them
// (paho.Client.Connect, publishQoS12, Subscribe, session/state's PUBACK, the pinger,
// Disconnect).
func TestPacketsAreWhatPahoWrites(t *testing.T) {
	for _, c := range []struct {
		clean  bool
		expiry uint32
	}{{true, 0}, {false, 0}, {true, 3600}, {false, 1 << 31}} {
		conn := &paho.Connect{ClientID: "facesim-2042253", KeepAlive: 20, CleanStart: c.clean}
		if c.expiry != 0 {
			conn.Properties = &paho.ConnectProperties{SessionExpiryInterval: &c.expiry}
		}
		cp := conn.Packet()
		cp.ProtocolName, cp.ProtocolVersion = "MQTT", 5
		if got, want := AppendConnect(nil, "facesim-2042253", c.clean, 20, c.expiry), pahoBytes(t, cp); !bytes.Equal(got, want) {
			t.Errorf("CONNECT %+v:\n got % x\nwant % x", c, got, want)
		}
	}
	for _, c := range []struct {
		user     string
		password []byte
	}{{"t1", []byte("secret")}, {"terminal-2042253", nil}, {"", []byte("x")}, {"t1", []byte{}}} {
		conn := &paho.Connect{ClientID: "facesim-2042253", KeepAlive: 20, CleanStart: true,
			Username: c.user, UsernameFlag: c.user != "", Password: c.password, PasswordFlag: c.password != nil}
		cp := conn.Packet()
		cp.ProtocolName, cp.ProtocolVersion = "MQTT", 5
		if got, want := AppendConnectAuth(nil, "facesim-2042253", c.user, c.password, true, 20, 0), pahoBytes(t, cp); !bytes.Equal(got, want) {
			t.Errorf("CONNECT with credentials %+v:\n got % x\nwant % x", c, got, want)
		}
	}
	for _, filters := range [][]string{{"dev/face/2042253"}, {"faceagent/gw/results", "faceagent/gw/deadletter", "faceagent/gw/devices/+/ack"}} {
		var opts []paho.SubscribeOptions
		for _, f := range filters {
			opts = append(opts, paho.SubscribeOptions{Topic: f, QoS: 1})
		}
		sp := (&paho.Subscribe{Subscriptions: opts}).Packet()
		sp.PacketID = 0x1234
		if got, want := AppendSubscribe(nil, 0x1234, filters...), pahoBytes(t, sp); !bytes.Equal(got, want) {
			t.Errorf("SUBSCRIBE %v:\n got % x\nwant % x", filters, got, want)
		}
	}
	ack := []byte(`{"messageId":"EditPerson-951-1","code":0,"message":""}`)
	big := bytes.Repeat([]byte("x"), 300) // a two-byte remaining length
	for _, c := range []struct {
		qos     byte
		id      uint16
		payload []byte
	}{{1, 7, ack}, {1, 0xfffe, big}, {0, 0, ack}, {1, 1, nil}} {
		pp := (&paho.Publish{Topic: "dev/face/2042253/Ack", QoS: c.qos, Payload: c.payload}).Packet()
		pp.PacketID = c.id
		if got, want := AppendPublish(nil, "dev/face/2042253/Ack", c.qos, c.id, c.payload), pahoBytes(t, pp); !bytes.Equal(got, want) {
			t.Errorf("PUBLISH qos %d, %d bytes:\n got % x\nwant % x", c.qos, len(c.payload), got, want)
		}
	}
	if got, want := AppendPuback(nil, 0xbeef), pahoBytes(t, &packets.Puback{PacketID: 0xbeef, Properties: &packets.Properties{}}); !bytes.Equal(got, want) {
		t.Errorf("PUBACK:\n got % x\nwant % x", got, want)
	}
	if got, want := AppendPingreq(nil), pahoBytes(t, packets.NewControlPacket(packets.PINGREQ)); !bytes.Equal(got, want) {
		t.Errorf("PINGREQ:\n got % x\nwant % x", got, want)
	}
	if got, want := AppendDisconnect(nil), pahoBytes(t, (&paho.Disconnect{}).Packet()); !bytes.Equal(got, want) {
		t.Errorf("DISCONNECT:\n got % x\nwant % x", got, want)
	}
}

// What a broker sends is read back as paho writes it, properties included, and every cut
// or malformed packet is an error, never a panic or a huge allocation.
func TestReadPacketParsesAndRejects(t *testing.T) {
	expiry := uint32(60)
	pp := &packets.Publish{Topic: "dev/face/a", QoS: 1, PacketID: 42, Payload: []byte(`{"x":1}`),
		Properties: &packets.Properties{MessageExpiry: &expiry, User: []packets.User{{Key: "k", Value: "v"}}}}
	wire := pahoBytes(t, pp)
	first, body, _, err := ReadPacket(bufio.NewReader(bytes.NewReader(wire)), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePublish(first, body)
	if err != nil || p.QoS != 1 || p.ID != 42 || string(p.Topic) != "dev/face/a" || string(p.Payload) != `{"x":1}` {
		t.Fatalf("parsed %+v, %v", p, err)
	}
	for n := range len(wire) { // every cut of the packet
		if _, cut, _, err := ReadPacket(bufio.NewReader(bytes.NewReader(wire[:n])), nil); err == nil {
			t.Fatalf("cut at %d read as a packet: % x", n, cut)
		}
	}
	for n := 0; n < len(body); n++ { // every cut of its remaining part
		if p, err := ParsePublish(first, body[:n]); err == nil && len(p.Payload) == len(`{"x":1}`) {
			t.Fatalf("remaining part cut at %d parsed whole", n)
		}
	}
	if _, err := ParsePublish(0x36, body); err == nil { // QoS 3
		t.Error("QoS 3 accepted")
	}
	for _, c := range []struct {
		in   []byte
		want error
	}{
		{[]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrMalformed}, // a five-byte length
		{[]byte{0x30, 0xff, 0xff, 0xff, 0x7f}, ErrTooLarge},        // 256 MiB announced
	} {
		if _, _, _, err := ReadPacket(bufio.NewReader(bytes.NewReader(c.in)), nil); !errors.Is(err, c.want) {
			t.Errorf("% x: %v, want %v", c.in, err, c.want)
		}
	}
	pa := pahoBytes(t, &packets.Puback{PacketID: 9, ReasonCode: 0x87, Properties: &packets.Properties{}})
	_, body, _, _ = ReadPacket(bufio.NewReader(bytes.NewReader(pa)), nil)
	if id, code, err := ParseAck(TypePuback, body); id != 9 || code != 0x87 || err != nil {
		t.Errorf("PUBACK: %d %#x %v", id, code, err)
	}
	if id, code, err := ParseAck(TypePuback, []byte{0, 9}); id != 9 || code != 0 || err != nil { // short form
		t.Errorf("short PUBACK: %d %#x %v", id, code, err)
	}
	sa := pahoBytes(t, &packets.Suback{PacketID: 3, Reasons: []byte{0x80}, Properties: &packets.Properties{}})
	_, body, _, _ = ReadPacket(bufio.NewReader(bytes.NewReader(sa)), nil)
	if id, code, err := ParseAck(TypeSuback, body); id != 3 || code != 0x80 || err != nil {
		t.Errorf("SUBACK: %d %#x %v", id, code, err)
	}
	if _, _, err := ParseAck(TypeSuback, []byte{0, 3, 0}); err == nil {
		t.Error("SUBACK without a reason code accepted")
	}
}
