package attack

import (
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"
)

// The attacks of this file found what did not hold. Each runs against a live agent of
// its own, with the traffic served throughout, and checks what must hold.

// TestAttackEMFILE exhausts the agent's descriptors (RLIMIT_NOFILE 512, set with
// prlimit): connections pile up until accept(2) fails with EMFILE. Once they are closed
// the agent must accept again, and its terminals and back office, already connected,
// must be served throughout.
func TestAttackEMFILE(t *testing.T) {
	su := setup{name: "nofile", nofile: 512}
	s := start(t, su)
	runAttack(t, s, attack{name: "emfile", run: exhaustDescriptors, sockets: su.nofile, logBudget: 256 << 10})
}

func exhaustDescriptors(t *testing.T, s *system) {
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	// More than the agent can hold: the kernel completes the handshakes of the rest into
	// the listen backlog, or refuses them once that is full too.
	for range s.setup.nofile + 64 {
		c, err := net.DialTimeout("tcp", s.brokerAddr, time.Second)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	// Until the agent's descriptors reach the limit, or stop growing: an agent that
	// bounds the connections it takes before CONNECT never gets there, which is fine.
	fds, grew := s.mon.now().fds, time.Now()
	for fds < s.setup.nofile-8 && time.Since(grew) < time.Second {
		time.Sleep(10 * time.Millisecond)
		if n := s.mon.now().fds; n > fds {
			fds, grew = n, time.Now()
		}
	}
	t.Logf("%d connections opened; the agent holds %d descriptors (limit %d)", len(conns), fds, s.setup.nofile)
	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	// The listener must take connections again.
	deadline := time.Now().Add(waitFor)
	for {
		c, err := s.tryRawDial()
		if err == nil {
			code, err2 := c.connack(connectPacket("after-emfile"))
			_ = c.conn.Close()
			if err2 == nil && code == 0 {
				return
			}
			err = err2
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new connection accepted %v after the descriptors were freed: %v", waitFor, err)
		}
		time.Sleep(50 * time.Millisecond) // the pace of a client retrying
	}
}

// TestAttackSessionTakeoverByAnotherUser: mallory connects with the back office's client
// id, resuming its session and starting clean. Either would hand her the results queued
// for the back office (and cut the back office off); both must be refused, and the back
// office keep its connection and every result.
func TestAttackSessionTakeoverByAnotherUser(t *testing.T) {
	s := start(t, users)
	runAttack(t, s, attack{name: "takeover", sockets: 1, logBudget: 8 << 10, run: func(t *testing.T, s *system) {
		before := s.tr.bo.lossCount()
		for _, resume := range []bool{true, false} {
			mc, code, err := s.connect(t, clientOpts{id: backOfficeID, user: "mallory", sessionExpiry: 3600, resume: resume})
			if err == nil {
				mc.close()
				t.Errorf("mallory took the back office's session (clean start %v): CONNACK 0x%02x", !resume, code)
			} else if code < 0x80 {
				t.Errorf("mallory with the back office's client id (clean start %v): %v", !resume, err)
			}
		}
		// Results keep coming: had the back office been cut off, it would have counted
		// the loss before it got any on its next connection.
		results := s.tr.bo.resultCount()
		deadline := time.Now().Add(resultDeadline)
		for s.tr.bo.resultCount() < results+5 && time.Now().Before(deadline) {
			s.tr.bo.wait(100 * time.Millisecond)
		}
		if lost := s.tr.bo.lossCount() - before; lost > 0 {
			t.Errorf("the back office lost its connection %d times", lost)
		}
	}})
}

// TestAttackLogsHoldNoSecrets puts a canary in what an attacker sends that is neither a
// name nor an address (client ids, user names, topics, keys and the fields a deadletter
// reason quotes may be logged): passwords of refused logins, task and will payloads,
// state store values and requests, terminal acks and heartbeats. None may reach the log
// at the default level (info), as text, hex, or the decimal bytes of a Go []byte.
func TestAttackLogsHoldNoSecrets(t *testing.T) {
	s := start(t, users)
	const canary = "CANARY-7f3a9c"
	runAttack(t, s, attack{name: "canaries", sockets: 4, logBudget: 64 << 10, run: func(t *testing.T, s *system) {
		for _, user := range []string{"backoffice", "nobody"} {
			c := s.rawDial(t)
			pk := connectPacket("canary-login")
			pk.Connect.UsernameFlag, pk.Connect.Username = true, []byte(user)
			pk.Connect.PasswordFlag, pk.Connect.Password = true, []byte(canary+"-password")
			if code, err := c.connack(pk); err != nil || code != packets.ErrBadUsernameOrPassword.Code {
				t.Errorf("login as %s with a wrong password: CONNACK 0x%02x %v", user, code, err)
			}
		}
		will := s.rawDial(t)
		pk := loginPacket("canary-will", "mallory")
		pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload = true, "dev/face/t1", []byte(canary+"-will")
		_, _ = will.connack(pk)

		bo := s.mustConnect(t, clientOpts{id: "canary-bo", user: "backoffice"})
		for _, p := range []string{
			canary + " not json",
			`{"taskId":"c1","deviceId":"nope","op":"AddPerson","person":{"id":"1","name":"` + canary + `"}}`,
			`{"taskId":"c2","deviceId":"t1","op":"EditPerson","person":{"id":"1","name":"` + canary + `"}}`,
			`{"taskId":"c3","deviceId":"t1","op":"AddPerson","person":{"id":"1","name":"` + canary + strings.Repeat("x", 600) + `"}}`,
			`[{"taskId":"c4","deviceId":"t1","op":"AddPerson","person":{"id":"1","name":"` + canary + `"},"extra":[}]`,
		} {
			if code, err := bo.publish("faceagent/"+gateway+"/tasks", []byte(p), nil); err != nil || code != 0 {
				t.Errorf("task %.30q: PUBACK 0x%02x %v", p, code, err)
			}
		}
		mallory := s.storeClient(t, clientOpts{id: "canary-mallory", user: "mallory"})
		for _, p := range [][]byte{
			[]byte(canary + "\r\n"), command("SET", "mallory/k", canary+"-value"), command("SET", "faceagent/x", canary),
			command(canary, "k"), command("SET", "mallory/k", canary, "PX", canary),
		} {
			_, _, _ = mallory.request(p, storeReq{})
		}
		_, _, _ = mallory.request(command("SET", "mallory/k", canary), storeReq{responseTopic: "clients/victim/x"})
		t1 := s.mustConnect(t, clientOpts{id: "canary-t1", user: "t1"})
		for _, p := range []string{canary, `{"messageId":"m","code":0,"message":"` + canary + `"}`, `{"deviceId":"t1","firmware":"` + canary + `"}`} {
			_, _ = t1.publish("dev/face/t1/Ack", []byte(p), nil)
			_, _ = t1.publish("dev/face/t1/heartbeat", []byte(p), nil)
			_, _ = t1.publish("dev/face/t2/Ack", []byte(p), nil) // refused: not t1's
		}
		forms := []string{canary, hex.EncodeToString([]byte(canary)), strings.ToUpper(hex.EncodeToString([]byte(canary))),
			strings.Trim(fmt.Sprint([]byte(canary)), "[]")}
		var lines []string
		for _, l := range strings.Split(s.log.String(), "\n") {
			for _, f := range forms {
				if strings.Contains(l, f) {
					lines = append(lines, l)
					break
				}
			}
		}
		if len(lines) > 0 {
			t.Errorf("%d log lines hold what the attacker sent (%q in some form):\n%s", len(lines), canary, strings.Join(lines, "\n"))
		}
	}})
}

// TestAttackSlowSubscriber subscribes to everything and stops reading, its socket filled
// with 64 KiB messages from a second connection: the broker's write to it blocks. Results
// and commands for everyone else must go on while it is wedged, not wait for the
// broker's 30 s write timeout to cut it off.
func TestAttackSlowSubscriber(t *testing.T) {
	s := start(t, anonymous)
	runAttack(t, s, attack{name: "slow-subscriber", sockets: 2, logBudget: 16 << 10, run: func(t *testing.T, s *system) {
		slow := s.rawDial(t)
		defer slow.conn.Close() // the attack ends with it
		if code, err := slow.connack(connectPacket("slow-subscriber")); err != nil || code != 0 {
			t.Fatalf("CONNACK 0x%02x %v", code, err)
		}
		if err := slow.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
			Filters: packets.Subscriptions{{Filter: "#", Qos: 1}}}); err != nil {
			t.Fatal(err)
		}
		if typ, _, err := slow.read(waitFor); err != nil || typ != packets.Suback {
			t.Fatalf("SUBACK: type %d, %v", typ, err)
		}
		// From here on slow reads nothing. 16 MiB of junk, far more than its socket
		// buffers hold, wedges the broker's writes to it.
		flood := s.mustConnect(t, clientOpts{id: "flooder"})
		junk := make([]byte, 64<<10)
		for range 256 {
			if _, err := flood.c.Publish(t.Context(), &paho.Publish{Topic: "junk/x", QoS: 0, Payload: junk}); err != nil {
				t.Fatal(err)
			}
		}
		// The attack lasts twice quietBound: results and commands that wait for the
		// wedged subscriber show as a silence over quietBound.
		wedged := time.Now()
		for time.Since(wedged) < scaleDuration(2*quietBound, 25*time.Second) {
			s.tr.bo.wait(100 * time.Millisecond)
		}
	}})
}

