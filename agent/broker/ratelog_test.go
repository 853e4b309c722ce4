package broker

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestRefusedPacketsKeepTheLogSmall: refused packets must not be logged whole (a payload
// as decimal bytes triples its size, and the values of state store requests and a second
// CONNECT's password would be in the log). A client sending a hundred refused 64 KiB
// requests (each logged twice: mochi's hook error and the store's refusal) and a second
// CONNECT costs a few lines: one per reason a second, with the client id, the packet type
// and the reason, and none of the payload or the password.
func TestRefusedPacketsKeepTheLogSmall(t *testing.T) {
	users := filepath.Join(t.TempDir(), "users.toml")
	body := fmt.Sprintf(`
[[users]]
name          = "terminal"
password_hash = %q
publish       = [%q]
`, hash(t, terminalPassword), InvokeTopic)
	if err := os.WriteFile(users, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var log logBuffer
	b := startBroker(t, Options{UsersFile: users, Logger: log.logger()})
	c, code, _ := connectAs(t, b.Addr(), "door-9", "terminal", terminalPassword, 5, true)
	if code != 0 {
		t.Fatalf("CONNACK %#x", code)
	}
	start := len(log.String())

	const n = 100
	value := strings.Repeat("Jane Doe, badge 4711; ", 64<<10/22)
	request := cmd("SET", "faceagent/gw-01/person", value)
	denied := "denied/" + strings.Repeat("t", 4000) // a response topic outside the user's rules
	for i := range n {
		c.write(t, packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
			PacketID:    uint16(i + 1),
			TopicName:   InvokeTopic,
			Properties:  packets.Properties{ResponseTopic: denied, CorrelationData: []byte("c")},
			Payload:     request,
			Mods:        packets.Mods{AllowResponseInfo: true},
		})
	}
	for i := range n {
		if ack := expectWithin(t, c, packets.Puback, "PUBACK"); len(ack) < 3 || ack[2] != 0x87 {
			t.Fatalf("request %d: PUBACK % x, want reason 0x87", i, ack)
		}
	}
	const password = "second-Connect-Pass-81"
	c.write(t, packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60,
			ClientIdentifier: "door-9", Username: []byte("terminal"), UsernameFlag: true,
			Password: []byte(password), PasswordFlag: true},
	})
	expectWithin(t, c, packets.Disconnect, "DISCONNECT after a second CONNECT")
	eventually(t, "the second CONNECT logged", func() bool {
		return strings.Contains(log.String(), "second connect")
	})

	got := log.String()[start:]
	t.Logf("%d bytes of log", len(got))
	if len(got) > 6<<10 {
		t.Errorf("%d bytes of log for %d refused requests of %d bytes and a second CONNECT:\n%.3000s", len(got), n, len(request), got)
	}
	for _, secret := range []string{"Jane Doe", "74 97 110 101", password, "115 101 99 111 110 100", strings.Repeat("t", 300)} {
		if strings.Contains(got, secret) {
			t.Errorf("the log holds %.40q:\n%.3000s", secret, got)
		}
	}
	for _, want := range []string{"client=door-9", "packet.type=Publish", "packet.type=Connect"} {
		if !strings.Contains(got, want) {
			t.Errorf("the log lacks %q:\n%s", want, got)
		}
	}
}

// limiterAt returns a limiter whose clock the test moves.
func limiterAt(now *time.Time) *logLimiter {
	l := newLogLimiter(time.Second)
	l.now = func() time.Time { return *now }
	return l
}

// TestLimitedHandler: lines about a client come at most once a second per reason, the next
// one counting those held back; other lines pass; long strings are clipped and byte slices
// and other values never printed.
func TestLimitedHandler(t *testing.T) {
	now := time.Unix(1000, 0)
	var buf bytes.Buffer
	base := slog.New(slog.NewTextHandler(&buf, nil))
	log := newLimitedLogger(base, limiterAt(&now), false)

	for range 50 {
		log.Warn("refused", "client", "a", "error", errors.New("not authorized"))
		log.Warn("refused", "client", "b", "error", errors.New("quota exceeded"))
		log.Info("started") // not about a client: every one passes
	}
	if n := strings.Count(buf.String(), "msg=refused"); n != 2 {
		t.Errorf("%d lines of two reasons within a second, want 2:\n%s", n, buf.String())
	}
	if n := strings.Count(buf.String(), "msg=started"); n != 50 {
		t.Errorf("%d of 50 lines not about a client passed", n)
	}
	buf.Reset()
	now = now.Add(time.Second)
	log.With("client", "a").Warn("refused", "error", errors.New("not authorized"))
	if !strings.Contains(buf.String(), "suppressed=49") {
		t.Errorf("the next line does not count the 49 held back:\n%s", buf.String())
	}

	buf.Reset()
	long := strings.Repeat("x", 10000)
	log.Warn("clipped", "client", long, "payload", []byte("secret bytes"), "packet", struct{ Password string }{"pw"},
		"error", errors.New(long))
	line := buf.String()
	if len(line) > 2*logMaxValue+200 || strings.Contains(line, "secret bytes") || strings.Contains(line, "pw") {
		t.Errorf("line not clipped (%d bytes): %.600s", len(line), line)
	}
	if !strings.Contains(line, "payload=\"[12 bytes]\"") || !strings.Contains(line, "(10000 bytes)") {
		t.Errorf("clipped values not described: %.600s", line)
	}

	// Reasons beyond logMaxReasons share one slot while they are all recent.
	buf.Reset()
	all := newLimitedLogger(base, limiterAt(&now), true)
	for i := range 10 * logMaxReasons {
		all.Warn("accept failed", "error", fmt.Errorf("reason %d", i))
	}
	if n := strings.Count(buf.String(), "\n"); n != logMaxReasons+1 {
		t.Errorf("%d lines of %d distinct reasons, want %d (the rest share one slot)", n, 10*logMaxReasons, logMaxReasons+1)
	}
}

// TestLimiterForgetsReasonsThatStopped: a reason that was held back and then stopped keeps
// its slot only for a while. Were it kept until it came again, if ever, then once
// logMaxReasons of them had come and gone (an error text with a peer's address and port,
// twice in a second, is enough), every new reason would share one slot for good, one line
// a second for all of them, and a new fault's lines would be lost among an attacker's.
func TestLimiterForgetsReasonsThatStopped(t *testing.T) {
	now := time.Unix(1000, 0)
	l := limiterAt(&now)
	for i := range logMaxReasons {
		reason := fmt.Sprintf("reason %d", i)
		if ok, _ := l.allow(reason); !ok {
			t.Fatalf("%s: first line held back", reason)
		}
		if ok, _ := l.allow(reason); ok { // held back: counted, to be reported by its next line
			t.Fatalf("%s: second line within a second passed", reason)
		}
	}
	now = now.Add(logForgetAfter)
	for i := range 3 {
		if ok, _ := l.allow(fmt.Sprintf("new reason %d", i)); !ok {
			t.Fatalf("new reason %d held back: the slots of reasons gone for %v are still taken", i, logForgetAfter)
		}
	}
}
