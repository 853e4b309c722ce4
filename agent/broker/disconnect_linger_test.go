package broker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
)

// exceedReceiveMaximum connects id with MQTT 5 and writes max+1 QoS 2 PUBLISHes in one go,
// one more than the broker's Receive Maximum allows unacknowledged (the client answers no
// PUBREC yet), and waits until the broker has disconnected it (gone).
func exceedReceiveMaximum(t *testing.T, addr, id string, max int, gone chan *mqtt.Client) *memClient {
	t.Helper()
	c := dialMem(t, addr)
	c.write(t, packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true,
			Keepalive: 60, ClientIdentifier: id},
	})
	expectWithin(t, c, packets.Connack, id+"'s CONNACK")
	var burst bytes.Buffer
	for i := 1; i <= max+1; i++ {
		err := brokertest.EncodeClientPacket(&burst, packets.Packet{
			FixedHeader:     packets.FixedHeader{Type: packets.Publish, Qos: 2},
			ProtocolVersion: 5, TopicName: "rm/over", PacketID: uint16(i), Payload: []byte("m"),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.conn.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	select {
	case cl := <-gone:
		if cl.ID != id {
			t.Fatalf("disconnected %q, want %q", cl.ID, id)
		}
	case <-time.After(waitFor):
		t.Fatalf("%s was not disconnected within %v", id, waitFor)
	}
	return c
}

// writePubrel answers a PUBREC as a client does.
func writePubrel(c *memClient, id uint16) error {
	var buf bytes.Buffer
	err := brokertest.EncodeClientPacket(&buf, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Pubrel, Qos: 1}, ProtocolVersion: 5, PacketID: id,
	})
	if err == nil {
		_ = c.conn.SetWriteDeadline(time.Now().Add(promptly))
		_, err = c.conn.Write(buf.Bytes())
	}
	return err
}

// TestReceiveMaximumExceededIsToldWhy: a client exceeding the broker's Receive Maximum with
// QoS 2 messages, which answers each PUBREC with a PUBREL as it reads them (as clients do;
// the Paho interoperability suite's test_flow_control2), reads every PUBREC and then
// DISCONNECT 0x93 Receive Maximum exceeded [MQTT-3.3.4-8], then the end of the stream; its
// PUBRELs are written without error meanwhile. The broker closed the socket right after the
// DISCONNECT: the first PUBREL drew a reset and the next write failed (broken pipe), so the
// client never learnt why (mochi: DisconnectLinger).
func TestReceiveMaximumExceededIsToldWhy(t *testing.T) {
	const max = 4
	gone := &disconnectHook{ch: make(chan *mqtt.Client, 1)}
	b := startBroker(t, Options{ReceiveMaximum: max}, gone)
	// The broker has disconnected the client before it reads anything: the order is certain.
	c := exceedReceiveMaximum(t, b.Addr(), "rm-exceeder", max, gone.ch)

	recs := 0
	for {
		first, body, err := readWithin(c, promptly)
		if err != nil {
			t.Fatalf("after %d PUBRECs: %v; want DISCONNECT 0x93", recs, err)
		}
		typ := first >> 4
		if typ == packets.Disconnect {
			if len(body) < 1 || body[0] != packets.ErrReceiveMaximum.Code {
				t.Fatalf("DISCONNECT % x, want reason 0x93", body)
			}
			break
		}
		if typ != packets.Pubrec || len(body) < 2 {
			t.Fatalf("packet type %d % x, want PUBREC or DISCONNECT", typ, body)
		}
		recs++
		if err := writePubrel(c, binary.BigEndian.Uint16(body)); err != nil {
			t.Fatalf("PUBREL after %d PUBRECs: %v: the connection was reset before the client read its DISCONNECT", recs, err)
		}
	}
	if recs != max {
		t.Fatalf("%d PUBRECs before the DISCONNECT, want %d", recs, max)
	}
	if _, _, err := readWithin(c, promptly); !errors.Is(err, io.EOF) {
		t.Fatalf("after the DISCONNECT: %v, want the end of the stream", err)
	}
}

// TestLingerAfterDisconnectIsBounded: a client that keeps its connection open and keeps
// sending after its DISCONNECT does not keep it: the broker closes it within
// DisconnectLinger (the client's writes then fail), and answers none of what it sent.
func TestLingerAfterDisconnectIsBounded(t *testing.T) {
	const max = 2
	gone := &disconnectHook{ch: make(chan *mqtt.Client, 1)}
	b := startBroker(t, Options{ReceiveMaximum: max}, gone)
	c := exceedReceiveMaximum(t, b.Addr(), "rm-lingerer", max, gone.ch)
	for {
		first, body, err := readWithin(c, promptly)
		if err != nil {
			t.Fatalf("no DISCONNECT: %v", err)
		}
		if typ := first >> 4; typ == packets.Disconnect {
			break
		} else if typ != packets.Pubrec {
			t.Fatalf("packet type %d % x before the DISCONNECT", typ, body)
		}
	}
	read := time.Now()
	var pingreq bytes.Buffer
	if err := brokertest.EncodeClientPacket(&pingreq, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}}); err != nil {
		t.Fatal(err)
	}
	bound := mqtt.DisconnectLinger + promptly
	for {
		_ = c.conn.SetWriteDeadline(time.Now().Add(promptly))
		if _, err := c.conn.Write(pingreq.Bytes()); err != nil {
			break
		}
		if time.Since(read) > bound {
			t.Fatalf("the connection still takes writes %v after the DISCONNECT (linger %v)", bound, mqtt.DisconnectLinger)
		}
		time.Sleep(20 * time.Millisecond) // the pace of a client sending now and then
	}
	if first, _, err := readWithin(c, promptly); err == nil {
		t.Fatalf("packet type %d after the DISCONNECT", first>>4)
	}
}

// TestCloseDoesNotWaitForLinger: Close ends connections still lingering after a
// DISCONNECT at once, rather than waiting DisconnectLinger for each.
func TestCloseDoesNotWaitForLinger(t *testing.T) {
	const max = 2
	gone := &disconnectHook{ch: make(chan *mqtt.Client, 1)}
	b := startBroker(t, Options{ReceiveMaximum: max}, gone)
	exceedReceiveMaximum(t, b.Addr(), "rm-silent", max, gone.ch)
	closeWithin(t, b, mqtt.DisconnectLinger/2, "with a connection lingering after its DISCONNECT")
}
