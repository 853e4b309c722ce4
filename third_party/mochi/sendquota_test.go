// SPDX-License-Identifier: MIT

package mqtt

// faceagent patch (send quota), (wedged peer): what a client with a Receive Maximum is sent,
// and what a resumed session is sent again.
//
//	go test -race -run 'TestMessageWaitingForSendQuotaStaysInFlight|TestResume|TestResumedSessionSendsEachMessageOnce' github.com/mochi-mqtt/server/v2
//
// faceagent patch (resend once): TestResumeWithoutSendQuotaSendsWaitingMessagesOnce.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// connectSession connects client id with a session kept an hour (MQTT 5; a 3.1.1 client's
// session is kept unless clean), starting a new one if clean, with Receive Maximum
// receiveMax (MQTT 5, 0 for none). It returns the client and whether the CONNACK said a
// session was present.
func connectSession(t *testing.T, s *Server, id string, version byte, clean bool, receiveMax uint16) (*pipePeer, bool) {
	t.Helper()
	srv, cli := net.Pipe()
	go func() { _ = s.EstablishConnection("pipe", srv) }()
	c := &pipePeer{t: t, conn: cli, r: bufio.NewReader(cli), version: version}
	t.Cleanup(func() { _ = cli.Close() })
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: clean, Keepalive: 60, ClientIdentifier: id}}
	if version != 4 {
		pk.Properties = packets.Properties{SessionExpiryInterval: 3600, SessionExpiryIntervalFlag: true,
			ReceiveMaximum: receiveMax}
	}
	c.send(pk)
	body := c.expect(packets.Connack, 0)
	if len(body) < 2 || body[1] != 0 {
		t.Fatalf("CONNACK % x, want success", body)
	}
	return c, body[0]&1 == 1
}

// subscribe subscribes c to filter with QoS 1.
func (c *pipePeer) subscribe(filter string) {
	c.t.Helper()
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: filter, Qos: 1}}})
	c.expect(packets.Suback, 1)
}

// readPublish reads a QoS 1 PUBLISH: its payload, packet id and DUP flag.
func (c *pipePeer) readPublish() (string, uint16, bool) {
	c.t.Helper()
	first, body := c.next()
	if first>>4 != packets.Publish || len(body) < 2 {
		c.t.Fatalf("got %s (% x), want a PUBLISH", packets.PacketNames[first>>4], body)
	}
	n := int(body[0])<<8 | int(body[1])
	if len(body) < 4+n {
		c.t.Fatal("PUBLISH without a packet id")
	}
	id := uint16(body[2+n])<<8 | uint16(body[3+n])
	rest := body[4+n:]
	if c.version != 4 { // skip the properties
		l, shift, i := 0, 0, 0
		for ; i < len(rest); i++ {
			l |= int(rest[i]&0x7f) << shift
			shift += 7
			if rest[i]&0x80 == 0 {
				break
			}
		}
		if i+1+l > len(rest) {
			c.t.Fatalf("PUBLISH with a property length of %d in % x", l, rest)
		}
		rest = rest[i+1+l:]
	}
	return string(rest), id, first&0x08 != 0
}

// puback acknowledges the server's message id.
func (c *pipePeer) puback(id uint16) {
	c.t.Helper()
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id})
}

// A message routed to a client that has no send quota left (its Receive Maximum reached)
// waits in its in-flight set, and is sent when a PUBACK frees quota (sendNextImmediate).
// mochi v2.7.9 then deleted it from the set: its PUBACK found nothing, so the quota it took
// was never given back (a client with Receive Maximum 1 got nothing more), and a session
// resumed before that PUBACK was not sent it again.
func TestMessageWaitingForSendQuotaStaysInFlight(t *testing.T) {
	const id, topic = "quota", "quota/results"
	s := newPipeServer(t)
	c, _ := connectSession(t, s, id, 5, true, 1)
	c.subscribe(topic)
	publish := func(msg string) {
		t.Helper()
		if err := s.Publish(topic, []byte(msg), false, 1); err != nil {
			t.Fatal(err)
		}
	}

	publish("one")
	publish("two") // waits for quota
	got, pid, _ := c.readPublish()
	if got != "one" {
		t.Fatalf("got %q, want one", got)
	}
	c.puback(pid)
	if got, _, _ = c.readPublish(); got != "two" { // sent as the PUBACK freed quota
		t.Fatalf("got %q, want two", got)
	}
	// Not acknowledged: the resumed session gets it again.
	_ = c.conn.Close()
	again, _ := connectSession(t, s, id, 5, false, 1)
	got, pid, dup := again.readPublish()
	if got != "two" || !dup {
		t.Fatalf("resumed session got %q (dup %v), want two again", got, dup)
	}
	again.puback(pid)
	publish("three") // the quota "two" took is back
	if got, _, _ := again.readPublish(); got != "three" {
		t.Fatalf("got %q, want three", got)
	}
}

