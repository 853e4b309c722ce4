package broker

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/seed0e69bba5/faceagent/agent/broker/brokertest"
)

// connectReceiveMax connects the kept session id with Receive Maximum max (MQTT 5).
func connectReceiveMax(t *testing.T, addr, id string, clean bool, max uint16) *memClient {
	t.Helper()
	c, _ := connectKeptMax(t, addr, id, clean, max)
	return c
}

// TestMessageWaitingForSendQuotaStaysInFlight: a message routed to a client that has no
// send quota left (its Receive Maximum reached) waits in its in-flight set; mochi sends it
// when a PUBACK frees quota (sendNextImmediate). mochi v2.7.9 then deleted it from the set:
// its PUBACK found nothing, so the quota it took was never given back (a client with
// Receive Maximum 1 got nothing more), and a session resumed before that PUBACK was not
// sent it again (TestPooledPacketsStayApart lost such messages).
func TestMessageWaitingForSendQuotaStaysInFlight(t *testing.T) {
	const id, topic = "quota", "quota/results"
	b := startBroker(t, Options{})
	c := connectReceiveMax(t, b.Addr(), id, true, 1)
	subscribeMem(t, c, topic)
	publish := func(msg string) {
		t.Helper()
		if err := b.Server().Publish(topic, []byte(msg), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	ack := func(c *memClient, pid uint16) {
		c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pid})
	}

	publish("one")
	publish("two") // waits for quota
	got, pid, _ := readPublish(t, c)
	if got != "one" {
		t.Fatalf("got %q, want one", got)
	}
	ack(c, pid)
	got, _, _ = readPublish(t, c) // sent as the PUBACK freed quota
	if got != "two" {
		t.Fatalf("got %q, want two", got)
	}
	// Not acknowledged: the resumed session gets it again.
	c.close()
	again := connectReceiveMax(t, b.Addr(), id, false, 1)
	got, pid, dup := readPublish(t, again)
	if got != "two" || !dup {
		t.Fatalf("resumed session got %q (dup %v), want two again", got, dup)
	}
	ack(again, pid)
	publish("three") // the quota "two" took is back
	if got, _, _ := readPublish(t, again); got != "three" {
		t.Fatalf("got %q, want three", got)
	}
}

// keptWithTen leaves the kept session id with ten QoS 1 messages for quota/resume, msg-0 to
// msg-9, in flight: its connection with Receive Maximum 4 read msg-0 to msg-3 (sent, not
// acknowledged) and closed; msg-4 to msg-9 wait for send quota, never sent.
func keptWithTen(t *testing.T, b *Broker, id string) []string {
	t.Helper()
	const topic = "quota/resume"
	c := connectReceiveMax(t, b.Addr(), id, true, 4)
	subscribeMem(t, c, topic)
	var msgs []string
	for i := range 10 {
		msgs = append(msgs, fmt.Sprintf("msg-%d", i))
		if err := b.Server().Publish(topic, []byte(msgs[i]), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if got, _, _ := readPublish(t, c); got != msgs[i] {
			t.Fatalf("first connection got %q, want %s", got, msgs[i])
		}
	}
	c.close()
	return msgs
}

// nothingPending fails unless the next packet c reads answers a PINGREQ: the broker wrote no
// PUBLISH before it (it handles the PINGREQ after everything it wrote so far).
func nothingPending(t *testing.T, c *memClient, what string) {
	t.Helper()
	c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	expectWithin(t, c, packets.Pingresp, what)
}

// TestResumeResendsWithinReceiveMaximum: a kept session with ten QoS 1 messages in flight
// (four sent, six waiting for send quota) resumes with Receive Maximum 2. It gets the two
// oldest again (DUP) and nothing more until it acknowledges one, then one more per PUBACK,
// all ten in order, DUP on the four sent before. mochi v2.7.9 resent all ten at once
// [MQTT-3.3.4-9] (a strict client disconnects with 0x93 Receive Maximum exceeded, and gets
// the same on its next resume), in the map's order within a second, and the six waiting
// ones again with the next free quota.
func TestResumeResendsWithinReceiveMaximum(t *testing.T) {
	b := startBroker(t, Options{})
	msgs := keptWithTen(t, b, "small")
	c := connectReceiveMax(t, b.Addr(), "small", false, 2)
	var ids []uint16
	next := func(i int) {
		t.Helper()
		got, id, dup := readPublish(t, c)
		if got != msgs[i] || dup != (i < 4) {
			t.Fatalf("got %q (dup %v), want %s (dup %v)", got, dup, msgs[i], i < 4)
		}
		ids = append(ids, id)
	}
	next(0)
	next(1)
	nothingPending(t, c, "Receive Maximum 2 with two unacknowledged")
	for i := 2; i < len(msgs); i++ {
		c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: ids[i-2]})
		next(i)
		nothingPending(t, c, fmt.Sprintf("after PUBACK %d", i-1))
	}
	for _, id := range ids[len(ids)-2:] {
		c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id})
	}
	nothingPending(t, c, "all acknowledged")
	if cl, ok := b.Server().Clients.Get("small"); !ok || cl.State.Inflight.Len() != 0 {
		t.Fatalf("session found %v, messages still in flight, want none", ok)
	}
}

