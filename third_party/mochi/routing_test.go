// SPDX-License-Identifier: MIT

package mqtt

// faceagent patch (publish allocations), (No Local): what routing delivers, now that a lone
// subscriber is held outside the maps and No Local belongs to its own subscription.
//
//	go test -race -run 'TestRoutingSubscribersOnce|TestRoutingMergesAroundSharedSubscription' github.com/mochi-mqtt/server/v2

import (
	"bufio"
	"net"
	"sort"
	"sync/atomic"
	"testing"

	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// tcpServer returns a server serving a TCP listener on 127.0.0.1 (a free port), letting
// everyone in, and its address. Its sockets buffer what a client does not read yet, which
// net.Pipe does not.
func tcpServer(t *testing.T, hooks ...Hook) (*Server, string) {
	t.Helper()
	s := newPipeServer(t, hooks...)
	l := listeners.NewTCP(listeners.Config{ID: "tcp", Address: "127.0.0.1:0"})
	if err := s.AddListener(l); err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(); err != nil {
		t.Fatal(err)
	}
	return s, l.Address()
}

// dialPeer connects an MQTT 5 client with a clean session to addr as id.
func dialPeer(t *testing.T, addr, id string) *pipePeer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := &pipePeer{t: t, conn: conn, r: bufio.NewReader(conn)}
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: id}})
	if body := c.expect(packets.Connack, 0); len(body) < 2 || body[1] != 0 {
		t.Fatalf("CONNACK % x, want success", body)
	}
	return c
}

// nextPublish reads the next packet, which must be a PUBLISH, and decodes it.
func (c *pipePeer) nextPublish() packets.Packet {
	c.t.Helper()
	first, body := c.next()
	pk := packets.Packet{ProtocolVersion: 5}
	if err := pk.FixedHeader.Decode(first); err != nil {
		c.t.Fatal(err)
	}
	if pk.FixedHeader.Type != packets.Publish {
		c.t.Fatalf("got %s (% x), want a PUBLISH", packets.PacketNames[pk.FixedHeader.Type], body)
	}
	if err := pk.PublishDecode(body); err != nil {
		c.t.Fatal(err)
	}
	return pk
}

