package upstream

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/metrics"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// startBroker starts the embedded broker on a free loopback port with opts (Listen and,
// without TLS, AllowAnonymous set here); it is closed when t ends.
func startBroker(t *testing.T, opts broker.Options) *broker.Broker {
	t.Helper()
	opts.Listen = "127.0.0.1:0"
	opts.AllowAnonymous = true
	br, err := broker.New(&opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := br.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = br.Close() })
	return br
}

// publishQoS1 publishes payload on topic from a back office client of its own and returns
// once the broker acknowledged it.
func publishQoS1(t *testing.T, addr, topic, payload string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "back-office", KeepAlive: 30, CleanStart: true}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Disconnect(&paho.Disconnect{}); <-c.Done() }()
	if _, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(payload)}); err != nil {
		t.Fatal(err)
	}
}

// A task message is acknowledged only once Tasks.Accept took it: refused, it gets no
// PUBACK, the connection is dropped, and the broker delivers it again on the next one (the
// session persists) — then it is accepted and acknowledged, and the broker holds nothing
// more for the agent. Each subscription counts in the metrics and signals Events.
func TestTaskIsAcknowledgedOnlyOnceAccepted(t *testing.T) {
	br := startBroker(t, broker.Options{})
	tasks := newTaskLog()
	tasks.refuse = true
	o := testOptions(br.Addr(), 0, tasks)
	events := make(chan struct{}, 1)
	o.Events = events
	o.Metrics = NewMetrics(metrics.NewRegistry())
	dialWith(t, o)
	if up, n := o.Metrics.Up.Value(), o.Metrics.Connects.Value(); up != 1 || n != 1 {
		t.Fatalf("connected: up %v, connects %v; want 1 and 1", up, n)
	}

	publishQoS1(t, br.Addr(), o.TasksTopic, "task-1")
	waitFor(t, "the task refused", func() bool {
		tasks.mu.Lock()
		defer tasks.mu.Unlock()
		if tasks.refused > 0 {
			tasks.refuse = false
		}
		return tasks.refused > 0
	}, tasks.accepted)
	waitFor(t, "the task delivered again and accepted", func() bool {
		tasks.mu.Lock()
		defer tasks.mu.Unlock()
		return len(tasks.got) == 1
	}, tasks.accepted)
	tasks.mu.Lock()
	got := tasks.got[0]
	tasks.mu.Unlock()
	if got != "task-1" {
		t.Fatalf("accepted %q, want task-1", got)
	}
	waitFor(t, "the second subscription", func() bool { return o.Metrics.Connects.Value() >= 2 }, events)
	pollUntil(t, "the broker to hold nothing in flight for the agent", func() bool {
		cl, ok := br.Server().Clients.Get(o.ClientID)
		return ok && cl.State.Inflight.Len() == 0
	})
	if up := o.Metrics.Up.Value(); up != 1 {
		t.Errorf("up %v after the reconnect, want 1", up)
	}
}

// A task the broker sends again right after the CONNACK reaches Tasks.Accept while paho's
// Connect is still starting the client; accepted there, it is acknowledged all the same.
// paho's manual acknowledgement loses that PUBACK: Connect clears the client's list of
// messages to acknowledge after its reader started, so an acceptance before the clearing
// is forgotten and the broker keeps the task in flight for good. The logger holds Connect
// at its last debug line, the one before that clearing, until the task was accepted, which
// puts the acceptance in that window on every run.
func TestTaskAcceptedWhileConnectingIsAcknowledged(t *testing.T) {
	br := startBroker(t, broker.Options{})
	tasks := &refuseFirst{refused: make(chan struct{}), accepted: make(chan struct{})}
	o := testOptions(br.Addr(), 0, tasks)
	o.Logger = slog.New(&holdConnect{refused: tasks.refused, accepted: tasks.accepted})
	dialWith(t, o)

	publishQoS1(t, br.Addr(), o.TasksTopic, "task-1")
	for _, w := range []struct {
		what string
		ev   <-chan struct{}
	}{{"the task refused", tasks.refused}, {"the task delivered again and accepted", tasks.accepted}} {
		select {
		case <-w.ev:
		case <-time.After(20 * time.Second):
			t.Fatalf("timed out waiting for %s", w.what)
		}
	}
	pollUntil(t, "the broker to hold nothing in flight for the agent", func() bool {
		cl, ok := br.Server().Clients.Get(o.ClientID)
		return ok && cl.State.Inflight.Len() == 0
	})
	tasks.mu.Lock()
	defer tasks.mu.Unlock()
	if len(tasks.got) != 1 || tasks.got[0] != "task-1" {
		t.Errorf("accepted %q, want [task-1]", tasks.got)
	}
}

