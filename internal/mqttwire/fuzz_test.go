package mqttwire

import (
	"bufio"
	"bytes"
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
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		var buf []byte
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
				if len(p.Topic)+len(p.Payload) > len(body) {
					t.Fatalf("topic %d + payload %d bytes from a %d-byte body", len(p.Topic), len(p.Payload), len(body))
				}
			case TypePuback, TypeSuback:
				_, _, _ = ParseAck(typ, body)
			case TypeConnack:
				_, _ = ParseConnack(body)
			}
		}
	})
}
