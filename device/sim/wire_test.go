package sim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/mqttlink"
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

// The terminal's packets are byte for byte the ones the autopaho client it replaced
// wrote, built as paho builds them (paho.Client.Connect, publishQoS12, Subscribe,
// session/state's PUBACK, the pinger, Disconnect).
func TestTerminalPacketsAreWhatPahoWrites(t *testing.T) {
	for _, clean := range []bool{true, false} {
		cp := (&paho.Connect{ClientID: "facesim-2042253", KeepAlive: keepAlive, CleanStart: clean}).Packet()
		cp.ProtocolName, cp.ProtocolVersion = "MQTT", 5
		if got, want := appendConnect(nil, "facesim-2042253", clean, keepAlive), pahoBytes(t, cp); !bytes.Equal(got, want) {
			t.Errorf("CONNECT clean=%v:\n got % x\nwant % x", clean, got, want)
		}
	}
	sp := (&paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "dev/face/2042253", QoS: 1}}}).Packet()
	sp.PacketID = 0x1234
	if got, want := appendSubscribe(nil, 0x1234, "dev/face/2042253"), pahoBytes(t, sp); !bytes.Equal(got, want) {
		t.Errorf("SUBSCRIBE:\n got % x\nwant % x", got, want)
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
		if got, want := appendPublish(nil, "dev/face/2042253/Ack", c.qos, c.id, c.payload), pahoBytes(t, pp); !bytes.Equal(got, want) {
			t.Errorf("PUBLISH qos %d, %d bytes:\n got % x\nwant % x", c.qos, len(c.payload), got, want)
		}
	}
	if got, want := appendPuback(nil, 0xbeef), pahoBytes(t, &packets.Puback{PacketID: 0xbeef, Properties: &packets.Properties{}}); !bytes.Equal(got, want) {
		t.Errorf("PUBACK:\n got % x\nwant % x", got, want)
	}
	if got, want := appendPingreq(nil), pahoBytes(t, packets.NewControlPacket(packets.PINGREQ)); !bytes.Equal(got, want) {
		t.Errorf("PINGREQ:\n got % x\nwant % x", got, want)
	}
	if got, want := appendDisconnect(nil), pahoBytes(t, (&paho.Disconnect{}).Packet()); !bytes.Equal(got, want) {
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
	first, body, _, err := readPacket(bufio.NewReader(bytes.NewReader(wire)), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := parsePublish(first, body)
	if err != nil || p.qos != 1 || p.id != 42 || string(p.topic) != "dev/face/a" || string(p.payload) != `{"x":1}` {
		t.Fatalf("parsed %+v, %v", p, err)
	}
	for n := range len(wire) { // every cut of the packet
		if _, cut, _, err := readPacket(bufio.NewReader(bytes.NewReader(wire[:n])), nil); err == nil {
			t.Fatalf("cut at %d read as a packet: % x", n, cut)
		}
	}
	for n := 0; n < len(body); n++ { // every cut of its remaining part
		if p, err := parsePublish(first, body[:n]); err == nil && len(p.payload) == len(`{"x":1}`) {
			t.Fatalf("remaining part cut at %d parsed whole", n)
		}
	}
	if _, err := parsePublish(0x36, body); err == nil { // QoS 3
		t.Error("QoS 3 accepted")
	}
	for _, c := range []struct {
		in   []byte
		want error
	}{
		{[]byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}, errMalformed}, // a five-byte length
		{[]byte{0x30, 0xff, 0xff, 0xff, 0x7f}, errTooLarge},        // 256 MiB announced
	} {
		if _, _, _, err := readPacket(bufio.NewReader(bytes.NewReader(c.in)), nil); !errors.Is(err, c.want) {
			t.Errorf("% x: %v, want %v", c.in, err, c.want)
		}
	}
	pa := pahoBytes(t, &packets.Puback{PacketID: 9, ReasonCode: 0x87, Properties: &packets.Properties{}})
	_, body, _, _ = readPacket(bufio.NewReader(bytes.NewReader(pa)), nil)
	if id, code, err := parseAck(typePuback, body); id != 9 || code != 0x87 || err != nil {
		t.Errorf("PUBACK: %d %#x %v", id, code, err)
	}
	if id, code, err := parseAck(typePuback, []byte{0, 9}); id != 9 || code != 0 || err != nil { // short form
		t.Errorf("short PUBACK: %d %#x %v", id, code, err)
	}
	sa := pahoBytes(t, &packets.Suback{PacketID: 3, Reasons: []byte{0x80}, Properties: &packets.Properties{}})
	_, body, _, _ = readPacket(bufio.NewReader(bytes.NewReader(sa)), nil)
	if id, code, err := parseAck(typeSuback, body); id != 3 || code != 0x80 || err != nil {
		t.Errorf("SUBACK: %d %#x %v", id, code, err)
	}
	if _, _, err := parseAck(typeSuback, []byte{0, 3, 0}); err == nil {
		t.Error("SUBACK without a reason code accepted")
	}
}

// A terminal whose connection the broker drops connects again, subscribes again and
// takes commands; its packet ids and PUBACK waits belong to the connection they were
// taken on.
func TestMQTTTerminalReconnectsAfterTheBrokerDropsIt(t *testing.T) {
	srv, url := startMochi(t)
	l, err := mqttlink.New(mqttlink.Config{Server: srv})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := StartMQTT(url, []string{"r"}, Options{Seed: 1, AckLatency: Latency{Kind: Fixed, A: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := f.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	a := newAgent(t, l, []string{"r"}, 100*time.Millisecond)
	cmd := func(i int) face.Command {
		return face.Command{MessageID: fmt.Sprintf("m-%d", i), Op: face.AddPerson, Person: face.Person{ID: fmt.Sprint(i)}}
	}
	if err := a.run(ctx, "r", []face.Command{cmd(0)}); err != nil {
		t.Fatal(err)
	}
	m := f.Terminal("r").tr.(*mqttTerm)
	m.mu.Lock()
	old := m.conn
	m.mu.Unlock()
	cl, ok := srv.Clients.Get("facesim-r")
	if !ok {
		t.Fatal("the terminal's client is not in the broker")
	}
	cl.Stop(errors.New("test: dropped by the broker"))
	// The agent resends until the terminal is back, subscribed, and acks.
	if err := a.run(ctx, "r", []face.Command{cmd(1), cmd(2)}); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	now := m.conn
	m.mu.Unlock()
	if now == nil || now == old {
		t.Fatalf("connection after the drop: %p, before: %p", now, old)
	}
	if _, _, err := old.track(true); !errors.Is(err, errConnectionLost) {
		t.Fatalf("the dropped connection still hands out packet ids: %v", err)
	}
	if got := personIDs(f.Terminal("r").Persons()); got != "0,1,2" {
		t.Fatalf("persons %s", got)
	}
}
