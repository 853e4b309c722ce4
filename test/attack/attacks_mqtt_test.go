package attack

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// connectTimeout is the broker's wait for a CONNECT (agent/broker DefaultConnectTimeout;
// no config key sets it).
const connectTimeout = 10 * time.Second

// encode is pk's wire form (see wire).
func encode(t *testing.T, pk packets.Packet) []byte {
	t.Helper()
	b, err := wire(pk)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// malformedMQTT sends, each on a connection of its own, packets that break the protocol;
// the agent must close every one of them (with a DISCONNECT or a refusing CONNACK, or
// without), within the connect timeout at the latest.
func malformedMQTT(t *testing.T, s *system) {
	// Each case's CONNECT has a client id of its own (the cases run side by side: one
	// id would have each new connection take the last one's session over and close it)
	// and a keepalive of 2 s: the broker waits 1.5 times that for the rest of a packet
	// cut short after CONNECT ([MQTT-3.1.2-22]).
	connect := func(i int) []byte {
		pk := loginPacket(fmt.Sprintf("malformed-%03d", i), attacker(s))
		pk.Connect.Keepalive = 2
		return encode(t, pk)
	}
	patch := func(f func(b []byte)) func([]byte) []byte {
		return func(valid []byte) []byte { b := bytes.Clone(valid); f(b); return b }
	}
	publish := func(topic string, qos byte, id uint16) []byte {
		return encode(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos},
			TopicName: topic, PacketID: id, Payload: []byte("x")})
	}
	alone := func(b []byte) func([]byte) []byte { return func([]byte) []byte { return b } }
	after := func(b []byte) func([]byte) []byte {
		return func(valid []byte) []byte { return append(bytes.Clone(valid), b...) }
	}
	type malformed struct {
		name  string
		bytes func(connect []byte) []byte
	}
	cases := []malformed{
		{"protocol name MQTX", patch(func(b []byte) { b[7] = 'X' })},
		{"protocol version 9", patch(func(b []byte) { b[8] = 9 })},
		{"reserved connect flag", patch(func(b []byte) { b[9] |= 0x01 })},
		{"will QoS 3", patch(func(b []byte) { b[9] |= 0x04 | 0x18 })},
		{"password flag flipped", patch(func(b []byte) { b[9] ^= 0x40 })},
		{"remaining length of five bytes", alone([]byte{0x10, 0xff, 0xff, 0xff, 0xff, 0x7f})},
		{"remaining length over max_packet_size", func(valid []byte) []byte {
			return append([]byte{0x10, 0x80, 0x80, 0x80, 0x01}, valid[2:]...)
		}},
		{"packet type 0", alone([]byte{0x00, 0x00})},
		{"PUBLISH before CONNECT", alone(publish("dev/face/t1", 0, 0))},
		{"SUBSCRIBE before CONNECT", alone(encode(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
			PacketID: 1, Filters: packets.Subscriptions{{Filter: "#"}}}))},
		{"PINGREQ before CONNECT", alone([]byte{0xc0, 0x00})},
		{"CONNECT twice", func(valid []byte) []byte { return append(bytes.Clone(valid), valid...) }},
		{"PUBLISH with QoS 3", after(withFirst(publish("a/b", 1, 1), 0x36))},
		{"PUBLISH to a wildcard", after(publish("dev/face/+", 0, 0))},
		{"PUBLISH QoS 1 with packet id 0", after([]byte{0x32, 0x06, 0x00, 0x01, 'a', 0x00, 0x00, 0x00})},
		{"PUBLISH with an empty topic and no alias", after(publish("", 0, 0))},
		{"PUBLISH topic not UTF-8", after(publish("a/\xff\xfe", 0, 0))},
		{"PUBLISH topic with NUL", after(publish("a/\x00b", 0, 0))},
		{"SUBSCRIBE without filters", after([]byte{0x82, 0x03, 0x00, 0x01, 0x00})},
		{"SUBSCRIBE with reserved flags", after([]byte{0x80, 0x06, 0x00, 0x01, 0x00, 0x00, 0x01, 'a'})},
		{"property length past the packet", after([]byte{0x30, 0x05, 0x00, 0x01, 'a', 0x7f, 0x00})},
		{"unknown property", after([]byte{0x30, 0x06, 0x00, 0x01, 'a', 0x02, 0x7e, 0x00})},
		{"PUBREL with bad flags", after([]byte{0x60, 0x02, 0x00, 0x01})},
		{"AUTH without a method", after([]byte{0xf0, 0x00})},
		{"packet type 15 with flags", after([]byte{0xff, 0x00})},
		{"packet cut short, then silence", after([]byte{0x30, 0x20, 0x00})},
	}
	if len(cases) != malformedCrafted {
		t.Fatalf("%d crafted cases, malformedCrafted says %d", len(cases), malformedCrafted)
	}
	r := rand.New(rand.NewPCG(3, 4))
	random := malformedRandom
	if s.pki != nil {
		random /= 5 // each costs a TLS handshake, slow under the race detector
	}
	for i := range random {
		b := make([]byte, 1+r.IntN(40))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		c := malformed{fmt.Sprintf("random %d", i), alone(b)}
		if i%2 == 1 {
			c.bytes = after(b) // garbage after a good CONNECT
		}
		cases = append(cases, c)
	}
	// malformedConcurrency cases at a time: those the broker ends by keepalive take 3 s.
	slots := make(chan struct{}, malformedConcurrency)
	var wg sync.WaitGroup
	for i, c := range cases {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			conn, err := s.tryRawDial()
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				return
			}
			defer conn.conn.Close()
			b := c.bytes(connect(i))
			if err := conn.write(b); err != nil {
				return // the agent closed it while we wrote: what we want
			}
			code, err := conn.closedWithin(connectTimeout + 5*time.Second)
			if err != nil {
				t.Errorf("%s (% x): %v", c.name, b[:min(len(b), 32)], err)
			}
			if code == packets.ErrSessionTakenOver.Code {
				t.Errorf("%s: closed for a session takeover, not for what it sent", c.name)
			}
		}()
	}
	wg.Wait()
}

