package broker

import (
	"bytes"
	"testing"

	mp "github.com/mochi-mqtt/server/v2/packets"
)

// subscribeNoLocal subscribes c to filter at QoS 2 with No Local and waits for its SUBACK.
func subscribeNoLocal(c *rawClient, filter string) {
	c.t.Helper()
	c.send(mp.Packet{FixedHeader: mp.FixedHeader{Type: mp.Subscribe, Qos: 1}, PacketID: 1,
		Filters: mp.Subscriptions{{Filter: filter, Qos: 2, NoLocal: true}}})
	if pk := c.read(); pk.FixedHeader.Type != mp.Suback {
		c.t.Fatalf("packet type %d, want SUBACK", pk.FixedHeader.Type)
	}
}

// publishAcked publishes pk with QoS 1 as packet id 1 and returns what c reads until its
// PUBACK (PUBLISHes to c, acknowledged).
func (c *rawClient) publishAcked(pk mp.Packet) []mp.Packet {
	c.t.Helper()
	pk.FixedHeader = mp.FixedHeader{Type: mp.Publish, Qos: 1}
	pk.PacketID = 1
	c.send(pk)
	var got []mp.Packet
	for {
		in := c.read()
		switch in.FixedHeader.Type {
		case mp.Puback:
			if in.PacketID == 1 {
				return got
			}
		case mp.Publish:
			got = append(got, in)
			c.send(mp.Packet{FixedHeader: mp.FixedHeader{Type: mp.Puback}, PacketID: in.PacketID})
		default:
			c.t.Fatalf("packet type %d", in.FixedHeader.Type)
		}
	}
}

// nextPublish reads the next PUBLISH to c, acknowledges it, and fails on any other packet.
func (c *rawClient) nextPublish() mp.Packet {
	c.t.Helper()
	in := c.read()
	if in.FixedHeader.Type != mp.Publish {
		c.t.Fatalf("packet type %d, want PUBLISH", in.FixedHeader.Type)
	}
	if in.FixedHeader.Qos > 0 {
		c.send(mp.Packet{FixedHeader: mp.FixedHeader{Type: mp.Puback}, PacketID: in.PacketID})
	}
	return in
}

// TestRequestResponseOnOneTopic plays the Paho interoperability suite's
// test_request_response: requester and responder both subscribe to one topic with No
// Local; the request carries that topic as its Response Topic and Correlation Data "334";
// the responder gets both as sent and answers on the response topic with the request's
// properties; the requester gets the answer, once, and neither its own request nor the
// responder its own answer. (The suite publishes the request without waiting for the
// responder's SUBACK, so there a request routed before the subscription reaches no one;
// here each SUBACK is awaited.)
func TestRequestResponseOnOneTopic(t *testing.T) {
	const topic = "client_test5/TopicA"
	b := startBroker(t, Options{})
	requester := dialRaw(t, b.Addr(), "requester", 0)
	responder := dialRaw(t, b.Addr(), "responder", 0)
	subscribeNoLocal(requester, topic)
	subscribeNoLocal(responder, topic)

	own := requester.publishAcked(mp.Packet{TopicName: topic, Payload: []byte("request"),
		Properties: mp.Properties{ResponseTopic: topic, CorrelationData: []byte("334")}})
	if len(own) > 0 {
		t.Fatalf("the requester got %d of its own messages (No Local)", len(own))
	}
	req := responder.nextPublish()
	if string(req.Payload) != "request" || req.Properties.ResponseTopic != topic ||
		!bytes.Equal(req.Properties.CorrelationData, []byte("334")) {
		t.Fatalf("request %q, response topic %q, correlation data %q",
			req.Payload, req.Properties.ResponseTopic, req.Properties.CorrelationData)
	}

	own = responder.publishAcked(mp.Packet{TopicName: req.Properties.ResponseTopic, Payload: []byte("response"),
		Properties: mp.Properties{ResponseTopic: req.Properties.ResponseTopic, CorrelationData: req.Properties.CorrelationData}})
	if len(own) > 0 {
		t.Fatalf("the responder got %d of its own messages (No Local)", len(own))
	}
	resp := requester.nextPublish()
	if string(resp.Payload) != "response" || !bytes.Equal(resp.Properties.CorrelationData, []byte("334")) {
		t.Fatalf("response %q with correlation data %q", resp.Payload, resp.Properties.CorrelationData)
	}

	// Nothing else for either: a barrier each publishes to a topic only it subscribes to
	// comes next, after anything routed to it before.
	for _, c := range []*rawClient{requester, responder} {
		barrier := "barrier/" + c.conn.LocalAddr().String()
		c.send(mp.Packet{FixedHeader: mp.FixedHeader{Type: mp.Subscribe, Qos: 1}, PacketID: 2,
			Filters: mp.Subscriptions{{Filter: barrier, Qos: 0}}})
		if pk := c.read(); pk.FixedHeader.Type != mp.Suback {
			t.Fatalf("packet type %d, want SUBACK", pk.FixedHeader.Type)
		}
		c.send(mp.Packet{FixedHeader: mp.FixedHeader{Type: mp.Publish}, TopicName: barrier, Payload: []byte("barrier")})
		if pk := c.nextPublish(); pk.TopicName != barrier {
			t.Fatalf("extra message on %q: %q", pk.TopicName, pk.Payload)
		}
	}
}
