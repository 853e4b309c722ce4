package broker

import (
	"slices"
	"sync/atomic"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Routing after the mochi patch that holds a lone subscriber outside the maps (topics.go,
// "publish allocations"): each client gets one copy of a message whatever number of its
// filters match, with the highest QoS and all its subscription identifiers; a lone client,
// several clients, inline subscriptions, shared subscriptions and No Local as upstream.
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
		t.Run(tc.name, func(t *testing.T) {
			b := startBroker(t, Options{})
			var inlines atomic.Int32
			for i, f := range tc.inline {
				if err := b.Server().Subscribe(f, 100+i, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
					if pk.TopicName == "r/x" {
						inlines.Add(1)
					}
				}); err != nil {
					t.Fatal(err)
				}
			}
			clients := map[string]*wireClient{}
			for id, subs := range tc.subs {
				c, err := dialWire(b.Addr(), id, true)
				if err != nil {
					t.Fatal(err)
				}
				defer c.close()
				clients[id] = c
				for i, s := range append(subs, sub{filter: "marker", qos: 1}) {
					pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: uint16(i + 1),
						Filters: packets.Subscriptions{{Filter: s.filter, Qos: s.qos, NoLocal: s.noLocal}}}
					if s.id > 0 {
						pk.Properties.SubscriptionIdentifier = []int{s.id}
					}
					if err := c.send(pk); err != nil {
						t.Fatal(err)
					}
					if err := c.expect(packets.Suback); err != nil {
						t.Fatal(err)
					}
				}
			}
			pub := clients[tc.from]
			if pub == nil {
				c, err := dialWire(b.Addr(), "pub", true)
				if err != nil {
					t.Fatal(err)
				}
				defer c.close()
				pub = c
			}
			for i, topic := range []string{"r/x", "marker"} {
				if err := pub.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
					TopicName: topic, PacketID: uint16(1000 + i), Payload: []byte(topic)}); err != nil {
					t.Fatal(err)
				}
			}
			for id, c := range clients {
				got := want{}
				for {
					first, body, err := c.readWithHeader()
					if err != nil {
						t.Fatalf("%s: %v", id, err)
					}
					if first>>4 == packets.Puback { // its own, as the publisher
						continue
					}
					if first>>4 != packets.Publish {
						t.Fatalf("%s: packet type %d", id, first>>4)
					}
					qos := first >> 1 & 3
					topic, ids := parsePublish(t, c, body, qos)
					if topic == "marker" {
						break
					}
					got.copies++
					got.qos, got.ids = qos, ids
				}
				if w := tc.want[id]; got.copies != w.copies || got.copies > 0 && (got.qos != w.qos || !slices.Equal(got.ids, w.ids)) {
					t.Errorf("%s got %+v, want %+v", id, got, w)
				}
			}
			if clients[tc.from] == nil {
				// Inline handlers run before the publisher's PUBACK: wait for both.
				for range 2 {
					if err := pub.expect(packets.Puback); err != nil {
						t.Fatal(err)
					}
				}
			}
			if n := int(inlines.Load()); n != tc.inlines {
				t.Errorf("inline deliveries: %d, want %d", n, tc.inlines)
			}
		})
	}
}

// parsePublish returns a PUBLISH's topic and subscription identifiers (sorted), and
// acknowledges it when its QoS is 1.
func parsePublish(t *testing.T, c *wireClient, body []byte, qos byte) (string, []int) {
	t.Helper()
	if len(body) < 2 || len(body) < 2+(int(body[0])<<8|int(body[1])) {
		t.Fatalf("short PUBLISH % x", body)
	}
	n := int(body[0])<<8 | int(body[1])
	topic, rest := string(body[2:2+n]), body[2+n:]
	if qos > 0 {
		if len(rest) < 2 {
			t.Fatalf("PUBLISH without packet id % x", body)
		}
		id := uint16(rest[0])<<8 | uint16(rest[1])
		if err := c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id}); err != nil {
			t.Fatal(err)
		}
		rest = rest[2:]
	}
	if _, ids, ok := parseProps(rest); ok {
		return topic, ids
	}
	t.Fatalf("malformed PUBLISH % x", body)
	return "", nil
}

// parseProps parses an MQTT 5 properties block holding only subscription identifiers and a
// message expiry: its length in bytes and the identifiers, sorted.
func parseProps(b []byte) (int, []int, bool) {
	n, shift, i := 0, 0, 0
	for ; ; i++ {
		if i >= len(b) || i >= 4 {
			return 0, nil, false
		}
		n |= int(b[i]&0x7f) << shift
		shift += 7
		if b[i]&0x80 == 0 {
			break
		}
	}
	props := b[i+1:]
	if n > len(props) {
		return 0, nil, false
	}
	props = props[:n]
	var ids []int
	for len(props) > 0 {
		if props[0] == packets.PropMessageExpiryInterval && len(props) >= 5 { // mochi's maximum
			props = props[5:]
			continue
		}
		if props[0] != packets.PropSubscriptionIdentifier {
			return 0, nil, false
		}
		v, shift, j := 0, 0, 1
		for ; ; j++ {
			if j >= len(props) {
				return 0, nil, false
			}
			v |= int(props[j]&0x7f) << shift
			shift += 7
			if props[j]&0x80 == 0 {
				break
			}
		}
		ids = append(ids, v)
		props = props[j+1:]
	}
	slices.Sort(ids)
	return i + 1 + n, ids, true
}