// TestResumeWithLargerReceiveMaximum: the same session resumed with Receive Maximum 20 gets
// all ten at once, in order, DUP only on the four sent before, and none of them again.
func TestResumeWithLargerReceiveMaximum(t *testing.T) {
	b := startBroker(t, Options{})
	msgs := keptWithTen(t, b, "large")
	c := connectReceiveMax(t, b.Addr(), "large", false, 20)
	var ids []uint16
	for i, want := range msgs {
		got, id, dup := readPublish(t, c)
		if got != want || dup != (i < 4) {
			t.Fatalf("got %q (dup %v), want %s (dup %v)", got, dup, want, i < 4)
		}
		ids = append(ids, id)
	}
	nothingPending(t, c, "all ten sent")
	for _, id := range ids {
		c.write(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id})
	}
	nothingPending(t, c, "all acknowledged")
}

// connect311 connects id as an MQTT 3.1.1 client (no Receive Maximum) with a persistent
// session unless clean.
func connect311(t *testing.T, addr, id string, clean bool) *memClient {
	t.Helper()
	c := dialMem(t, addr)
	write311(t, c, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: clean,
			Keepalive: 60, ClientIdentifier: id},
	})
	expectWithin(t, c, packets.Connack, id+"'s CONNACK")
	return c
}

// write311 writes pk to c as an MQTT 3.1.1 client (memClient.write: MQTT 5).
func write311(t *testing.T, c *memClient, pk packets.Packet) {
	t.Helper()
	pk.ProtocolVersion = 4
	var buf bytes.Buffer
	if err := brokertest.EncodeClientPacket(&buf, pk); err != nil {
		t.Fatal(err)
	}
	if _, err := c.conn.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// TestResume311ResendsEverything: an MQTT 3.1.1 client has no Receive Maximum, so no send
// quota: its resumed persistent session is sent every message in flight again at once, with
// DUP, as before the send-quota patch; in order, which it was not before (messages created
// in the same second came in the map's order: createdBefore).
func TestResume311ResendsEverything(t *testing.T) {
	const id, topic = "old", "quota/311"
	b := startBroker(t, Options{})
	c := connect311(t, b.Addr(), id, false)
	write311(t, c, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		PacketID:    1,
		Filters:     packets.Subscriptions{{Filter: topic, Qos: 1}},
	})
	expectWithin(t, c, packets.Suback, "SUBACK")
	const n = 10
	for i := range n {
		if err := b.Server().Publish(topic, []byte(fmt.Sprintf("msg-%d", i)), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	read311 := func(c *memClient, dup bool) []uint16 {
		t.Helper()
		var ids []uint16
		for i := range n {
			first, body, err := readWithin(c, promptly)
			if err != nil || first>>4 != packets.Publish || len(body) < 2 {
				t.Fatalf("got 0x%02x, %v; want a PUBLISH", first, err)
			}
			if first&0x08 != 0 != dup {
				t.Fatalf("PUBLISH %d: DUP %v, want %v", i, !dup, dup)
			}
			l := int(body[0])<<8 | int(body[1])
			if len(body) < 4+l {
				t.Fatal("PUBLISH without a packet id")
			}
			if got, want := string(body[4+l:]), fmt.Sprintf("msg-%d", i); got != want {
				t.Fatalf("got %q, want %s", got, want)
			}
			ids = append(ids, uint16(body[2+l])<<8|uint16(body[3+l]))
		}
		return ids
	}
	read311(c, false)
	c.close()
	again := connect311(t, b.Addr(), id, false)
	for _, pid := range read311(again, true) {
		write311(t, again, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pid})
	}
	write311(t, again, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	expectWithin(t, again, packets.Pingresp, "all acknowledged")
}