// refuseFirst is a Tasks that refuses its first message (closing refused) and accepts the
// rest (closing accepted after the first).
type refuseFirst struct {
	mu                sync.Mutex
	calls             int
	got               []string
	refused, accepted chan struct{}
}

func (r *refuseFirst) Accept(_ context.Context, payload []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.calls == 1 {
		close(r.refused)
		return errors.New("refused")
	}
	r.got = append(r.got, string(payload))
	if len(r.got) == 1 {
		close(r.accepted)
	}
	return nil
}

// holdConnect is a slog.Handler that drops every record, and holds paho's Connect at its
// debug line "starting acking routine" (written after its reader started, before it clears
// the messages to acknowledge) once refused is closed, until accepted is (at most 5s).
type holdConnect struct{ refused, accepted <-chan struct{} }

func (h *holdConnect) Enabled(context.Context, slog.Level) bool { return true }
func (h *holdConnect) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *holdConnect) WithGroup(string) slog.Handler            { return h }

func (h *holdConnect) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "paho: starting acking routine" {
		return nil
	}
	select {
	case <-h.refused:
	default:
		return nil
	}
	select {
	case <-h.accepted:
	case <-time.After(5 * time.Second):
	}
	return nil
}

// Over mqtts:// the connection verifies the broker with the CA file and presents the
// client certificate (the broker requires one).
func TestDialMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, "upstream test CA")
	certFile, keyFile := testutil.WriteKeyPair(t, ca.Issue(t, "broker", x509.ExtKeyUsageServerAuth), dir, "broker.pem", "broker.key")
	caFile := ca.WriteCert(t, dir, "ca.pem")
	br := startBroker(t, broker.Options{TLS: broker.TLSOptions{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}})
	clientCert, clientKey := testutil.WriteKeyPair(t, ca.Issue(t, "gw-p", x509.ExtKeyUsageClientAuth), dir, "client.pem", "client.key")

	o := testOptions(br.Addr(), 0, newTaskLog())
	o.URL = "mqtts://" + br.Addr()
	o.TLS = TLSOptions{CAFile: caFile, CertFile: clientCert, KeyFile: clientKey}
	uc := dialWith(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := uc.Publish(ctx, "faceagent/gw-p/results", []byte("r")); err != nil {
		t.Fatalf("publish over TLS: %v", err)
	}
}

// Dial refuses a URL it cannot parse and TLS files it cannot use, naming the setting; with
// a plain URL the TLS files are not read.
func TestDialRefusesBadURLAndTLSFiles(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name, url string
		tls       TLSOptions
		want      string // prefix of the error; "" for none
	}{
		{"url", "mqtt://[::1", TLSOptions{}, "upstream.url: "},
		{"missing CA", "mqtts://127.0.0.1:1", TLSOptions{CAFile: missing}, "upstream.tls_ca: open " + missing + ": no such file or directory"},
		{"CA not PEM", "mqtts://127.0.0.1:1", TLSOptions{CAFile: notPEM}, "upstream.tls_ca: " + notPEM + " holds no PEM certificate"},
		{"missing cert", "ssl://127.0.0.1:1", TLSOptions{CertFile: missing, KeyFile: missing}, "upstream.tls_cert: open " + missing},
		{"plain url", "mqtt://127.0.0.1:1", TLSOptions{CAFile: missing, CertFile: missing}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions("", 0, newTaskLog())
			o.URL, o.TLS = tc.url, tc.tls
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			uc, err := Dial(ctx, o)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Dial: %v", err)
				}
				sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer scancel()
				if err := uc.Close(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Close: %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Dial: %v, want an error starting with %q", err, tc.want)
			}
		})
	}
}

// Dial refuses options without a client id, a tasks topic or a Tasks.
func TestDialRequiresIdentityAndTasks(t *testing.T) {
	for _, change := range []func(*Options){
		func(o *Options) { o.ClientID = "" },
		func(o *Options) { o.TasksTopic = "" },
		func(o *Options) { o.Tasks = nil },
	} {
		o := testOptions("127.0.0.1:1", 0, newTaskLog())
		change(o)
		if _, err := Dial(context.Background(), o); err == nil || !strings.HasPrefix(err.Error(), "upstream: Options.") {
			t.Errorf("Dial(%+v): %v, want it refused", o, err)
		}
	}
}
