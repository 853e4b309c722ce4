package attack

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/seed0e69bba5/faceagent/internal/sswire"
)

// attacker returns the user an attacker connects as: mallory with a users file (whose
// rules allow the store under mallory/), anonymous otherwise.
func attacker(s *system) string {
	if s.setup.users {
		return "mallory"
	}
	return ""
}

// malformedRESP3 sends requests whose payloads are not RESP3 commands; each must be
// answered "-ERR syntax error", and the state store must go on answering.
func malformedRESP3(t *testing.T, s *system) {
	mc := s.storeClient(t, clientOpts{id: "resp3-attacker", user: attacker(s)})
	syntax := []string{
		"",
		"garbage",
		"*1\r\n",                            // an array with its element missing
		"*2\r\n$3\r\nGET\r\n$5\r\nab",       // a blob cut short
		"*99999999\r\n",                     // an array of a hundred million
		"*-5\r\n",                           // a negative length
		"$3\r\nGET\r\n",                     // a blob, not an array
		"*1\r\n:5\r\n",                      // an integer where a blob belongs
		"*2\r\n$3\r\nGET\r\n$-1\r\n",        // a null key
		"*2\r\n$3\r\nGET\r\n$99999999\r\nk", // a blob longer than the payload
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\nextra", // bytes after the command
		strings.Repeat("*1\r\n", 10000),                  // nesting ten thousand deep
		"*17\r\n" + strings.Repeat("$1\r\nx\r\n", 17),    // more arguments than any command takes
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv",                 // no final CRLF
		"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n", // PX without its value
		"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n$2\r\n-1\r\n",
	}
	for _, p := range syntax {
		reply, code, err := mc.request([]byte(p), storeReq{})
		if err != nil || code >= 0x80 {
			t.Fatalf("%q: PUBACK 0x%02x, %v", p, code, err)
		}
		if string(reply) != "-ERR syntax error\r\n" {
			t.Errorf("%q: reply %q, want -ERR syntax error", p, reply)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range scale(200, 5000) {
		p := make([]byte, r.IntN(64))
		for j := range p {
			p[j] = "*$:+-\r\n0123456789abcSETGET"[r.IntN(25)]
		}
		reply, code, err := mc.request(p, storeReq{})
		if err != nil || code >= 0x80 {
			t.Fatalf("random request %d %q: PUBACK 0x%02x, %v", i, p, code, err)
		}
		if !strings.HasPrefix(string(reply), "-ERR ") && !strings.HasPrefix(string(reply), "$-1") {
			t.Errorf("random request %q: reply %q", p, reply)
		}
	}
	// The store still works for this client.
	key := "resp3/k"
	if s.setup.users {
		key = "mallory/k"
	}
	if got := mc.mustDo("SET", key, "v"); got != "+OK\r\n" {
		t.Fatalf("SET after the attack: %q", got)
	}
}

// forbiddenResponseTopics sends requests naming response topics the store must never
// publish to; each gets its client disconnected with reason 0x90 (Topic Name invalid).
func forbiddenResponseTopics(t *testing.T, s *system) {
	for i, topic := range []string{
		sswire.InvokeTopic,
		sswire.NotifyTopicPrefix + "/4D414C4C4F5259/command/notify/6B",
		sswire.NotifyTopicPrefix,
	} {
		c := s.rawDial(t)
		if code, err := c.connack(loginPacket(fmt.Sprintf("forbidden-%d", i), attacker(s))); err != nil || code != 0 {
			t.Fatalf("CONNACK 0x%02x %v", code, err)
		}
		req := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 1,
			TopicName: sswire.InvokeTopic, Payload: command("GET", "k"),
			Properties: packets.Properties{ResponseTopic: topic, CorrelationData: []byte("0123456789abcdef"),
				User: []packets.UserProperty{{Key: "__ts", Val: timestamp()}}}}
		if err := c.send(req); err != nil {
			t.Fatal(err)
		}
		code, err := c.closedWithin(waitFor)
		if err != nil || code != packets.ErrTopicNameInvalid.Code {
			t.Errorf("response topic %q: DISCONNECT 0x%02x, %v; want 0x90 and the connection closed", topic, code, err)
		}
	}
}

// aclMatrix tries what the users file forbids: mallory beyond her prefix and her own
// topics, the back office on a terminal's topic, one terminal on another's, and a will
// on a forbidden topic. Every one is refused with the protocol's code, and what mallory
// may do still works.
func aclMatrix(t *testing.T, s *system) {
	mallory := s.storeClient(t, clientOpts{id: "mallory-acl", user: "mallory"})
	prefix := "faceagent/" + gateway + "/"
	for _, topic := range []string{prefix + "tasks", prefix + "results", "dev/face/t1", "dev/face/t1/Ack",
		sswire.NotifyTopicPrefix + "/4D/command/notify/6B", "clients/victim/x"} {
		if code, err := mallory.publish(topic, []byte(`{"taskId":"m"}`), nil); err != nil || code != packets.ErrNotAuthorized.Code {
			t.Errorf("mallory publishes to %s: PUBACK 0x%02x %v, want 0x87", topic, code, err)
		}
	}
	for _, filter := range []string{"#", "faceagent/#", prefix + "results", "dev/face/+", "clients/victim/#", "$SYS/#"} {
		if code, err := mallory.subscribe(filter); err != nil || code != packets.ErrNotAuthorized.Code {
			t.Errorf("mallory subscribes to %s: SUBACK 0x%02x %v, want 0x87", filter, code, err)
		}
	}
	for _, req := range [][]string{
		{"GET", prefix + "devices/t1"}, {"SET", prefix + "config", "[dispatch]\nmax_tries = 1"},
		{"DEL", prefix + "devices/t1"}, {"KEYNOTIFY", prefix + "config"}, {"GET", "victim/k"},
	} {
		if got := mallory.mustDo(req...); got != "-ERR not authorized\r\n" {
			t.Errorf("mallory %q: %q, want -ERR not authorized", req, got)
		}
	}
	if _, code, _ := mallory.request(command("GET", "mallory/k"), storeReq{responseTopic: "clients/victim/x"}); code != packets.ErrNotAuthorized.Code {
		t.Errorf("mallory's request answered on clients/victim/x: PUBACK 0x%02x, want 0x87", code)
	}
	if got := mallory.mustDo("SET", "mallory/k", "v"); got != "+OK\r\n" {
		t.Errorf("mallory's own key: %q", got)
	}

	bo := s.mustConnect(t, clientOpts{id: "bo-acl", user: "backoffice"})
	for _, topic := range []string{"dev/face/t1", "dev/face/t2/Ack"} {
		if code, err := bo.publish(topic, []byte(`{}`), nil); err != nil || code != packets.ErrNotAuthorized.Code {
			t.Errorf("back office publishes to %s: PUBACK 0x%02x %v, want 0x87", topic, code, err)
		}
	}
	t1 := s.mustConnect(t, clientOpts{id: "t1-acl", user: "t1"})
	for _, topic := range []string{"dev/face/t2/Ack", "dev/face/t2/heartbeat", prefix + "tasks"} {
		if code, err := t1.publish(topic, []byte(`{}`), nil); err != nil || code != packets.ErrNotAuthorized.Code {
			t.Errorf("terminal t1 publishes to %s: PUBACK 0x%02x %v, want 0x87", topic, code, err)
		}
	}
	// A will on a topic the user may not publish to: CONNACK 0x86 (doc.go: not 0x87, so
	// that user names cannot be probed through wills).
	c := s.rawDial(t)
	pk := loginPacket("mallory-will", "mallory")
	pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload = true, "dev/face/t1", []byte(`{"op":"DeletePerson"}`)
	if code, err := c.connack(pk); err != nil || code != packets.ErrBadUsernameOrPassword.Code {
		t.Errorf("mallory's will on dev/face/t1: CONNACK 0x%02x %v, want 0x86", code, err)
	}
}
