package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Passwords of ownerUsersFile's users; the logs must never hold them.
const (
	backofficePassword = "bo-Secret-7731"
	terminalPassword   = "term-Secret-0954"
)

// ownerUsersFile writes a users file with a back office and a terminal user, each allowed
// everything, as a deployment that trusts both with topics but not with each other's
// sessions. terminalKeys are more lines of the terminal's entry.
func ownerUsersFile(t *testing.T, terminalKeys ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.toml")
	body := fmt.Sprintf(`
[[users]]
name          = "backoffice"
password_hash = %q

[[users]]
name          = "terminal"
password_hash = %q
`, hash(t, backofficePassword), hash(t, terminalPassword))
	for _, k := range terminalKeys {
		body += k + "\n"
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// connectAs sends a CONNECT as user (anonymous when "") with id and MQTT version (4 or 5),
// a session kept for an hour (clean: starting a new one), and returns the client with the
// CONNACK's reason (3.1.1: return) code and session present flag.
func connectAs(t *testing.T, addr, id, user, password string, version byte, clean bool) (c *memClient, code byte, present bool) {
	t.Helper()
	c = dialMem(t, addr)
	code, present = connectOn(t, c, id, user, password, version, clean)
	return c, code, present
}

// connectOn is connectAs on a connection of the caller's.
func connectOn(t *testing.T, c *memClient, id, user, password string, version byte, clean bool) (code byte, present bool) {
	t.Helper()
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: clean, Keepalive: 60,
			ClientIdentifier: id, Username: []byte(user), UsernameFlag: user != "",
			Password: []byte(password), PasswordFlag: password != ""},
	}
	if version == 4 {
		write311(t, c, pk)
	} else {
		pk.Properties = packets.Properties{SessionExpiryInterval: 3600, SessionExpiryIntervalFlag: true}
		c.write(t, pk)
	}
	ack := expectWithin(t, c, packets.Connack, user+"'s CONNACK as "+id)
	if len(ack) < 2 {
		t.Fatalf("short CONNACK % x", ack)
	}
	return ack[1], ack[0]&1 == 1
}

// keptSessionWithMessages connects the back office as id with a kept session subscribed to
// results/#, disconnects it, and publishes n results to the offline session.
func keptSessionWithMessages(t *testing.T, b *Broker, id string, n int) {
	t.Helper()
	bo, code, _ := connectAs(t, b.Addr(), id, "backoffice", backofficePassword, 5, true)
	if code != 0 {
		t.Fatalf("back office refused: %#x", code)
	}
	subscribeMem(t, bo, "results/#")
	bo.close()
	waitOffline(t, b, id)
	for i := range n {
		if err := b.Server().Publish("results/gw-01", fmt.Appendf(nil, "result-%d", i), false, 1); err != nil {
			t.Fatal(err)
		}
	}
}

// waitOffline waits until the broker has seen id's client go (its session stays).
func waitOffline(t *testing.T, b *Broker, id string) {
	t.Helper()
	eventually(t, id+" offline", func() bool {
		cl, ok := b.Server().Clients.Get(id)
		return ok && cl.Closed()
	})
}

// expectResults reads n results in order from c (the back office's resumed session).
func expectResults(t *testing.T, c *memClient, n int) {
	t.Helper()
	for i := range n {
		if got, want := string(c.expectPublishAndAck(t)), fmt.Sprintf("result-%d", i); got != want {
			t.Fatalf("back office got %q, want %q", got, want)
		}
	}
}

// TestClientIDOfAnotherUserIsRefused: the terminal user, connecting with the back office's
// client id while the back office is offline, must not be given the back office's session
// and its queued results. It is refused with 0x85 (MQTT 3.1.1: 0x02), gets nothing, and
// the back office resumes its session whole.
func TestClientIDOfAnotherUserIsRefused(t *testing.T) {
	var log logBuffer
	b := startBroker(t, Options{UsersFile: ownerUsersFile(t), Logger: log.logger()})
	keptSessionWithMessages(t, b, "backoffice-1", 3)

	for _, version := range []byte{5, 4} {
		thief, code, present := connectAs(t, b.Addr(), "backoffice-1", "terminal", terminalPassword, version, false)
		want := byte(0x85)
		if version == 4 {
			want = 0x02
		}
		if code != want || present {
			t.Fatalf("MQTT %d: another user's CONNECT with the back office's id: CONNACK %#x (session present %v), want %#x",
				version, code, present, want)
		}
		if _, _, err := readWithin(thief, promptly); err == nil {
			t.Fatalf("MQTT %d: the refused client was sent more than its CONNACK", version)
		}
	}
	bo, code, present := connectAs(t, b.Addr(), "backoffice-1", "backoffice", backofficePassword, 5, false)
	if code != 0 || !present {
		t.Fatalf("back office resuming: CONNACK %#x, session present %v", code, present)
	}
	expectResults(t, bo, 3)

	got := log.String()
	if !strings.Contains(got, `user=terminal holder=backoffice`) || !strings.Contains(got, "client=backoffice-1") {
		t.Errorf("the refusal is not logged with both users and the client id:\n%s", got)
	}
	for _, secret := range []string{backofficePassword, terminalPassword} {
		if strings.Contains(got, secret) {
			t.Errorf("the log holds a password:\n%s", got)
		}
	}
}