// Each client gets one copy of a message whatever number of its filters match, with the
// highest QoS and all its subscription identifiers; a lone client, several clients, inline
// subscriptions, shared subscriptions and No Local as upstream, but for No Local on a
// subscription of the publisher's beside another of its own without it: upstream merged the
// two (Subscription.Merge ORs No Local) and delivered nothing.
func TestRoutingSubscribersOnce(t *testing.T) {
	type sub struct {
		filter  string
		qos     byte
		id      int
		noLocal bool
	}
	type want struct {
		copies int
		qos    byte
		ids    []int
	}
	for _, tc := range []struct {
		name    string
		subs    map[string][]sub // client → its subscriptions (one SUBSCRIBE each)
		inline  []string         // inline subscriptions' filters
		from    string           // the publisher (a client above, or "pub")
		want    map[string]want
		inlines int // inline deliveries expected
	}{
		{name: "one client", subs: map[string][]sub{"a": {{filter: "r/+", qos: 1}}},
			want: map[string]want{"a": {copies: 1, qos: 1}}},
		{name: "one client, two filters with identifiers", subs: map[string][]sub{"a": {{filter: "r/+", qos: 0, id: 3}, {filter: "r/#", qos: 1, id: 5}}},
			want: map[string]want{"a": {copies: 1, qos: 1, ids: []int{3, 5}}}},
		{name: "one client, two filters, one identifier", subs: map[string][]sub{"a": {{filter: "r/x", qos: 1}, {filter: "+/x", qos: 0, id: 7}}},
			want: map[string]want{"a": {copies: 1, qos: 1, ids: []int{7}}}},
		{name: "one client with an identifier", subs: map[string][]sub{"a": {{filter: "r/x", qos: 1, id: 9}}},
			want: map[string]want{"a": {copies: 1, qos: 1, ids: []int{9}}}},
		{name: "two clients and an inline subscription", subs: map[string][]sub{"a": {{filter: "r/+", qos: 1}}, "b": {{filter: "r/#", qos: 1}, {filter: "r/x", qos: 0}}},
			inline: []string{"r/+"}, inlines: 1,
			want: map[string]want{"a": {copies: 1, qos: 1}, "b": {copies: 1, qos: 1}}},
		{name: "two inline subscriptions", subs: map[string][]sub{"a": {{filter: "r/x", qos: 1}}},
			inline: []string{"r/+", "r/#"}, inlines: 2,
			want: map[string]want{"a": {copies: 1, qos: 1}}},
		{name: "shared and own subscription", subs: map[string][]sub{"a": {{filter: "$share/g/r/x", qos: 1}, {filter: "r/x", qos: 1}}},
			want: map[string]want{"a": {copies: 1, qos: 1}}},
		{name: "no local", subs: map[string][]sub{"a": {{filter: "r/+", qos: 1, noLocal: true}}, "b": {{filter: "r/x", qos: 1}}}, from: "a",
			want: map[string]want{"a": {copies: 0}, "b": {copies: 1, qos: 1}}},
		// No Local [MQTT-3.8.3-3] on each way routing goes: a lone subscriber (held outside
		// the maps), two clients both with No Local (the Paho interoperability suite's
		// test_subscribe_options and test_request_response), beside an inline subscription
		// (the lone client and the lone inline one), beside a shared subscription (the maps
		// the hooks see).
		{name: "no local, lone subscriber", subs: map[string][]sub{"a": {{filter: "r/x", qos: 1, noLocal: true}}}, from: "a",
			want: map[string]want{"a": {copies: 0}}},
		{name: "no local, two clients with it", subs: map[string][]sub{"a": {{filter: "r/x", qos: 1, noLocal: true}}, "b": {{filter: "r/x", qos: 1, noLocal: true}}}, from: "a",
			want: map[string]want{"a": {copies: 0}, "b": {copies: 1, qos: 1}}},
		{name: "no local beside an inline subscription", subs: map[string][]sub{"a": {{filter: "r/x", qos: 1, noLocal: true}}}, from: "a",
			inline: []string{"r/+"}, inlines: 1, want: map[string]want{"a": {copies: 0}}},
		{name: "no local beside a shared subscription", subs: map[string][]sub{"a": {{filter: "r/+", qos: 1, noLocal: true}}, "c": {{filter: "$share/g/r/x", qos: 1}}}, from: "a",
			want: map[string]want{"a": {copies: 0}, "c": {copies: 1, qos: 1}}},
		// No Local belongs to its subscription: another of the publisher's own that matches
		// without it still delivers the message (once, at that subscription's QoS and with
		// its identifier only), a shared one included.
		{name: "no local and an own subscription without it", subs: map[string][]sub{"a": {{filter: "r/x", qos: 1, noLocal: true, id: 4}, {filter: "r/#", qos: 0, id: 6}}}, from: "a",
			want: map[string]want{"a": {copies: 1, qos: 0, ids: []int{6}}}},
		{name: "no local and an own shared subscription", subs: map[string][]sub{"a": {{filter: "r/x", qos: 1, noLocal: true}, {filter: "$share/g/r/x", qos: 1}}}, from: "a",
			want: map[string]want{"a": {copies: 1, qos: 1}}},
	} {
		tc := tc // this module is go 1.21: a loop variable is shared
		t.Run(tc.name, func(t *testing.T) {
			s, addr := tcpServer(t)
			var inlines atomic.Int32
			for i, f := range tc.inline {
				if err := s.Subscribe(f, 100+i, func(_ *Client, _ packets.Subscription, pk packets.Packet) {
					if pk.TopicName == "r/x" {
						inlines.Add(1)
					}
				}); err != nil {
					t.Fatal(err)
				}
			}
			clients := map[string]*pipePeer{}
			for id, subs := range tc.subs {
				c := dialPeer(t, addr, id)
				clients[id] = c
				for i, sb := range append(subs, sub{filter: "marker", qos: 1}) {
					pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: uint16(i + 1),
						Filters: packets.Subscriptions{{Filter: sb.filter, Qos: sb.qos, NoLocal: sb.noLocal}}}
					if sb.id > 0 {
						pk.Properties.SubscriptionIdentifier = []int{sb.id}
					}
					c.send(pk)
					c.expect(packets.Suback, uint16(i+1))
				}
			}
			pub := clients[tc.from]
			if pub == nil {
				pub = dialPeer(t, addr, "pub")
			}
			for i, topic := range []string{"r/x", "marker"} {
				pub.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
					TopicName: topic, PacketID: uint16(1000 + i), Payload: []byte(topic)})
			}
			for id, c := range clients {
				got := want{}
				for {
					first, body := c.next()
					if first>>4 == packets.Puback { // its own, as the publisher
						continue
					}
					pk := packets.Packet{ProtocolVersion: 5}
					if err := pk.FixedHeader.Decode(first); err != nil || pk.FixedHeader.Type != packets.Publish {
						t.Fatalf("%s: packet type %d, %v", id, first>>4, err)
					}
					if err := pk.PublishDecode(body); err != nil {
						t.Fatal(err)
					}
					if pk.FixedHeader.Qos > 0 {
						c.puback(pk.PacketID)
					}
					if pk.TopicName == "marker" {
						break
					}
					got.copies++
					got.qos, got.ids = pk.FixedHeader.Qos, append([]int(nil), pk.Properties.SubscriptionIdentifier...)
					sort.Ints(got.ids)
				}
				w := tc.want[id]
				if got.copies != w.copies || got.copies > 0 && (got.qos != w.qos || !equalInts(got.ids, w.ids)) {
					t.Errorf("%s got %+v, want %+v", id, got, w)
				}
			}
			if clients[tc.from] == nil {
				// Inline handlers run before the publisher's PUBACK: wait for both.
				pub.expect(packets.Puback, 1000)
				pub.expect(packets.Puback, 1001)
			}
			if n := int(inlines.Load()); n != tc.inlines {
				t.Errorf("inline deliveries: %d, want %d", n, tc.inlines)
			}
		})
	}
}

// equalInts reports whether a and b hold the same numbers in the same order (nil and empty
// alike).
func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A client with two subscriptions matching a topic gets its message once, at the higher of
// their QoS [MQTT-3.3.4-2], also when a shared subscription matches the topic between the
// two (routing holds a lone client outside the maps until a second subscriber, or the
// shared subscription's maps, come).
func TestRoutingMergesAroundSharedSubscription(t *testing.T) {
	s, addr := tcpServer(t)
	sub := func(id string, filters packets.Subscriptions) *pipePeer {
		c := dialPeer(t, addr, id)
		c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1, Filters: filters})
		c.expect(packets.Suback, 1)
		return c
	}
	// Gathered in this order for topic t/x: t/x (QoS 0), the share, then t/# (QoS 1).
	x := sub("x", packets.Subscriptions{{Filter: "t/x", Qos: 0}, {Filter: "t/#", Qos: 1}})
	sub("y", packets.Subscriptions{{Filter: "$share/g/t/x", Qos: 1}})
	if err := s.Publish("t/x", []byte("m"), false, 1); err != nil {
		t.Fatal(err)
	}
	if qos := x.nextPublish().FixedHeader.Qos; qos != 1 {
		t.Fatalf("delivered with QoS %d, want 1 (the higher of the two subscriptions)", qos)
	}
}
