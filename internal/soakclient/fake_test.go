package soakclient

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/internal/mqttwire"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// scripted is a broker that speaks just enough MQTT to answer the client as a test tells
// it to, wrong answers, dropped connections and kept messages included: what the real
// broker does only when it is broken. One connection at a time.
type scripted struct {
	t  *testing.T
	ln net.Listener
	// onRequest answers one request; it runs on the connection's goroutine. Returning
	// drop closes the connection before the PUBACK.
	onRequest func(s *scripted, req *seenRequest) (drop bool)
	// sessionPresent is the CONNACK's flag for the n-th connection (from 0).
	sessionPresent func(conn int) bool
	// onConnect runs after CONNACK on the n-th connection (to resend kept messages).
	onConnect func(s *scripted, conn int)
	// onBarrier runs when the client publishes on a barrier topic, after the PUBACK.
	onBarrier func(s *scripted)

	mu     sync.Mutex
	conn   net.Conn
	nextID uint16
	acks   map[uint16]bool // PUBACKs received from the client
}

// seenRequest is a request as the scripted broker read it.
type seenRequest struct {
	n                int // from the correlation data
	id               uint16
	dup              bool
	op, key          string
	value            []byte
	corr, respTopic  []byte
	ts, src, partn   string
	hasPrio, hasSrc  bool
	expiry           uint32
	ctype            string
	payloadFormatSet bool
}

func startScripted(t *testing.T, s *scripted) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.t, s.ln, s.acks = t, ln, map[uint16]bool{}
	t.Cleanup(func() { ln.Close(); s.mu.Lock(); closeConn(s.conn); s.mu.Unlock() })
	type accepted struct {
		conn net.Conn
		br   *bufio.Reader
	}
	clients := make(chan accepted, 16)
	go func() { // the client's connections, one after the other, as a broker takes them over
		for n := 0; ; n++ {
			a, ok := <-clients
			if !ok {
				return
			}
			s.serve(a.conn, a.br, n)
		}
	}()
	go func() {
		defer close(clients)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(conn)
			first, body, _, err := mqttwire.ReadPacket(br, nil)
			if err != nil || first>>4 != mqttwire.TypeConnect {
				s.t.Errorf("scripted: no CONNECT: %v", err)
				conn.Close()
				continue
			}
			if strings.HasSuffix(connectClientID(body), "-barrier") {
				go serveSink(conn, br)
				continue
			}
			clients <- accepted{conn, br}
		}
	}()
	return ln.Addr().String()
}

func closeConn(c net.Conn) {
	if c != nil {
		c.Close()
	}
}

// connectClientID reads the client id from a CONNECT's remaining part [MQTT 3.1.3.1].
func connectClientID(body []byte) string {
	if len(body) < 11 {
		return ""
	}
	i, n := 10, 0 // protocol name, version, flags, keep alive; then the properties' length
	for shift := 0; i < len(body); shift += 7 {
		b := body[i]
		i++
		n |= int(b&0x7f) << shift
		if b&0x80 == 0 {
			break
		}
	}
	i += n
	if i+2 > len(body) {
		return ""
	}
	l := int(body[i])<<8 | int(body[i+1])
	if i+2+l > len(body) {
		return ""
	}
	return string(body[i+2 : i+2+l])
}

// serveSink is a barrier's kept session: CONNACK, SUBACK, and nothing else.
func serveSink(conn net.Conn, br *bufio.Reader) {
	defer conn.Close()
	_, _ = conn.Write([]byte{mqttwire.TypeConnack << 4, 3, 0, 0, 0})
	for {
		first, body, _, err := mqttwire.ReadPacket(br, nil)
		if err != nil {
			return
		}
		if first>>4 == mqttwire.TypeSubscribe {
			_, _ = conn.Write([]byte{mqttwire.TypeSuback << 4, 4, body[0], body[1], 0, 1})
		}
	}
}

