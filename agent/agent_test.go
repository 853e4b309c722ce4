package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"go.uber.org/goleak"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/report"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func parse(t *testing.T, src string) *config.Config {
	t.Helper()
	c, err := config.Parse("t.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRunBrokerOnly(t *testing.T) {
	cfg := parse(t, "[agent]\ndata_dir = \""+filepath.Join(t.TempDir(), "d")+"\"\n[broker]\nlisten = \"127.0.0.1:0\"\nmax_clients = 7\nserver_keep_alive = \"7s\"\n"+
		"max_subscriptions = 9\nmax_pending_write_bytes = \"64KiB\"\nmax_session_bytes = \"2MiB\"\nmax_queued_bytes = \"3MiB\"\nmax_retained_bytes = \"5KiB\"\n"+
		"[metrics]\nlisten = \"127.0.0.1:0\"\n")
	a, err := New(&Options{Config: cfg, Version: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Healthy() == nil {
		t.Error("healthy before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("not ready")
	}
	if a.BrokerAddr() == "" || a.Healthy() != nil {
		t.Fatalf("addr %q healthy %v", a.BrokerAddr(), a.Healthy())
	}
	caps := a.broker.Server().Options.Capabilities
	if caps.MaximumClients != 7 || caps.MaximumSubscriptions != 9 || caps.MaximumClientWritesPendingBytes != 64<<10 ||
		caps.MaximumSessionBytes != 2<<20 || caps.MaximumQueuedBytes != 3<<20 || caps.MaximumRetainedBytes != 5<<10 {
		t.Errorf("[broker] bounds not applied: %+v", caps)
	}
	if got := serverKeepAlive(t, a.BrokerAddr()); got != 7 {
		t.Errorf("server_keep_alive not applied: a client asking keep-alive 0 was told %d s", got)
	}
	resp, err := http.Get("http://" + a.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "faceagent_up 1\n") || !strings.Contains(string(body), `faceagent_build_info{version="t1"} 1`) {
		t.Errorf("metrics:\n%s", body)
	}
	if err := a.Run(ctx); !errors.Is(err, ErrAlreadyStarted) {
		t.Errorf("second Run: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("clean stop: %v", err)
	}
	if a.Healthy() == nil {
		t.Error("healthy after stop")
	}
}

// serverKeepAlive connects to the broker at addr asking for keep-alive 0 and returns the
// Server Keep Alive of its CONNACK (0: none).
func serverKeepAlive(t *testing.T, addr string) uint16 {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := c.Connect(ctx, &paho.Connect{ClientID: "keepalive-0", KeepAlive: 0, CleanStart: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = c.Disconnect(&paho.Disconnect{})
		<-c.Done()
	}()
	if ack.Properties == nil || ack.Properties.ServerKeepAlive == nil {
		return 0
	}
	return *ack.Properties.ServerKeepAlive
}

func TestReload(t *testing.T) {
	base := "[agent]\ngateway_id = \"g\"\n[broker]\n"
	level := new(slog.LevelVar)
	a, _ := New(&Options{Config: parse(t, base), LogLevel: level})

	if err := a.Reload(parse(t, base+"[log]\nlevel = \"debug\"\n[dispatch]\nmax_tries = 9\n")); err != nil {
		t.Fatalf("live reload: %v", err)
	}
	if level.Level() != slog.LevelDebug || a.Config().Dispatch.MaxTries != 9 {
		t.Errorf("not applied: level %v tries %d", level.Level(), a.Config().Dispatch.MaxTries)
	}
	err := a.Reload(parse(t, "[agent]\ngateway_id = \"g\"\n[broker]\nlisten = \"127.0.0.1:1884\"\n[metrics]\nlisten = \"127.0.0.1:9\"\n"))
	if !errors.Is(err, ErrNeedsRestart) || !strings.Contains(err.Error(), "[[broker] [metrics]]") {
		t.Errorf("restart-only change: %v", err)
	}
	if a.Config().Broker.Listen != "127.0.0.1:1883" || a.Config().Metrics.Listen != "" {
		t.Errorf("restart-only values must not be taken: %+v", a.Config().Broker)
	}
	err = a.Reload(parse(t, base+"[reports]\nmax_forwarded = 16\n"))
	if !errors.Is(err, ErrNeedsRestart) || !strings.Contains(err.Error(), "[[reports]]") || a.Config().Reports.MaxForwarded != 8192 {
		t.Errorf("[reports] opens its backlog at start only: %v, max_forwarded %d", err, a.Config().Reports.MaxForwarded)
	}
	if level.Level() != slog.LevelInfo {
		t.Errorf("level must follow the new file: %v", level.Level())
	}
}

func TestNewNeedsConfig(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Error("New(nil) accepted")
	}
}

// The [broker] bounds' defaults are the embedded broker's own (agent/config cannot import
// agent/broker: the values are written twice).
func TestBrokerBoundDefaults(t *testing.T) {
	d := config.DefaultBroker()
	if d.MaxClients != broker.DefaultMaxClients || d.MaxSubscriptions != broker.DefaultMaxSubscriptions ||
		int64(d.MaxPendingWriteBytes) != broker.DefaultMaxPendingWriteBytes || int64(d.MaxSessionBytes) != broker.DefaultMaxSessionBytes ||
		int64(d.MaxQueuedBytes) != broker.DefaultMaxQueuedBytes || int64(d.MaxRetainedBytes) != broker.DefaultMaxRetainedBytes ||
		int64(d.MaxInboundBytes) != broker.DefaultMaxInboundBytes {
		t.Errorf("config defaults %+v differ from agent/broker's", d)
	}
}

// The report backlogs' bounds in agent/config default to agent/report's own (agent/config
// cannot import agent/report: the values are written twice).
func TestReportBoundDefaults(t *testing.T) {
	d := config.Default()
	if d.Intake.MaxDeadLetters != report.MaxDeadLetters || int(d.Intake.MaxDeadLetterBytes) != report.MaxDeadLetterBytes ||
		d.Reports.MaxForwarded != report.MaxForwarded || int(d.Reports.MaxForwardedBytes) != report.MaxForwardedBytes {
		t.Errorf("config defaults %+v %+v differ from agent/report's", d.Intake, d.Reports)
	}
}