// keptWithTen leaves the kept session id with ten QoS 1 messages for quota/resume, msg-0 to
// msg-9, in flight: its connection with Receive Maximum 4 read msg-0 to msg-3 (sent, not
// acknowledged) and closed; msg-4 to msg-9 wait for send quota, never sent.
func keptWithTen(t *testing.T, s *Server, id string) []string {
	t.Helper()
	const topic = "quota/resume"
	c, _ := connectSession(t, s, id, 5, true, 4)
	c.subscribe(topic)
	var msgs []string
	for i := 0; i < 10; i++ {
		msgs = append(msgs, fmt.Sprintf("msg-%d", i))
		if err := s.Publish(topic, []byte(msgs[i]), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 4; i++ {
		if got, _, _ := c.readPublish(); got != msgs[i] {
			t.Fatalf("first connection got %q, want %s", got, msgs[i])
		}
	}
	_ = c.conn.Close()
	return msgs
}

// A kept session with ten QoS 1 messages in flight (four sent, six waiting for send quota)
// resumes with Receive Maximum 2. It gets the two oldest again (DUP) and nothing more until
// it acknowledges one, then one more per PUBACK, all ten in order, DUP on the four sent
// before. mochi v2.7.9 resent all ten at once [MQTT-3.3.4-9] (a strict client disconnects
// with 0x93 Receive Maximum exceeded, and gets the same on its next resume), in the map's
// order within a second, and the six waiting ones again with the next free quota.
func TestResumeResendsWithinReceiveMaximum(t *testing.T) {
	s := newPipeServer(t)
	msgs := keptWithTen(t, s, "small")
	c, _ := connectSession(t, s, "small", 5, false, 2)
	var ids []uint16
	next := func(i int) {
		t.Helper()
		got, id, dup := c.readPublish()
		if got != msgs[i] || dup != (i < 4) {
			t.Fatalf("got %q (dup %v), want %s (dup %v)", got, dup, msgs[i], i < 4)
		}
		ids = append(ids, id)
	}
	next(0)
	next(1)
	c.processed() // nothing more with two unacknowledged
	for i := 2; i < len(msgs); i++ {
		c.puback(ids[i-2])
		next(i)
		c.processed()
	}
	for _, id := range ids[len(ids)-2:] {
		c.puback(id)
	}
	c.processed()
	if cl, ok := s.Clients.Get("small"); !ok || cl.State.Inflight.Len() != 0 {
		t.Fatalf("session found %v, messages still in flight, want none", ok)
	}
}

// The same session resumed with Receive Maximum 20 gets all ten at once, in order, DUP only
// on the four sent before, and none of them again.
func TestResumeWithLargerReceiveMaximum(t *testing.T) {
	s := newPipeServer(t)
	msgs := keptWithTen(t, s, "large")
	c, _ := connectSession(t, s, "large", 5, false, 20)
	var ids []uint16
	for i, want := range msgs {
		got, id, dup := c.readPublish()
		if got != want || dup != (i < 4) {
			t.Fatalf("got %q (dup %v), want %s (dup %v)", got, dup, want, i < 4)
		}
		ids = append(ids, id)
	}
	c.processed() // all ten sent, none again
	for _, id := range ids {
		c.puback(id)
	}
	c.processed()
}

// An MQTT 3.1.1 client has no Receive Maximum, so no send quota: its resumed persistent
// session is sent every message in flight again at once, with DUP, as before the
// send-quota patch; in order, which it was not before (messages created in the same second
// came in the map's order: createdBefore).
func TestResume311ResendsEverything(t *testing.T) {
	const id, topic, n = "old", "quota/311", 10
	s := newPipeServer(t)
	c, _ := connectSession(t, s, id, 4, false, 0)
	c.subscribe(topic)
	for i := 0; i < n; i++ {
		if err := s.Publish(topic, []byte(fmt.Sprintf("msg-%d", i)), false, 1); err != nil {
			t.Fatal(err)
		}
	}
	read := func(c *pipePeer, dup bool) []uint16 {
		t.Helper()
		var ids []uint16
		for i := 0; i < n; i++ {
			got, pid, gotDup := c.readPublish()
			if want := fmt.Sprintf("msg-%d", i); got != want || gotDup != dup {
				t.Fatalf("got %q (DUP %v), want %s (DUP %v)", got, gotDup, want, dup)
			}
			ids = append(ids, pid)
		}
		return ids
	}
	read(c, false)
	_ = c.conn.Close()
	again, _ := connectSession(t, s, id, 4, false, 0)
	for _, pid := range read(again, true) {
		again.puback(pid)
	}
	again.processed()
}

// publishOnResume publishes one message, once, as soon as the server has written the
// CONNACK of a resumed session to client id: before it resends the session's messages in
// flight.
type publishOnResume struct {
	HookBase
	srv            *Server
	id, topic, msg string
	done           atomic.Bool
}

func (h *publishOnResume) ID() string           { return "test-publish-on-resume" }
func (h *publishOnResume) Provides(b byte) bool { return b == OnPacketSent }
func (h *publishOnResume) OnPacketSent(cl *Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type == packets.Connack && pk.SessionPresent && cl.ID == h.id && h.done.CompareAndSwap(false, true) {
		_ = h.srv.Publish(h.topic, []byte(h.msg), false, 1)
	}
}

// A message routed to a resumed session's new connection after its CONNACK, before the
// server resends the session's messages in flight, goes out once. mochi v2.7.9 resent every
// message in the set, that one too (with DUP), and its writer sent it again; the client's
// lock in NextPacketID made the window small.
func TestResumedSessionSendsEachMessageOnce(t *testing.T) {
	const topic = "faceagent/gw/results"
	hook := &publishOnResume{id: "back-office", topic: topic, msg: "live"}
	s := newPipeServer(t, hook)
	hook.srv = s

	first, _ := connectSession(t, s, "back-office", 5, true, 0)
	first.subscribe(topic)
	if err := s.Publish(topic, []byte("in-flight"), false, 1); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := first.readPublish(); got != "in-flight" {
		t.Fatalf("got %q, want in-flight", got)
	}
	// Not acknowledged: in flight when the session resumes.
	go func() { _, _ = io.Copy(io.Discard, first.conn) }() // reads the takeover's DISCONNECT

	again, present := connectSession(t, s, "back-office", 5, false, 0)
	if !present {
		t.Fatal("session not resumed")
	}
	seen := map[string]int{}
	var ids []uint16
	for i := 0; i < 2; i++ { // both read before acknowledging: a pipe buffers nothing
		msg, id, dup := again.readPublish()
		seen[msg]++
		if msg == "in-flight" && !dup {
			t.Error("the message in flight was sent again without DUP")
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		again.puback(id)
	}
	if seen["in-flight"] != 1 || seen["live"] != 1 {
		t.Fatalf("after resuming got %v, want in-flight and live once each", seen)
	}
	if err := s.Publish(topic, []byte("after"), false, 1); err != nil {
		t.Fatal(err)
	}
	if msg, _, dup := again.readPublish(); msg != "after" {
		t.Fatalf("got %q (DUP %v) after the resumed session's messages, want after", msg, dup)
	}
}

// A kept session whose messages waited in its in-flight set for the writer (its queue of
// pending writes full) resumes on a connection without send quota (no Receive Maximum: an
// MQTT 5 client that announced none, or MQTT 3.1.1): each message is sent once, and none
// again once acknowledged. takeResend returned the waiting ones without taking them out of
// waiting when the connection had no send quota, so the reader (after the next PUBACK) or
// the writer's drain sent each a second time, under the same packet id, without DUP.
func TestResumeWithoutSendQuotaSendsWaitingMessagesOnce(t *testing.T) {
	for _, version := range []byte{4, 5} {
		t.Run(fmt.Sprint("v", version), func(t *testing.T) {
			const id, topic, n = "held", "held/results", 5
			s := newQuotaServer(t, func(c *Capabilities) {
				c.MaximumClientWritesPendingBytes = 1 // every message beyond the first one queued waits
			})
			c, _ := connectSession(t, s, id, version, false, 0)
			c.subscribe(topic)
			for i := 0; i < n; i++ { // not read: the writer is held up by the first ones, the rest wait
				if err := s.Publish(topic, []byte(fmt.Sprintf("msg-%d", i)), false, 1); err != nil {
					t.Fatal(err)
				}
			}
			if cl, _ := s.Clients.Get(id); !cl.State.Inflight.hasWaiting() {
				t.Fatal("no message waits for the writer")
			}
			_ = c.conn.Close()

			again, present := connectSession(t, s, id, version, false, 0)
			if !present {
				t.Fatal("session not resumed")
			}
			var ids []uint16
			for i := 0; i < n; i++ { // all read before acknowledging: a pipe buffers nothing
				// (DUP on the one or two the old connection's writer took, not on the others)
				got, pid, _ := again.readPublish()
				if want := fmt.Sprintf("msg-%d", i); got != want {
					t.Fatalf("got %q, want %s", got, want)
				}
				ids = append(ids, pid)
			}
			// Not yet acknowledged: a message routed now wakes the writer, which sends what
			// waits for it first.
			if err := s.Publish(topic, []byte("after"), false, 1); err != nil {
				t.Fatal(err)
			}
			got, pid, dup := again.readPublish()
			if got != "after" || dup {
				t.Fatalf("got %q (DUP %v) once the session's messages were sent, want after", got, dup)
			}
			for _, pid := range ids {
				again.puback(pid)
			}
			again.puback(pid)
			again.processed()
			if cl, _ := s.Clients.Get(id); cl.State.Inflight.Len() != 0 {
				t.Fatalf("%d messages still in flight, want none", cl.State.Inflight.Len())
			}
		})
	}
}