func (s *scripted) serve(conn net.Conn, br *bufio.Reader, n int) {
	defer conn.Close()
	present := byte(0)
	if s.sessionPresent != nil && s.sessionPresent(n) {
		present = 1
	}
	s.mu.Lock()
	s.conn = conn
	s.mu.Unlock()
	s.write([]byte{mqttwire.TypeConnack << 4, 3, present, 0, 0})
	if s.onConnect != nil {
		s.onConnect(s, n)
	}
	var props mqttwire.Properties
	for {
		first, body, _, err := mqttwire.ReadPacket(br, nil)
		if err != nil {
			return
		}
		switch first >> 4 {
		case mqttwire.TypeSubscribe:
			s.write([]byte{mqttwire.TypeSuback << 4, 4, body[0], body[1], 0, 1})
		case mqttwire.TypePuback:
			id, _, _ := mqttwire.ParseAck(mqttwire.TypePuback, body)
			s.mu.Lock()
			s.acks[id] = true
			s.mu.Unlock()
		case mqttwire.TypePublish:
			p, err := mqttwire.ParsePublish(first, body)
			if err == nil {
				err = mqttwire.ParseProperties(p.Props, &props)
			}
			if err != nil {
				s.t.Errorf("scripted: request: %v", err)
				return
			}
			if strings.HasPrefix(string(p.Topic), "soak/barrier/") {
				s.write(mqttwire.AppendPuback(nil, p.ID))
				if s.onBarrier != nil {
					s.onBarrier(s)
				}
				continue
			}
			req := &seenRequest{id: p.ID, dup: p.Dup, corr: append([]byte(nil), props.CorrelationData...),
				respTopic: append([]byte(nil), props.ResponseTopic...), expiry: props.MessageExpiry, ctype: string(props.ContentType),
				payloadFormatSet: props.Present(mqttwire.PropPayloadFormat)}
			if len(req.corr) == 16 {
				req.n = int(uint64(req.corr[8]&0x3f)<<56 | uint64(req.corr[9])<<48 | uint64(req.corr[10])<<40 | uint64(req.corr[11])<<32 |
					uint64(req.corr[12])<<24 | uint64(req.corr[13])<<16 | uint64(req.corr[14])<<8 | uint64(req.corr[15]))
			}
			ts, _ := props.UserValue("__ts")
			src, hasSrc := props.UserValue("__srcId")
			partn, _ := props.UserValue("$partition")
			_, hasPrio := props.UserValue("$high_priority")
			req.ts, req.src, req.partn, req.hasSrc, req.hasPrio = string(ts), string(src), string(partn), hasSrc, hasPrio
			var argv [3][]byte
			args, err := resp3.ParseCommand(p.Payload, argv[:0])
			if err != nil || len(args) < 2 {
				s.t.Errorf("scripted: payload %q: %v", p.Payload, err)
				return
			}
			req.op, req.key = string(args[0]), string(args[1])
			if len(args) == 3 {
				req.value = append([]byte(nil), args[2]...)
			}
			if s.onRequest(s, req) {
				return
			}
			s.write(mqttwire.AppendPuback(nil, p.ID))
		}
	}
}

func (s *scripted) write(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		_, _ = s.conn.Write(b)
	}
}

// answer writes an answer to req with the given reply and user properties, as the store
// sends them (QoS 1, content type, correlation data), under the next packet id; dup sets
// DUP. It returns the packet id.
func (s *scripted) answer(req *seenRequest, reply string, dup bool, user ...string) uint16 {
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.mu.Unlock()
	var up []mqttwire.UserProperty
	for i := 0; i+1 < len(user); i += 2 {
		up = append(up, mqttwire.UserProperty{Key: []byte(user[i]), Val: []byte(user[i+1])})
	}
	s.write(mqttwire.AppendPublishProps(nil, string(req.respTopic), 1, dup, id, &mqttwire.PublishProps{
		ContentType: contentType, CorrelationData: req.corr, User: up}, []byte(reply)))
	return id
}

// correct is the right answer to req for a slot that runs SET, GET, DEL, GET on its own
// key: held says what the key holds (nil: nothing).
func correct(req *seenRequest, held map[string][]byte) (reply string, user []string) {
	ts := fmt.Sprintf("%015d:%05d:store", time.Now().UnixMilli()-1000, 0)
	ok := []string{"__stat", "200", "__protVer", "1.0"}
	switch req.op {
	case "SET":
		held[req.key] = req.value
		return "+OK\r\n", append(ok, "__ts", ts)
	case "GET":
		if v, found := held[req.key]; found {
			return string(resp3.AppendBlob(nil, v)), append(ok, "__ts", ts)
		}
		return "$-1\r\n", ok
	default:
		if _, found := held[req.key]; found {
			delete(held, req.key)
			return ":1\r\n", append(ok, "__ts", ts)
		}
		return ":0\r\n", ok
	}
}