// TestConnectedClientIsNotDisconnectedByAnotherUser: any user could disconnect any other
// connection by connecting with its client id (a session takeover). The connection stays
// and keeps getting its messages.
func TestConnectedClientIsNotDisconnectedByAnotherUser(t *testing.T) {
	b := startBroker(t, Options{UsersFile: ownerUsersFile(t)})
	bo, code, _ := connectAs(t, b.Addr(), "backoffice-1", "backoffice", backofficePassword, 5, true)
	if code != 0 {
		t.Fatalf("back office refused: %#x", code)
	}
	subscribeMem(t, bo, "results/#")
	if _, code, _ := connectAs(t, b.Addr(), "backoffice-1", "terminal", terminalPassword, 5, true); code != 0x85 {
		t.Fatalf("another user's CONNECT with a connected client's id: CONNACK %#x, want 0x85", code)
	}
	if err := b.Server().Publish("results/gw-01", []byte("result-0"), false, 1); err != nil {
		t.Fatal(err)
	}
	expectResults(t, bo, 1) // a DISCONNECT first would fail this
	if cl, ok := b.Server().Clients.Get("backoffice-1"); !ok || cl.Closed() || string(cl.Properties.Username) != "backoffice" {
		t.Fatal("the back office's connection did not stay")
	}
	// The same user still takes its own session over, as MQTT requires [MQTT-3.1.4-3].
	again, code, present := connectAs(t, b.Addr(), "backoffice-1", "backoffice", backofficePassword, 5, false)
	if code != 0 || !present {
		t.Fatalf("the same user taking its session over: CONNACK %#x, session present %v", code, present)
	}
	if err := b.Server().Publish("results/gw-01", []byte("result-0"), false, 1); err != nil {
		t.Fatal(err)
	}
	expectResults(t, again, 1)
}

// TestAnonymousAndUsersDoNotShareSessions: with anonymous clients allowed, an anonymous
// client cannot take a user's client id, nor a user an anonymous client's.
func TestAnonymousAndUsersDoNotShareSessions(t *testing.T) {
	b := startBroker(t, Options{UsersFile: ownerUsersFile(t), AllowAnonymous: true})
	keptSessionWithMessages(t, b, "backoffice-1", 1)
	if _, code, _ := connectAs(t, b.Addr(), "backoffice-1", "", "", 5, false); code != 0x85 {
		t.Fatalf("anonymous CONNECT with a user's client id: CONNACK %#x, want 0x85", code)
	}
	anon, code, _ := connectAs(t, b.Addr(), "door-7", "", "", 5, true)
	if code != 0 {
		t.Fatalf("anonymous client refused: %#x", code)
	}
	if _, code, _ := connectAs(t, b.Addr(), "door-7", "terminal", terminalPassword, 5, false); code != 0x85 {
		t.Fatalf("a user's CONNECT with an anonymous client's id: CONNACK %#x, want 0x85", code)
	}
	subscribeMem(t, anon, "dev/face/door-7") // still connected
	// Anonymous clients are one user: one may take another's session (doc.go, "Anonymous").
	if _, code, present := connectAs(t, b.Addr(), "door-7", "", "", 5, false); code != 0 || !present {
		t.Fatalf("anonymous takeover of an anonymous session: CONNACK %#x, session present %v", code, present)
	}
	bo, code, _ := connectAs(t, b.Addr(), "backoffice-1", "backoffice", backofficePassword, 5, false)
	if code != 0 {
		t.Fatalf("back office refused: %#x", code)
	}
	expectResults(t, bo, 1)
}

// TestRestoredSessionKeepsItsUser: a kept session restored from the sessions journal after a
// restart still belongs to the user it was made by.
func TestRestoredSessionKeepsItsUser(t *testing.T) {
	dir := t.TempDir()
	users := ownerUsersFile(t)
	first, err := New(&Options{Listen: "127.0.0.1:0", UsersFile: users, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	keptSessionWithMessages(t, first, "backoffice-1", 2)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, Options{UsersFile: users, DataDir: dir})
	if _, code, present := connectAs(t, b.Addr(), "backoffice-1", "terminal", terminalPassword, 5, false); code != 0x85 || present {
		t.Fatalf("another user's CONNECT with a restored session's id: CONNACK %#x (session present %v), want 0x85", code, present)
	}
	bo, code, present := connectAs(t, b.Addr(), "backoffice-1", "backoffice", backofficePassword, 5, false)
	if code != 0 || !present {
		t.Fatalf("back office resuming after the restart: CONNACK %#x, session present %v", code, present)
	}
	expectResults(t, bo, 2)
}

// TestClientIDClaimedBeforeRegistration: between the owner check and mochi's adding the
// client to its list, the id is claimed: a second user passing the check meanwhile would be
// taken over by, or take over, the first.
func TestClientIDClaimedBeforeRegistration(t *testing.T) {
	srv := mqtt.New(&mqtt.Options{})
	o := newSessionOwners(srv)
	client := func(user string) *mqtt.Client {
		cl := srv.NewClient(nil, "t", "shared-id", false)
		cl.Properties.Username = []byte(user)
		return cl
	}
	first, second, same := client("backoffice"), client("terminal"), client("backoffice")
	if _, ok := o.admit(first); !ok {
		t.Fatal("a free id refused")
	}
	if holder, ok := o.admit(second); ok || holder != "backoffice" {
		t.Fatalf("another user admitted while the id is claimed (holder %q)", holder)
	}
	if _, ok := o.admit(same); !ok {
		t.Fatal("the same user refused while its id is claimed")
	}
	srv.Clients.Add(same) // registered: the list speaks for it
	o.release(same)
	if _, ok := o.admit(second); ok {
		t.Fatal("another user admitted once the id is registered")
	}
	same.Stop(nil)
	srv.Clients.Delete("shared-id") // the session ended
	if _, ok := o.admit(second); !ok {
		t.Fatal("a free id refused after the session ended")
	}
}
