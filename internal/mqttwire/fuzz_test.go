package mqttwire

import (
	"bufio"
	"bytes"
	"errors"
	"testing"
)

// FuzzReadAndParse feeds arbitrary bytes to ReadPacket and the parser of whatever type the
// packet claims to be. Nothing may panic, a body never exceeds MaxPacket, and a PUBLISH
// that parses splits its body without losing or inventing bytes.
func FuzzReadAndParse(f *testing.F) {
	f.Add(AppendPublish(nil, "faceagent/t1/command", 1, 7, []byte(`{"messageId":"m"}`)))
	f.Add(AppendPublish(nil, "a", 0, 0, nil))
	f.Add(AppendPuback(nil, 9))
	f.Add([]byte{TypeSuback << 4, 4, 0, 1, 0, 1})
	f.Add([]byte{TypeConnack << 4, 3, 0, 0, 0})
	f.Add([]byte{TypePublish<<4 | 6, 0xff, 0xff, 0xff, 0xff, 0x7f}) // QoS 3, five-byte length
	f.Add([]byte{TypePublish << 4, 0x80})                           // cut length
	f.Add(AppendPublishProps(nil, "clients/AB/r", 1, true, 3, &PublishProps{ContentType: "application/octet-stream",
		CorrelationData: []byte{1, 2}, User: []UserProperty{{[]byte("__stat"), []byte("200")}}}, []byte("+OK\r\n")))
	f.Add([]byte{TypeConnack << 4, 6, 1, 0, 3, PropReceiveMaximum, 4, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		var buf []byte
		var props Properties
		for range 8 { // a few packets from one stream, as a client reads them
			first, body, grown, err := ReadPacket(r, buf)
			if err != nil {
				return
			}
			buf = grown
			if len(body) > MaxPacket {
				t.Fatalf("body of %d bytes over MaxPacket", len(body))
			}
			switch typ := first >> 4; typ {
			case TypePublish:
				p, err := ParsePublish(first, body)
				if err != nil {
					continue
				}
				if p.QoS > 2 {
					t.Fatalf("QoS %d accepted", p.QoS)
				}
				if len(p.Topic)+len(p.Props)+len(p.Payload) > len(body) {
					t.Fatalf("topic %d + properties %d + payload %d bytes from a %d-byte body", len(p.Topic), len(p.Props), len(p.Payload), len(body))
				}
				_ = ParseProperties(p.Props, &props)
			case TypePuback, TypeSuback:
				_, _, _ = ParseAck(typ, body)
			case TypeConnack:
				_, _ = ParseConnack(body)
				if c, err := ParseConnackProps(body); err == nil {
					_ = ParseProperties(c.Props, &props)
				}
			}
		}
	})
}

// FuzzParseProperties feeds arbitrary property blocks to ParseProperties: nothing may panic,
// and whatever it returns lies inside the block.
func FuzzParseProperties(f *testing.F) {
	f.Add([]byte{PropContentType, 0, 1, 'x', PropUser, 0, 1, 'k', 0, 1, 'v'})
	f.Add([]byte{PropSubscriptionID, 0x80, 0x01, PropReceiveMaximum, 0, 9})
	f.Add([]byte{PropPayloadFormat, 0, PropPayloadFormat, 1})
	var p Properties
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := ParseProperties(b, &p); err != nil {
			return
		}
		n := len(p.ContentType) + len(p.ResponseTopic) + len(p.CorrelationData) + len(p.ReasonString)
		for _, u := range p.User {
			n += len(u.Key) + len(u.Val)
		}
		if n > len(b) {
			t.Fatalf("%d bytes of values from a %d-byte block", n, len(b))
		}
	})
}

// FuzzPublishPropsRoundTrip writes a PUBLISH with arbitrary properties and reads it back:
// every field comes back as written.
func FuzzPublishPropsRoundTrip(f *testing.F) {
	f.Add("statestore/v1/x/command/invoke", "application/octet-stream", "clients/AB/response", []byte{1, 2}, "__ts", "v", uint32(10), true, []byte("*1\r\n$3\r\nGET\r\n"))
	f.Add("t", "", "", []byte(nil), "", "", uint32(0), false, []byte(nil))
	f.Fuzz(func(t *testing.T, topic, ct, rt string, corr []byte, key, val string, expiry uint32, dup bool, payload []byte) {
		if len(topic) > 0xffff || len(ct) > 0xffff || len(rt) > 0xffff || len(corr) > 0xffff || len(key) > 0xffff || len(val) > 0xffff {
			return
		}
		in := PublishProps{WritePayloadFormat: true, MessageExpiry: expiry, ContentType: ct, ResponseTopic: rt, CorrelationData: corr,
			User: []UserProperty{{[]byte(key), []byte(val)}}}
		wire := AppendPublishProps(nil, topic, 1, dup, 9, &in, payload)
		first, body, _, err := ReadPacket(bufio.NewReader(bytes.NewReader(wire)), nil)
		if err != nil {
			if errors.Is(err, ErrTooLarge) {
				return
			}
			t.Fatal(err)
		}
		p, err := ParsePublish(first, body)
		if err != nil || p.ID != 9 || p.Dup != dup || string(p.Topic) != topic || !bytes.Equal(p.Payload, payload) {
			t.Fatalf("publish %+v, %v", p, err)
		}
		var out Properties
		if err := ParseProperties(p.Props, &out); err != nil {
			t.Fatal(err)
		}
		if out.MessageExpiry != expiry || string(out.ContentType) != ct || string(out.ResponseTopic) != rt ||
			!bytes.Equal(out.CorrelationData, corr) || len(out.User) != 1 || string(out.User[0].Key) != key || string(out.User[0].Val) != val {
			t.Fatalf("properties %+v from %+v", out, in)
		}
	})
}
