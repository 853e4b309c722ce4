package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent"
	"github.com/seed0e69bba5/faceagent/agent/config"
)

// parse reads a test's config; a config error fails the test.
func parse(t testing.TB, src string) *config.Config {
	t.Helper()
	c, err := config.Parse("t.toml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startAgent runs an agent with cfg until stop or the end of the test and returns its
// embedded broker's address ("" without [broker]).
func startAgent(t testing.TB, cfg *config.Config) (addr string, stop func()) {
	t.Helper()
	addr, _, stop = startAgentFull(t, cfg)
	return addr, stop
}

// startAgentFull runs an agent with cfg until stop (or the end of the test; calling stop
// twice is harmless) and waits until it is Ready. Without [metrics] listen in cfg it
// serves /metrics on a free loopback port, for metric.
func startAgentFull(t testing.TB, cfg *config.Config) (addr string, a *agent.Agent, stop func()) {
	t.Helper()
	if cfg.Metrics.Listen == "" {
		cfg.Metrics.Listen = "127.0.0.1:0"
	}
	return startAgentOpts(t, &agent.Options{Config: cfg, Version: "e2e"})
}

// startAgentOpts is startAgentFull with the agent's options as they are (a logger of the
// test's, say).
func startAgentOpts(t testing.TB, opts *agent.Options) (addr string, a *agent.Agent, stop func()) {
	t.Helper()
	a, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("agent not ready")
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent stop: %v", err)
		}
	}
	t.Cleanup(stop)
	return a.BrokerAddr(), a, stop
}

// scrapeClient keeps no connection open between scrapes: a test's agent stops while the
// test still runs, and goleak checks that nothing is left behind.
var scrapeClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// scrape returns what a's /metrics serves.
func scrape(t testing.TB, a *agent.Agent) string {
	t.Helper()
	addr := a.MetricsAddr()
	if addr == "" {
		t.Fatal("the agent serves no /metrics")
	}
	resp, err := scrapeClient.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return string(body)
}

// seriesValue finds series (a name and its labels as /metrics writes them, such as
// `faceagent_broker_dropped_total{reason="session_bytes"}`) in text in the Prometheus
// text format and returns its value.
func seriesValue(text, series string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		rest, ok := strings.CutPrefix(line, series+" ")
		if !ok {
			continue
		}
		// The value, then an optional timestamp.
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

// metric scrapes a and returns the value of series; a series /metrics does not serve fails
// the test.
func metric(t testing.TB, a *agent.Agent, series string) float64 {
	t.Helper()
	text := scrape(t, a)
	v, ok := seriesValue(text, series)
	if !ok {
		t.Fatalf("/metrics lacks %s:\n%s", series, text)
	}
	return v
}

// TestSeriesValue: the scrape helper's parser, on the shapes /metrics writes.
func TestSeriesValue(t *testing.T) {
	text := "# HELP x_total X.\n# TYPE x_total counter\nx_total 12\nx_total_more 5\n" +
		"y{reason=\"a b\"} 3.5\ny{reason=\"c\"} 1e+06 1700000000\n"
	for _, c := range []struct {
		series string
		want   float64
		ok     bool
	}{
		{"x_total", 12, true}, {"x_total_more", 5, true}, {`y{reason="a b"}`, 3.5, true},
		{`y{reason="c"}`, 1e6, true}, {"x", 0, false}, {`y{reason="d"}`, 0, false}, {"y", 0, false},
	} {
		if got, ok := seriesValue(text, c.series); got != c.want || ok != c.ok {
			t.Errorf("seriesValue(%s) = %v %v, want %v %v", c.series, got, ok, c.want, c.ok)
		}
	}
}

// pollUntil checks cond every 10ms until it holds: for conditions no event announces
// (a metric, a file), within 30 s.
func pollUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitFor waits for cond, checked again on every poke of ev, within 20 s.
func waitFor(t testing.TB, what string, cond func() bool, ev <-chan struct{}) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-ev:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// poke wakes whoever waits on c (capacity 1) without blocking.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// waitUpstream waits until a is subscribed to its tasks on the upstream broker.
func waitUpstream(t testing.TB, a *agent.Agent) {
	t.Helper()
	select {
	case <-a.UpstreamConnected():
	case <-time.After(20 * time.Second):
		t.Fatal("never connected upstream")
	}
}
