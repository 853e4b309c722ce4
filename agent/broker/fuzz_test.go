package broker

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// FuzzServiceRequest drives the state store hook with arbitrary payloads and
// properties. Every request must end in exactly one of: one reply on its
// response topic (well-formed, correlation echoed, __stat and __protVer
// set), a documented drop (no response topic), or a disconnect (forbidden
// response topic). Never a panic or a hang.
func FuzzServiceRequest(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("statestore", "testdata", "*.resp"))
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, byte(1), byte(0), []byte("0123456789abcdef"), "1696374425000:0:c", "", true, false, false)
	}
	f.Add(cmd("KEYNOTIFY", "k"), byte(1), byte(0), []byte("c"), "", "", false, false, false)
	f.Add(cmd("SET", "k", "v", "PX", "5"), byte(2), byte(1), []byte{}, "x", "1:2:3", true, true, true)
	f.Add([]byte("*1\r\n$3\r\nGET\r\n"), byte(0), byte(2), []byte("c"), "", "", false, false, false)

	b, err := New(&Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	const responseTopic = "fuzz/response"
	replies := make(chan packets.Packet, 4)
	err = b.Server().Subscribe(responseTopic, 1, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		replies <- pk
	})
	if err != nil {
		f.Fatal(err)
	}
	topics := []string{responseTopic, "", InvokeTopic, NotifyTopicPrefix + "/x"}

	f.Fuzz(func(t *testing.T, payload []byte, qos, topicSel byte, correlation []byte,
		ts, ft string, hasTS, hasFT, persist bool) {
		cl := b.Server().NewClient(nil, "fuzz", "fuzzer", false)
		cl.Properties.ProtocolVersion = 5
		defer b.service.OnDisconnect(cl, nil, true)
		pk := packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos % 3},
			TopicName:   InvokeTopic,
			PacketID:    1,
			Payload:     payload,
			Properties: packets.Properties{
				ResponseTopic:   topics[int(topicSel)%len(topics)],
				CorrelationData: correlation,
			},
		}
		if hasTS {
			pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: "__ts", Val: ts})
		}
		if hasFT {
			pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: "__ft", Val: ft})
		}
		if persist {
			pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: "aio-persistence", Val: "true"})
		}
		_, err := b.service.OnPublish(cl, pk)
		switch rt := pk.Properties.ResponseTopic; {
		case rt == InvokeTopic || rt == NotifyTopicPrefix+"/x":
			if !errors.Is(err, packets.ErrRejectPacket) || !cl.Closed() {
				t.Fatalf("forbidden response topic: err %v, closed %v", err, cl.Closed())
			}
			expectNoReply(t, replies)
		case rt == "":
			if !errors.Is(err, packets.CodeSuccessIgnore) {
				t.Fatalf("no response topic: err %v", err)
			}
			expectNoReply(t, replies)
		default:
			if !errors.Is(err, packets.CodeSuccessIgnore) {
				t.Fatalf("err %v", err)
			}
			var r packets.Packet
			select {
			case r = <-replies: // InjectPacket delivers to inline subscribers synchronously
			default:
				t.Fatalf("no reply to %q", payload)
			}
			if !bytes.Equal(r.Properties.CorrelationData, correlation) || !validReply(r.Payload) ||
				r.Properties.ContentType != contentType || len(r.Properties.User) < 2 ||
				r.Properties.User[0] != (packets.UserProperty{Key: "__stat", Val: "200"}) {
				t.Fatalf("bad reply %+v to %q", r, payload)
			}
			expectNoReply(t, replies)
		}
	})
}

func expectNoReply(t *testing.T, replies chan packets.Packet) {
	t.Helper()
	select {
	case r := <-replies:
		t.Fatalf("unexpected reply %q", r.Payload)
	default:
	}
}

func validReply(b []byte) bool {
	for _, prefix := range []string{"-ERR ", "+OK\r\n", ":", "$"} {
		if bytes.HasPrefix(b, []byte(prefix)) {
			return bytes.HasSuffix(b, []byte("\r\n"))
		}
	}
	return false
}
