package broker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eclipse/paho.golang/paho"
	"golang.org/x/crypto/bcrypt"
)

func hash(t testing.TB, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

func writeUsersFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.toml")
	body := `
[[users]]
name          = "agent"
password_hash = "` + hash(t, "agent-secret") + `"

[[users]]
name          = "device"
password_hash = "` + hash(t, "device-secret") + `"
publish       = ["dev/%c/#", "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"]
subscribe     = ["clients/#"]
read_keys     = ["faceagent/"]
write_keys    = ["faceagent/gw-01/devices/"]

[[users]]
name          = "mute"
password_hash = "` + hash(t, "mute") + `"
publish       = []

[anonymous]
write_keys    = []
`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestUsersFileRules(t *testing.T) {
	users, anonymous, err := loadUsers(writeUsersFile(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if anonymous == nil || len(anonymous.WriteKeys) != 0 || anonymous.ReadKeys != nil {
		t.Errorf("[anonymous] table: %+v", anonymous)
	}
	if r := users["agent"].Rules; r.Publish != nil || r.ReadKeys != nil {
		t.Errorf("absent lists must stay nil (everything allowed): %+v", r)
	}
	if r := users["mute"].Rules; r.Publish == nil || len(r.Publish) != 0 || r.Subscribe != nil {
		t.Errorf("an empty list must stay empty (nothing allowed): %+v", r)
	}
	for _, bad := range []string{
		"[[users]]\nname = \"x\"\npassword_hash = \"plain\"\n",
		"[[users]]\npassword_hash = \"" + hash(t, "x") + "\"\n",
		"[[users]]\nname = \"x\"\npasword_hash = \"typo\"\n",
		"[[users]\n",
	} {
		path := filepath.Join(t.TempDir(), "bad.toml")
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := loadUsers(path, nil); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	if _, err := New(&Options{}); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Errorf("no users, no anonymous: %v", err)
	}
}

func TestAuthentication(t *testing.T) {
	b := startBroker(t, Options{UsersFile: writeUsersFile(t)})
	if c, err := tryDial(t, b.Addr(), "a1", dialOptions{user: "agent", password: "agent-secret"}); err != nil || c == nil {
		t.Fatalf("good password refused: %v", err)
	}
	for _, o := range []dialOptions{
		{user: "agent", password: "wrong"},
		{user: "nobody", password: "agent-secret"},
		{}, // anonymous
	} {
		if _, err := tryDial(t, b.Addr(), "a2", o); err == nil {
			t.Errorf("%+v let in", o)
		}
	}
	anon := startBroker(t, Options{AllowAnonymous: true, UsersFile: writeUsersFile(t)})
	c, err := tryDial(t, anon.Addr(), "anon", dialOptions{})
	if err != nil {
		t.Fatalf("anonymous refused with AllowAnonymous: %v", err)
	}
	if p := c.do(cmd("SET", "k", "v"), req{}); string(p.Payload) != "-ERR not authorized\r\n" {
		t.Errorf("anonymous SET under [anonymous] write_keys = []: %q", p.Payload)
	}
	if p := c.do(cmd("GET", "k"), req{}); string(p.Payload) != "$-1\r\n" {
		t.Errorf("anonymous GET: %q", p.Payload)
	}
	if _, err := tryDial(t, anon.Addr(), "anon2", dialOptions{user: "agent", password: "bad"}); err == nil {
		t.Error("wrong password let in with AllowAnonymous")
	}
}

// CheckPassword is the CONNECT's password check, for the operator's page.
func TestCheckPassword(t *testing.T) {
	b := startBroker(t, Options{UsersFile: writeUsersFile(t)})
	if !b.HasUsers() || !b.CheckPassword("agent", "agent-secret") {
		t.Fatal("the right password refused")
	}
	for _, c := range [][2]string{{"agent", "wrong"}, {"nobody", "agent-secret"}, {"", ""}, {"agent", ""}} {
		if b.CheckPassword(c[0], c[1]) {
			t.Errorf("%q:%q accepted", c[0], c[1])
		}
	}
	if startBroker(t, Options{AllowAnonymous: true}).HasUsers() {
		t.Error("no users file: HasUsers")
	}
}

func TestAuthorization(t *testing.T) {
	b := startBroker(t, Options{UsersFile: writeUsersFile(t)})
	dev := dial(t, b.Addr(), "2042253", dialOptions{user: "device", password: "device-secret"})
	ctx := context.Background()

	if _, err := dev.c.Publish(ctx, &paho.Publish{QoS: 1, Topic: "dev/2042253/Ack", Payload: []byte("{}")}); err != nil {
		t.Errorf("own topic refused: %v", err)
	}
	pr, err := dev.c.Publish(ctx, &paho.Publish{QoS: 1, Topic: "dev/999/Ack", Payload: []byte("{}")})
	if err == nil && (pr == nil || pr.ReasonCode != 0x87) {
		t.Errorf("another device's topic allowed: %+v", pr)
	}
	sa, err := dev.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "faceagent/#", QoS: 1}}})
	if err == nil && (sa == nil || sa.Reasons[0] != 0x87) {
		t.Errorf("subscription outside the rules granted: %+v", sa)
	}

	deny := "-ERR not authorized\r\n"
	for _, s := range []struct {
		payload []byte
		want    string
	}{
		{cmd("SET", "faceagent/gw-01/devices/2042253", "online"), "+OK\r\n"},
		{cmd("GET", "faceagent/gw-01/devices/2042253"), "$6\r\nonline\r\n"},
		{cmd("GET", "faceagent/gw-01/config"), "$-1\r\n"},
		{cmd("SET", "faceagent/gw-01/config", "x"), deny},
		{cmd("DEL", "faceagent/gw-01/config"), deny},
		{cmd("GET", "secrets/x"), deny},
		{cmd("KEYNOTIFY", "secrets/x"), deny},
		{cmd("KEYNOTIFY", "faceagent/gw-01/config"), "+OK\r\n"},
	} {
		if p := dev.do(s.payload, req{}); string(p.Payload) != s.want {
			t.Errorf("%q: %q, want %q", s.payload, p.Payload, s.want)
		}
	}

	mute := dial(t, b.Addr(), "mute", dialOptions{user: "mute", password: "mute", noSubscribe: true})
	pr, err = mute.c.Publish(ctx, &paho.Publish{QoS: 1, Topic: InvokeTopic, Payload: cmd("GET", "k")})
	if err == nil && (pr == nil || pr.ReasonCode != 0x87) {
		t.Errorf("user with publish = [] published: %+v", pr)
	}
}

func TestFilterCovers(t *testing.T) {
	for _, c := range []struct {
		rule, topic string
		want        bool
	}{
		{"a/#", "a/b/c", true},
		{"a/#", "a", true},
		{"a/+/c", "a/b/c", true},
		{"a/+/c", "a/b/d", false},
		{"a/+", "a/#", false},
		{"a/#", "a/+/x", true},
		{"a/b", "a/+", false},
		{"#", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
		{"a/b", "a/b/c", false},
		{"a/b/c", "a/b", false},
	} {
		if got := filterCovers(c.rule, c.topic); got != c.want {
			t.Errorf("filterCovers(%q, %q) = %v", c.rule, c.topic, got)
		}
	}
}

func TestClientLimits(t *testing.T) {
	b := startBroker(t, Options{MaxClients: 1, MaxPacketSize: 1 << 10})
	dial(t, b.Addr(), "first", dialOptions{})
	if _, err := tryDial(t, b.Addr(), "second", dialOptions{}); err == nil {
		t.Fatal("second client let in with MaxClients 1")
	}
	if got := b.Server().Options.Capabilities.MaximumPacketSize; got != 1<<10 {
		t.Fatalf("MaximumPacketSize = %d", got)
	}
}
