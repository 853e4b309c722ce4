package broker

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	mp "github.com/mochi-mqtt/server/v2/packets"
	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
)

// rawClient is an MQTT 5 client written packet by packet, so that a test
// decides when (and whether) each PUBACK goes out.
type rawClient struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialRaw(t *testing.T, addr, id string, receiveMax uint16) *rawClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := &rawClient{t: t, conn: conn, r: bufio.NewReader(conn)}
	c.send(mp.Packet{
		FixedHeader:     mp.FixedHeader{Type: mp.Connect},
		ProtocolVersion: 5,
		Connect: mp.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true,
			Keepalive: 30, ClientIdentifier: id},
		Properties: mp.Properties{ReceiveMaximum: receiveMax},
	})
	if pk := c.read(); pk.FixedHeader.Type != mp.Connack || pk.ReasonCode != 0 {
		t.Fatalf("CONNACK: %+v", pk)
	}
	return c
}

func (c *rawClient) send(pk mp.Packet) {
	c.t.Helper()
	pk.ProtocolVersion = 5
	pk.Mods.AllowResponseInfo = true // mochi drops the Response Topic without it
	var buf bytes.Buffer
	err := brokertest.EncodeClientPacket(&buf, pk)
	if err == nil {
		_, err = c.conn.Write(buf.Bytes())
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// read returns the next packet; it fails the test after waitFor.
func (c *rawClient) read() mp.Packet {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(waitFor))
	var pk mp.Packet
	pk.ProtocolVersion = 5
	hb, err := c.r.ReadByte()
	if err == nil {
		err = pk.FixedHeader.Decode(hb)
	}
	if err == nil {
		pk.FixedHeader.Remaining, _, err = mp.DecodeLength(c.r)
	}
	body := make([]byte, pk.FixedHeader.Remaining)
	if err == nil {
		_, err = io.ReadFull(c.r, body)
	}
	if err == nil {
		switch pk.FixedHeader.Type {
		case mp.Connack:
			err = pk.ConnackDecode(body)
		case mp.Publish:
			err = pk.PublishDecode(body)
		case mp.Puback:
			err = pk.PubackDecode(body)
		case mp.Disconnect:
			err = pk.DisconnectDecode(body)
		}
	}
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return pk
}

// TestNotificationsRespectReceiveMaximum: a client announcing Receive Maximum
// 2 never has more than two notifications unacknowledged ([MQTT-3.3.4-9]);
// each PUBACK lets exactly one more out, in version order, never all ten at
// once.
func TestNotificationsRespectReceiveMaximum(t *testing.T) {
	b := startBroker(t, Options{})
	watcher := dialRaw(t, b.Addr(), "rm-watcher", 2)
	watcher.send(mp.Packet{
		FixedHeader: mp.FixedHeader{Type: mp.Publish, Qos: 1},
		TopicName:   InvokeTopic,
		PacketID:    1,
		Payload:     cmd("KEYNOTIFY", "hot"),
		Properties: mp.Properties{ResponseTopic: "rm-watcher/response", CorrelationData: []byte("c1"),
			User: []mp.UserProperty{{Key: "__ts", Val: "1:0:rm-watcher"}}},
	})
	// The store registered the watch before mochi sent the PUBACK.
	if pk := watcher.read(); pk.FixedHeader.Type != mp.Puback || pk.PacketID != 1 || pk.ReasonCode >= 0x80 {
		t.Fatalf("KEYNOTIFY PUBACK: %+v", pk)
	}

	writer := dial(t, b.Addr(), "rm-writer", dialOptions{})
	const changes = 10
	for i := range changes {
		if p := writer.do(cmd("SET", "hot", fmt.Sprint(i)), req{}); string(p.Payload) != "+OK\r\n" {
			t.Fatalf("SET %d: %q", i, p.Payload)
		}
	}
	var n *notifier
	b.service.mu.Lock()
	for cl, x := range b.service.notifiers {
		if cl.ID == "rm-watcher" {
			n = x
		}
	}
	b.service.mu.Unlock()
	if n == nil {
		t.Fatal("no notifier for the watcher")
	}

	unacked := []uint16{}
	for next := 0; next < changes; next++ {
		if len(unacked) == 2 {
			// Both slots are taken: the notifier must hold the next change
			// until a PUBACK. Once it has taken it (the rest queued behind),
			// a PINGREQ's PINGRESP is the next packet: a notification written
			// meanwhile would come before it on the connection.
			eventually(t, "notifications queued", func() bool { return n.Len() == changes-next-1 })
			watcher.send(mp.Packet{FixedHeader: mp.FixedHeader{Type: mp.Pingreq}})
			if pk := watcher.read(); pk.FixedHeader.Type != mp.Pingresp {
				t.Fatalf("%d notifications unacknowledged, Receive Maximum 2: got %q", len(unacked)+1, pk.Payload)
			}
			watcher.send(mp.Packet{FixedHeader: mp.FixedHeader{Type: mp.Puback}, PacketID: unacked[0]})
			unacked = unacked[1:]
		}
		pk := watcher.read()
		if pk.FixedHeader.Type != mp.Publish || !strings.HasPrefix(pk.TopicName, NotifyTopicPrefix) {
			t.Fatalf("got %+v, want notification %d", pk, next)
		}
		if want := string(cmdNotifySet(fmt.Sprint(next))); string(pk.Payload) != want {
			t.Fatalf("notification %d: %q, want %q", next, pk.Payload, want)
		}
		unacked = append(unacked, pk.PacketID)
		if len(unacked) > 2 {
			t.Fatalf("%d notifications unacknowledged, Receive Maximum 2", len(unacked))
		}
	}
}

func cmdNotifySet(value string) []byte {
	return []byte(fmt.Sprintf("*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$%d\r\n%s\r\n", len(value), value))
}
