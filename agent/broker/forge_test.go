package broker

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// TestNotificationsCannotBeForged: the notification topics belong to the
// store. Otherwise any client allowed to publish could send a made-up
// "NOTIFY DELETE" or "NOTIFY SET VALUE x" to another client's notification
// topic, and a client that subscribed to it (ours does, to work behind other
// brokers) would take it for the store's: a lease holder would give its lease up.
func TestNotificationsCannotBeForged(t *testing.T) {
	b := startBroker(t, Options{})
	victimTopic := NotifyTopic("victim", []byte("lease"))
	victim := dial(t, b.Addr(), "victim", dialOptions{subscribe: []string{NotifyTopicPrefix + "/#"}})
	attacker := dial(t, b.Addr(), "attacker", dialOptions{})
	forged := []byte("*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n")
	for _, qos := range []byte{0, 1} {
		pr, err := attacker.c.Publish(context.Background(), &paho.Publish{QoS: qos, Topic: victimTopic, Payload: forged, Retain: true})
		if qos == 1 && (err == nil || pr == nil || pr.ReasonCode != 0x87) {
			t.Errorf("QoS 1 publish to a notification topic: %+v %v, want PUBACK 0x87", pr, err)
		}
	}
	victim.none()
	// A late subscriber finds nothing retained either.
	late := dial(t, b.Addr(), "late", dialOptions{subscribe: []string{NotifyTopicPrefix + "/#"}})
	late.none()
	// The store's own notifications still reach the victim.
	victim.do(cmd("KEYNOTIFY", "lease"), req{})
	attacker.do(cmd("SET", "lease", "x"), req{})
	if n := victim.next(); n.Topic != victimTopic || string(n.Payload) != "*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$1\r\nx\r\n" {
		t.Fatalf("store notification %q on %q", n.Payload, n.Topic)
	}
	victim.none()
}

// TestWillCannotBypassTopicRules: mochi publishes a will without asking the
// ACL hook, so a will could reach any topic, the notification topics and
// topics a user's rules deny included: such a CONNECT is refused.
func TestWillCannotBypassTopicRules(t *testing.T) {
	b := startBroker(t, Options{})
	connectWithWill := func(id, topic string) error {
		conn, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c := paho.NewClient(paho.ClientConfig{Conn: conn, OnClientError: func(error) {}})
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_, err = c.Connect(ctx, &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true,
			WillMessage: &paho.WillMessage{Topic: topic, QoS: 1, Payload: []byte("*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n")}})
		if err == nil {
			_ = c.Disconnect(&paho.Disconnect{})
		}
		_ = conn.Close()
		return err
	}
	if err := connectWithWill("forger", NotifyTopic("victim", []byte("lease"))); err == nil {
		t.Error("CONNECT with a will on a notification topic accepted")
	}
	if err := connectWithWill("honest", "devices/honest/status"); err != nil {
		t.Errorf("CONNECT with an ordinary will: %v", err)
	}
}

// TestResponseTopicNeedsPublishRights: the store publishes responses without
// an ACL check, so a client could have a value it SET published, through a
// GET, on any topic its rules deny. A response topic must be under the
// client's own clients/{id}/ or be the Go SDK's clients/{HEX(id)}/…/response,
// or be allowed by its publish rules; one with wildcards is forbidden
// outright.
func TestResponseTopicNeedsPublishRights(t *testing.T) {
	b := startBroker(t, Options{UsersFile: writeUsersFile(t)})
	victim := dial(t, b.Addr(), "999", dialOptions{user: "agent", password: "agent-secret", subscribe: []string{"dev/999/#"}})
	dev := dial(t, b.Addr(), "2042253", dialOptions{user: "device", password: "device-secret"})
	if p := dev.do(cmd("SET", "faceagent/gw-01/devices/2042253", "forged command"), req{}); string(p.Payload) != "+OK\r\n" {
		t.Fatalf("SET: %q", p.Payload)
	}
	denied := "dev/999/Commands"
	_, _, err := dev.publish(cmd("GET", "faceagent/gw-01/devices/2042253"), req{responseTopic: &denied})
	if err == nil {
		t.Error("request with a response topic outside the publish rules: PUBACK success, want 0x87")
	}
	// Allowed: the SDKs' response topics (the helper's is the Go SDK's),
	// clients/{id}/…, and a topic the rules allow.
	for _, rt := range []string{"clients/2042253/services/statestore/_any_/command/invoke/response", "dev/2042253/responses"} {
		rt := rt
		if _, _, err := dev.publish(cmd("GET", "x"), req{responseTopic: &rt}); err != nil {
			t.Errorf("response topic %s refused: %v", rt, err)
		}
	}
	if p := dev.do(cmd("GET", "faceagent/gw-01/devices/2042253"), req{}); string(p.Payload) != "$14\r\nforged command\r\n" {
		t.Fatalf("GET on the own response topic: %q", p.Payload)
	}
	victim.none()

	wild := "dev/2042253/+"
	_, _, _ = dev.publish(cmd("GET", "k"), req{responseTopic: &wild, timeout: 100 * time.Millisecond})
	select {
	case d := <-dev.disconnected:
		if d.ReasonCode != CodeForbiddenResponseTopic.Code {
			t.Fatalf("disconnect reason %d", d.ReasonCode)
		}
	case <-time.After(waitFor):
		t.Fatal("wildcard response topic: no DISCONNECT")
	}
}
