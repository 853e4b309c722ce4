package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/boards"
)

func noEnv(string) (string, bool) { return "", false }

var testOpts = &Options{LookupEnv: noEnv}

func TestMinimalGetsDefaults(t *testing.T) {
	c, err := Load("testdata/minimal.toml", testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.GatewayID != "gw-01" || c.Upstream == nil || c.Upstream.URL != "mqtt://127.0.0.1:1883" {
		t.Fatalf("agent/upstream = %+v %+v", c.Agent, c.Upstream)
	}
	if c.Broker != nil || c.Intake.HTTP != nil {
		t.Errorf("sections the file leaves out must stay off: broker=%v http=%v", c.Broker, c.Intake.HTTP)
	}
	if c.Dispatch != defaultDispatch || c.Store != defaultStore || c.Topics != defaultTopics || c.Log != defaultLog || c.Reports != defaultReports {
		t.Errorf("defaults not applied: %+v", c)
	}
	if c.Upstream.KeepAlive != defaultUpstream.KeepAlive {
		t.Errorf("upstream defaults not applied: %+v", c.Upstream)
	}
	want := DefaultDevice()
	want.ID = "2042253"
	if !reflect.DeepEqual(c.Devices, []Device{want}) {
		t.Errorf("devices = %+v, want %+v", c.Devices, want)
	}
	if c.File != "testdata/minimal.toml" {
		t.Errorf("File = %q", c.File)
	}
}

func TestBrokerOnly(t *testing.T) {
	c, err := Load("testdata/broker-only.toml", testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if !c.BrokerOnly() || c.Broker.Listen != "127.0.0.1:0" || !c.Broker.Anonymous() || !c.Broker.Persist {
		t.Fatalf("broker-only config: %+v %+v", c, c.Broker)
	}
}

func TestSerialAndOverrides(t *testing.T) {
	c, err := Load("testdata/serial.toml", testOpts)
	if err != nil {
		t.Fatal(err)
	}
	a1, a2, m1 := c.Device("a1"), c.Device("a2"), c.Device("m1")
	if a1.Baud != 9600 || a1.Parity != "even" || a1.DataBits != 8 || a1.StopBits != 1 || !a1.HasHeartbeat() {
		t.Errorf("a1 = %+v", a1)
	}
	if a2.Baud != 115200 || a2.HasHeartbeat() {
		t.Errorf("a2 = %+v", a2)
	}
	eff := m1.Effective(c.Dispatch)
	if eff.RetryInterval.Duration != time.Second || eff.MaxTries != 2 || eff.HeartbeatTimeout.Duration != 10*time.Second {
		t.Errorf("m1 effective = %+v", eff)
	}
	if eff := a1.Effective(c.Dispatch); eff.RetryInterval.Duration != 500*time.Millisecond || eff.MaxTries != 3 {
		t.Errorf("a1 effective = %+v", eff)
	}
	if c.Device("nope") != nil {
		t.Error("Device of an unknown id must be nil")
	}
	if got := c.Topics.Ack("a1"); got != "dev/face/a1/Ack" {
		t.Errorf("Ack topic = %q", got)
	}
}

// configs/agent.toml must document every key of the schema, and its values must be the
// defaults (except the keys marked EXAMPLE).
func TestAgentTOMLDocumentsEveryKey(t *testing.T) {
	path := filepath.Join("..", "..", "configs", "agent.toml")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ix := indexLines(string(src))
	written := map[string]bool{}
	for _, e := range ix.entries {
		written[e.plain] = true
	}
	for _, k := range SchemaKeys() {
		if !written[k] {
			t.Errorf("%s does not document key %q", path, k)
		}
	}
	c, err := Load(path, testOpts)
	if err != nil {
		t.Fatalf("the annotated example must be valid: %v", err)
	}
	if c.Dispatch != defaultDispatch || c.Store != defaultStore || c.Topics != defaultTopics ||
		c.Log != defaultLog || c.Intake.MaxBatch != defaultIntake.MaxBatch ||
		c.Intake.MaxMessageSize != defaultIntake.MaxMessageSize || c.Intake.MaxDeadLetters != defaultIntake.MaxDeadLetters ||
		c.Intake.MaxDeadLetterBytes != defaultIntake.MaxDeadLetterBytes || c.Reports != defaultReports || c.Metrics != defaultMetrics {
		t.Errorf("agent.toml values differ from the defaults")
	}
	a := c.Agent
	a.GatewayID = ""
	if a != defaultAgent {
		t.Errorf("[agent] = %+v, defaults %+v", a, defaultAgent)
	}
	b := *c.Broker
	b.AllowAnonymous = nil
	if b != defaultBroker || !c.Broker.Anonymous() {
		t.Errorf("[broker] = %+v, defaults %+v", b, defaultBroker)
	}
	u := *c.Upstream
	u.URL = ""
	if u != defaultUpstream {
		t.Errorf("[upstream] = %+v, defaults %+v", u, defaultUpstream)
	}
	h := *c.Intake.HTTP
	h.URL = ""
	if h != defaultIntakeHTTP {
		t.Errorf("[intake.http] = %+v, defaults %+v", h, defaultIntakeHTTP)
	}
	serial := c.Devices[1]
	want := DefaultDevice()
	if serial.Baud != want.Baud || serial.DataBits != want.DataBits || serial.Parity != want.Parity ||
		serial.StopBits != want.StopBits || !serial.HasHeartbeat() ||
		serial.Effective(c.Dispatch) != c.Dispatch {
		t.Errorf("serial device example differs from the defaults: %+v", serial)
	}
}

func TestUnknownKeys(t *testing.T) {
	src := `[agent]
gateway_id = "gw"
gatewayid = "x"

[dispatch]
Max_Tries = 3
[bogus]
a = 1
b = 2

[upstream]
url = "mqtt://h:1"

[[devices]]
id = "a"

[[devices]]
id = "b"
colour = "red"
`
	_, err := Parse("f.toml", []byte(src), testOpts)
	want := []string{
		`f.toml:3: agent.gatewayid: unknown key (did you mean "agent.gateway_id"?)`,
		`f.toml:6: dispatch.Max_Tries: unknown key (did you mean "dispatch.max_tries"?)`,
		`f.toml:7: bogus: unknown key`,
		`f.toml:19: devices[1].colour: unknown key`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("got\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}
	var es Errors
	if !errors.As(err, &es) || len(es) != 4 || es[3].Line != 19 || es[3].Key != "devices[1].colour" {
		t.Fatalf("Errors = %#v", es)
	}
}

func TestSyntaxAndTypeErrorsHaveLines(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"syntax", "[agent]\ngateway_id = \"gw\"\nx = = 1\n", "f.toml:3: "},
		{"duplicate", "[agent]\ngateway_id = \"a\"\ngateway_id = \"b\"\n", "f.toml:3: "},
		{"bad duration", "[agent]\ngateway_id = \"g\"\n[broker]\n[dispatch]\nretry_interval = \"2 parsecs\"\n",
			`f.toml:5: dispatch.retry_interval: invalid duration "2 parsecs"`},
		{"duration without unit", "[agent]\ngateway_id = \"g\"\n[broker]\n[dispatch]\nretry_interval = 30\n",
			`f.toml:5: dispatch.retry_interval: duration "30" has no unit (write e.g. "30s")`},
		{"string for int", "[agent]\ngateway_id = \"g\"\n[broker]\n[dispatch]\nmax_tries = \"5\"\n",
			"f.toml:5: dispatch.max_tries: incompatible types"},
		{"bad size", "[agent]\ngateway_id = \"g\"\ngomemlimit = \"lots\"\n[broker]\n",
			`f.toml:3: agent.gomemlimit: invalid size "lots"`},
		{"second device's duration", "[agent]\ngateway_id = \"g\"\n[broker]\n[[devices]]\nid = \"a\"\nretry_interval = \"1s\"\n[[devices]]\nid = \"b\"\nretry_interval = \"xx\"\n[[devices]]\nid = \"c\"\nretry_interval = \"3s\"\n",
			`f.toml:9: devices[1].retry_interval: invalid duration "xx"`},
		{"first device's duration", "[agent]\ngateway_id = \"g\"\n[broker]\n[[devices]]\nid = \"a\"\nretry_interval = \"yy\"\n[[devices]]\nid = \"b\"\nretry_interval = \"2s\"\n",
			`f.toml:6: devices[0].retry_interval: invalid duration "yy"`},
		{"table as value", "agent = 5\n", "f.toml:1: agent: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.toml", []byte(tt.src), testOpts)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("got  %v\nwant prefix %s", err, tt.want)
			}
		})
	}
}

