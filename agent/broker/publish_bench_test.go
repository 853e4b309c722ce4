package broker

import (
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// BenchmarkTerminalExchange: the broker's part of one task, as the agent drives it with the
// embedded broker — a command published through the inline client to a terminal (one
// network subscriber), the terminal's PUBACK, its ack published with QoS 1 to the agent's
// inline subscription (dev/face/+/Ack, beside dev/face/+/heartbeat), and the broker's
// PUBACK for it. Other terminals are subscribed to their own command topics; the allocations
// are mochi's publish path (routing, packet copies) for two messages:
//
//	go test -run '^$' -bench TerminalExchange -benchmem ./agent/broker/
func BenchmarkTerminalExchange(b *testing.B) {
	br := startBroker(b, Options{TerminalTopic: isCommandTopic})
	srv := br.Server()
	got := make(chan struct{}, 1)
	handler := func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		select {
		case got <- struct{}{}:
		default:
		}
	}
	for _, f := range []string{"dev/face/+/Ack", "dev/face/+/heartbeat"} {
		if err := srv.Subscribe(f, 1, handler); err != nil {
			b.Fatal(err)
		}
	}
	for _, id := range []string{"t02", "t03", "t04", "t05", "t06", "t07", "t08"} {
		defer memConnect(b, br.Addr(), id).close()
	}
	c := memConnect(b, br.Addr(), "t01")
	defer c.close()
	command := []byte(`{"messageId":"AddPerson-951-1494527067538440192","op":"AddPerson","person":{"id":"951"}}`)
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName: "dev/face/t01/Ack", Payload: []byte(`{"messageId":"AddPerson-951-1494527067538440192","code":0,"message":""}`)}
	b.ReportAllocs()
	id := uint16(0)
	for b.Loop() {
		if err := srv.Publish("dev/face/t01", command, false, 1); err != nil {
			b.Fatal(err)
		}
		c.expectPublishAndAck(b)
		id = id%65535 + 1
		ack.PacketID = id
		c.write(b, ack)
		select {
		case <-got:
		case <-time.After(waitFor):
			b.Fatal("the ack did not reach the inline subscription")
		}
		c.expect(b, packets.Puback)
	}
}