// malformedConcurrency is how many malformed connections are open at once;
// malformedCrafted the cases written out, malformedRandom how many of random bytes
// follow them.
const (
	malformedConcurrency = 8
	malformedCrafted     = 26
)

var malformedRandom = scale(20, 500)

// withFirst returns b with its first byte replaced.
func withFirst(b []byte, first byte) []byte {
	b = bytes.Clone(b)
	b[0] = first
	return b
}

// loginConcurrency is how many refused logins are in flight at once.
const loginConcurrency = 8

// refusedLogins floods the broker with logins that must fail: wrong passwords, unknown
// users, a user name without a password, no user name at all (anonymous is off); each
// is refused with CONNACK 0x86 and the connection closed. Each costs the agent a bcrypt
// comparison (doc.go: about 0.1 s on an ARM gateway); the terminals and the back office
// must not notice.
func refusedLogins(t *testing.T, s *system) {
	n := scale(48, 1000)
	creds := func(i int) (user, password string, hasPassword bool) {
		switch i % 4 {
		case 0:
			return "backoffice", fmt.Sprintf("guess-%d", i), true
		case 1:
			return fmt.Sprintf("nobody-%d", i), "x", true
		case 2:
			return "t1", "", false
		}
		return "", "", false
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	slots := make(chan struct{}, loginConcurrency)
	for i := range n {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			user, password, hasPassword := creds(i)
			c, err := s.tryRawDial()
			if err != nil {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("login %d: dial: %v", i, err))
				mu.Unlock()
				return
			}
			defer c.conn.Close()
			pk := connectPacket(fmt.Sprintf("login-%d", i))
			if user != "" {
				pk.Connect.UsernameFlag, pk.Connect.Username = true, []byte(user)
			}
			if hasPassword {
				pk.Connect.PasswordFlag, pk.Connect.Password = true, []byte(password)
			}
			code, err := c.connack(pk)
			if err == nil && code != packets.ErrBadUsernameOrPassword.Code {
				err = fmt.Errorf("CONNACK 0x%02x, want 0x86", code)
			}
			if err == nil {
				_, err = c.closedWithin(waitFor)
			}
			if err != nil {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("login %d as %q: %v", i, user, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d of %d refused logins went wrong:\n%s", len(failures), n, strings.Join(failures[:min(len(failures), 10)], "\n"))
	}
}

// tlsClientCertificates connects without a client certificate, with one from another
// CA, with TLS 1.1, and in clear text: none gets to MQTT.
func tlsClientCertificates(t *testing.T, s *system) {
	for i := range scale(4, 100) {
		for name, conf := range map[string]*tls.Config{
			"no certificate":           {RootCAs: s.pki.pool, MinVersion: tls.VersionTLS12},
			"another CA's":             {RootCAs: s.pki.pool, Certificates: []tls.Certificate{s.pki.stranger}, MinVersion: tls.VersionTLS12},
			"TLS 1.1, our certificate": {RootCAs: s.pki.pool, Certificates: []tls.Certificate{s.pki.client}, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11},
		} {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: waitFor}, "tcp", s.brokerAddr, conf)
			if err != nil {
				continue // refused in the handshake
			}
			// TLS 1.3 reports a refused client certificate on the first read.
			c := &rawConn{conn: conn, r: newReader(conn)}
			if err := c.write(encode(t, connectPacket(fmt.Sprintf("tls-%d", i)))); err == nil {
				if typ, _, err := c.read(waitFor); err == nil {
					t.Errorf("%s: the agent answered packet type %d", name, typ)
				}
			}
			_ = conn.Close()
		}
		plain, err := net.DialTimeout("tcp", s.brokerAddr, waitFor)
		if err != nil {
			t.Fatal(err)
		}
		c := &rawConn{conn: plain, r: newReader(plain)}
		if err := c.write(encode(t, connectPacket("clear-text"))); err == nil {
			if _, err := c.closedWithin(waitFor); err != nil {
				t.Errorf("clear text on the TLS port: %v", err)
			}
		}
		_ = plain.Close()
	}
}

// slowlorisSockets is how many connections slowloris holds at once.
var slowlorisSockets = scale(60, 400)

// slowloris opens connections that never finish their CONNECT: a third send nothing, a
// third announce a CONNECT and stop, a third trickle a CONNECT with a long client id one
// byte every 100 ms. The broker must close each one within its connect timeout.
func slowloris(t *testing.T, s *system) {
	long := encode(t, connectPacket(strings.Repeat("s", 1000))) // 100 s at a byte per 100 ms
	var wg sync.WaitGroup
	errs := make(chan error, slowlorisSockets)
	for i := range slowlorisSockets {
		c, err := s.tryRawDial()
		if err != nil {
			t.Fatalf("socket %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.conn.Close()
			began := time.Now()
			switch i % 3 {
			case 1:
				_ = c.write(long[:5])
			case 2:
				for _, b := range long {
					if c.write([]byte{b}) != nil || time.Since(began) > 2*connectTimeout {
						break
					}
					time.Sleep(100 * time.Millisecond) // the attack's pace
				}
			}
			if _, err := c.closedWithin(connectTimeout + 5*time.Second - time.Since(began)); err != nil {
				errs <- fmt.Errorf("socket %d (kind %d): %v", i, i%3, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
