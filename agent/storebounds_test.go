package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker/statestore"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/devstate"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/store"
	"github.com/seed0e69bba5/faceagent/hlc"
	"github.com/seed0e69bba5/faceagent/resp3"
)

// The embedded store takes its bounds from [broker]: before, store_max_bytes did not
// exist, keys of any length up to the packet size were stored and KEYNOTIFY registrations
// were unbounded (1,000 SETs of 1 MB keys took the agent from 13 MB to 1.3 GB).
func TestEmbeddedStoreBoundsFromConfig(t *testing.T) {
	cfg, err := config.Parse("b.toml", []byte("[broker]\nlisten = \"127.0.0.1:0\"\npersist = false\n"+
		"store_max_bytes = \"1MiB\"\nstore_max_notify = 4\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newBroker(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st := b.Store()
	clock := hlc.NewClock("test")
	do := func(w statestore.Watcher, args ...string) string {
		cmd := resp3.AppendArrayHeader(nil, len(args))
		for _, a := range args {
			cmd = resp3.AppendBlobString(cmd, a)
		}
		out, _ := st.Do(&statestore.Request{Payload: cmd, Timestamp: clock.Now().String(), HasTimestamp: true, Watcher: w}, nil)
		return string(out)
	}
	quota := "-ERR the quota has been exceeded\r\n"
	long := strings.Repeat("k", int(cfg.Broker.StoreMaxKeySize)+1)
	if got := do(nil, "SET", long, "v"); got != quota {
		t.Errorf("SET of a key over store_max_key_size: %q", got)
	}
	w := &countingWatcher{}
	for i := range 5 {
		want := "+OK\r\n"
		if i == 4 {
			want = quota
		}
		if got := do(w, "KEYNOTIFY", fmt.Sprint("missing-", i)); got != want {
			t.Errorf("registration %d (store_max_notify 4): %q", i, got)
		}
	}
	value := strings.Repeat("v", 60<<10)
	stored := 0
	for i := range 100 {
		if do(nil, "SET", fmt.Sprint("k", i), value) == "+OK\r\n" {
			stored++
		}
	}
	if stored == 0 || stored > 17 || st.Bytes() > 1<<20 {
		t.Errorf("%d values of 60 KiB stored, %d bytes counted, store_max_bytes 1 MiB", stored, st.Bytes())
	}
}

type countingWatcher struct{ n int }

func (w *countingWatcher) Notify(string, statestore.Op, []byte, hlc.Timestamp) { w.n++ }

// /healthz names the devices whose state the store refuses (agent/devstate's
// RefusedWarnings), and stays 200: a restart would not help.
func TestHealthzNamesRefusedDeviceState(t *testing.T) {
	set := devstate.SetterFunc(func(context.Context, string, []byte, time.Duration) error {
		return store.ErrQuotaExceeded
	})
	a, err := New(&Options{Config: config.Default()})
	if err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.Open(t.TempDir(), outbox.SenderFunc(func(context.Context, string, outbox.Command) error { return nil }), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	w := devstate.New(devstate.Options{Devices: []string{"d2"}, Store: set, Status: ob, Prefix: "faceagent/gw/devices/",
		WriteInterval: time.Hour, HeartbeatTimeout: time.Hour, Timeout: time.Second, Metrics: a.m.state})
	ctx, cancel := context.WithCancel(context.Background())
	w.Start(ctx) // writes d2 once at start: refused
	defer func() { cancel(); w.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); len(w.RefusedWarnings()) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the refused start-up write was never recorded")
		}
		time.Sleep(5 * time.Millisecond) // polling the writer's state, not standing in for an event
	}

	a.state = w
	a.running.Store(true)
	m := config.Default().Metrics
	m.Listen = "127.0.0.1:0"
	if err := a.startHTTP(m); err != nil {
		t.Fatal(err)
	}
	defer a.httpServer.Close()
	resp, err := http.Get("http://" + a.httpAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "ok\nwarning: state store refuses the state of device d2 ") ||
		!strings.Contains(string(body), store.ErrQuotaExceeded.Text) {
		t.Fatalf("/healthz: %d %q", resp.StatusCode, body)
	}
	var exp strings.Builder
	if _, err := a.registry.WriteTo(&exp); err != nil {
		t.Fatal(err)
	}
	if want := `faceagent_store_write_refused_total{reason="quota"} 1`; !strings.Contains(exp.String(), want) {
		t.Errorf("/metrics lacks %q", want)
	}
}