func TestSecrets(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := `[agent]
gateway_id = "g"
[upstream]
url = "mqtts://h:8883"
username = "agent"
password_file = "` + pw + `"
[intake.http]
url = "http://127.0.0.1:1/tasks"
auth_value_env = "TOKEN"
[ui]
listen = "127.0.0.1:0"
token_file = "` + pw + `"
`
	env := func(k string) (string, bool) {
		if k == "TOKEN" {
			return "Bearer abc", true
		}
		return "", false
	}
	c, err := Parse("f.toml", []byte(src), &Options{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	if c.Upstream.Password != "s3cret" || c.Intake.HTTP.AuthValue != "Bearer abc" || c.UI.Token != "s3cret" {
		t.Fatalf("secrets = %q %q %q", c.Upstream.Password, c.Intake.HTTP.AuthValue, c.UI.Token)
	}
	var out bytes.Buffer
	if err := c.WriteTOML(&out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "s3cret") || strings.Contains(out.String(), "Bearer abc") {
		t.Fatalf("the effective config must not print secrets:\n%s", out.String())
	}
}

func TestBoardProfile(t *testing.T) {
	profile := "[agent]\ngomemlimit = \"48MiB\"\n[dispatch]\nmax_queue_per_device = 500\nmax_queue_total = 5000\n[broker]\nmax_clients = 16\n"
	boards := func(name string) ([]byte, error) {
		if name == "tiny" {
			return []byte(profile), nil
		}
		return nil, errors.New("no such board")
	}
	src := "[agent]\ngateway_id = \"g\"\nboard = \"tiny\"\n[dispatch]\nmax_queue_total = 9000\n[upstream]\nurl = \"mqtt://h:1\"\n"
	c, err := Parse("f.toml", []byte(src), &Options{LookupEnv: noEnv, Board: boards})
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.GoMemLimit != 48<<20 || c.Dispatch.MaxQueuePerDevice != 500 {
		t.Errorf("board values not applied: %+v", c.Agent)
	}
	if c.Dispatch.MaxQueueTotal != 9000 {
		t.Errorf("explicit key must win over the board: %d", c.Dispatch.MaxQueueTotal)
	}
	if c.Broker != nil {
		t.Errorf("a board profile must not switch the broker on")
	}

	_, err = Parse("f.toml", []byte(strings.Replace(src, "tiny", "huge", 1)), &Options{LookupEnv: noEnv, Board: boards})
	if err == nil || err.Error() != "f.toml:3: agent.board: no such board" {
		t.Errorf("unknown board: %v", err)
	}
	bad := func(string) ([]byte, error) { return []byte("[dispatch]\nretries = 1\n"), nil }
	_, err = Parse("f.toml", []byte(src), &Options{LookupEnv: noEnv, Board: bad})
	if err == nil || err.Error() != `board "tiny":2: dispatch.retries: unknown key` {
		t.Errorf("bad profile: %v", err)
	}
}

// The real profiles from package boards: a board's values fill in, the file's win.
func TestBoardsPackage(t *testing.T) {
	src := "[agent]\ngateway_id = \"g\"\nboard = \"rpi4-arm64\"\n[broker]\n[journal]\nbatch_window = \"50ms\"\n"
	c, err := Parse("f.toml", []byte(src), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := boards.Lookup("rpi4-arm64")
	if err != nil {
		t.Fatal(err)
	}
	if int64(c.Agent.GoMemLimit) != p.GOMEMLIMIT || c.Agent.DataDir != p.DataDir || c.Journal.Sync != string(p.JournalSync) {
		t.Errorf("board not applied: agent %+v journal %+v, profile %+v", c.Agent, c.Journal, p)
	}
	if c.Journal.BatchWindow.Duration != 50*time.Millisecond {
		t.Errorf("explicit batch_window must win: %s", c.Journal.BatchWindow)
	}
	for _, name := range boards.Names() {
		src := "[agent]\ngateway_id = \"g\"\nboard = \"" + name + "\"\n[broker]\n"
		if _, err := Parse("f.toml", []byte(src), testOpts); err != nil {
			t.Errorf("board %s: %v", name, err)
		}
	}
	_, err = Parse("f.toml", []byte(strings.Replace(src, "rpi4-arm64", "pdp11", 1)), testOpts)
	if !errors.Is(err, boards.ErrUnknownBoard) || !strings.HasPrefix(err.Error(), "f.toml:3: agent.board: ") {
		t.Errorf("unknown board: %v", err)
	}
}

// A small board's store_max_bytes fills in under [broker], without switching the broker on;
// the file's value wins.
func TestBoardStoreMaxBytes(t *testing.T) {
	p, err := boards.Lookup("imx6ull-armv7")
	if err != nil || p.Broker.StoreMaxBytes == 0 || p.Broker.StoreMaxBytes >= int64(defaultBroker.StoreMaxBytes) {
		t.Fatalf("imx6ull-armv7 should set a store_max_bytes below the default: %+v %v", p, err)
	}
	base := "[agent]\ngateway_id = \"g\"\nboard = \"imx6ull-armv7\"\n"
	c, err := Parse("f.toml", []byte(base+"[broker]\n"), testOpts)
	if err != nil || int64(c.Broker.StoreMaxBytes) != p.Broker.StoreMaxBytes {
		t.Fatalf("board store_max_bytes not applied: %+v %v", c.Broker, err)
	}
	c, err = Parse("f.toml", []byte(base+"[broker]\nstore_max_bytes = \"12MiB\"\n"), testOpts)
	if err != nil || c.Broker.StoreMaxBytes != 12<<20 {
		t.Fatalf("explicit store_max_bytes must win: %+v %v", c.Broker, err)
	}
	c, err = Parse("f.toml", []byte(base+"[upstream]\nurl = \"mqtt://h:1\"\n"), testOpts)
	if err != nil || c.Broker != nil {
		t.Fatalf("a board's store_max_bytes must not switch the broker on: %+v %v", c.Broker, err)
	}
}

// A board with little storage sets a smaller face store budget; the file's value wins.
func TestBoardFacesMaxBytes(t *testing.T) {
	p, err := boards.Lookup("rpi0-armv6")
	if err != nil || p.FacesMaxBytes == 0 || p.FacesMaxBytes >= int64(defaultFaces.MaxBytes) {
		t.Fatalf("rpi0-armv6 should set a faces max_bytes below the default: %+v %v", p, err)
	}
	base := "[agent]\ngateway_id = \"g\"\nboard = \"rpi0-armv6\"\n[broker]\n"
	c, err := Parse("f.toml", []byte(base), testOpts)
	if err != nil || int64(c.Faces.MaxBytes) != p.FacesMaxBytes {
		t.Fatalf("board faces max_bytes not applied: %+v %v", c.Faces, err)
	}
	c, err = Parse("f.toml", []byte(base+"[faces]\nmax_bytes = \"2GiB\"\n"), testOpts)
	if err != nil || c.Faces.MaxBytes != 2<<30 {
		t.Fatalf("explicit faces max_bytes must win: %+v %v", c.Faces, err)
	}
}

// The small boards take smaller SetWhitelist tasks than the default, in step with their
// memory (the larger board's gomemlimit, the larger its bound); the file's value wins, and
// a board whose bound the file's whitelist.max_persons undercuts is an error naming the key.
func TestBoardIntakeMaxWhitelist(t *testing.T) {
	prev := int64(0)
	for _, name := range []string{"imx6ull-armv7", "rpi0-armv6"} { // increasing gomemlimit
		p, err := boards.Lookup(name)
		if err != nil || p.IntakeMaxWhitelist == 0 || p.IntakeMaxWhitelist >= defaultIntake.MaxWhitelist {
			t.Fatalf("%s should set an intake max_whitelist below the default: %+v %v", name, p, err)
		}
		if p.GOMEMLIMIT <= prev {
			t.Fatalf("%s: boards not in increasing gomemlimit", name)
		}
		prev = p.GOMEMLIMIT
		base := "[agent]\ngateway_id = \"g\"\nboard = \"" + name + "\"\n[broker]\n"
		c, err := Parse("f.toml", []byte(base), testOpts)
		if err != nil || c.Intake.MaxWhitelist != p.IntakeMaxWhitelist {
			t.Fatalf("%s: board max_whitelist not applied: %d %v", name, c.Intake.MaxWhitelist, err)
		}
		c, err = Parse("f.toml", []byte(base+"[intake]\nmax_whitelist = 9000\n"), testOpts)
		if err != nil || c.Intake.MaxWhitelist != 9000 {
			t.Fatalf("%s: explicit max_whitelist must win: %d %v", name, c.Intake.MaxWhitelist, err)
		}
		_, err = Parse("f.toml", []byte(base+"[whitelist]\nmax_persons = 100\n"), testOpts)
		if err == nil || !strings.Contains(err.Error(), "intake.max_whitelist") {
			t.Fatalf("%s: a max_persons below the board's max_whitelist: %v", name, err)
		}
	}
	for _, name := range []string{"rpi4-arm64", "rk356x-arm64", "rpi3-armv7"} {
		if p, err := boards.Lookup(name); err != nil || p.IntakeMaxWhitelist != 0 {
			t.Fatalf("%s keeps the default max_whitelist: %+v %v", name, p, err)
		}
	}
}

func TestEffectiveConfigRoundTrips(t *testing.T) {
	for _, f := range []string{"testdata/minimal.toml", "testdata/broker-only.toml", "testdata/serial.toml", "../../configs/agent.toml"} {
		c, err := Load(f, testOpts)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := c.WriteTOML(&out); err != nil {
			t.Fatal(err)
		}
		c2, err := Parse("effective", out.Bytes(), testOpts)
		if err != nil {
			t.Fatalf("%s: the printed config does not load: %v\n%s", f, err, out.String())
		}
		c2.File = c.File
		if !reflect.DeepEqual(c, c2) {
			t.Errorf("%s: round trip differs:\n%+v\n%+v\n%s", f, c, c2, out.String())
		}
	}
}

func TestLoadMissingAndHuge(t *testing.T) {
	_, err := Load("testdata/does-not-exist.toml", nil)
	if err == nil || !strings.HasPrefix(err.Error(), "testdata/does-not-exist.toml: open") {
		t.Errorf("missing file: %v", err)
	}
	_, err = Parse("big", bytes.Repeat([]byte("#"), MaxFileSize+1), nil)
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("huge file: %v", err)
	}
}

func TestDurationAndSize(t *testing.T) {
	for in, want := range map[string]time.Duration{"2s": 2 * time.Second, "7d": 7 * 24 * time.Hour, "1m30s": 90 * time.Second, " 5ms ": 5 * time.Millisecond} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "5", "-1s", "1.5d", "d", "99999999999999d"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
	}
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "64MiB": 64 << 20, "1 KB": 1000, "2GiB": 2 << 30, "3B": 3} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "-1", "1.5MiB", "MiB", "9999999999TiB", "12 parsecs"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted", in)
		}
	}
	for _, v := range []Size{0, 1, 1023, 1024, 64 << 20, 3 << 40} {
		b, _ := v.MarshalText()
		var back Size
		if err := back.UnmarshalText(b); err != nil || back != v {
			t.Errorf("Size %d -> %s -> %d, %v", v, b, back, err)
		}
	}
}