// scaleDuration returns short in the short form and long in the long form.
func scaleDuration(short, longD time.Duration) time.Duration {
	if long {
		return longD
	}
	return short
}

// TestAttackResponseTopicHexAlias: a state store response may go to the requester's own
// clients/{clientId}/ or clients/{HEX(clientId)}/, but HEX(mallory's id) can be another
// client's id. mallory (client id "mx") asks for responses on clients/6D78/, under
// victim's (client id "6D78") own topics, which her rules do not let her publish to:
// the request must be refused and victim must get nothing.
func TestAttackResponseTopicHexAlias(t *testing.T) {
	s := start(t, users)
	runAttack(t, s, attack{name: "hex-alias", sockets: 2, logBudget: 8 << 10, run: func(t *testing.T, s *system) {
		aliasID := strings.ToUpper(hex.EncodeToString([]byte("mx")))
		victim := s.storeClient(t, clientOpts{id: aliasID, user: "victim"})
		if code, err := victim.subscribe("clients/" + aliasID + "/#"); err != nil || code >= 0x80 {
			t.Fatalf("victim subscribes to its own topics: 0x%02x %v", code, err)
		}
		mallory := s.storeClient(t, clientOpts{id: "mx", user: "mallory"})
		if got := mallory.mustDo("SET", "mallory/k", "forged"); got != "+OK\r\n" {
			t.Fatalf("SET: %q", got)
		}
		_, code, err := mallory.request(command("GET", "mallory/k"), storeReq{responseTopic: "clients/" + aliasID + "/inbox"})
		if err != nil || code != packets.ErrNotAuthorized.Code {
			t.Errorf("mallory's request answered on clients/%s/inbox: PUBACK 0x%02x %v, want 0x87", aliasID, code, err)
		}
		// Responses leave in order: once victim has its own reply, a forged one sent
		// before it would have arrived.
		victim.mustDo("GET", "victim/k")
		select {
		case p := <-victim.msgs:
			t.Errorf("victim got %q on %s from mallory's request", p.Payload, p.Topic)
		default:
		}
	}})
}
