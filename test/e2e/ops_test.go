package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/device/sim"
)

// The operations files that name the agent's series: the alerting rules, their unit
// tests and the Grafana dashboard. A series renamed in the code and not here breaks the
// build through TestOpsConfigsUseLiveSeries.
var opsFiles = []string{
	"configs/prometheus/alerts.yml",
	"configs/prometheus/alerts_test.yml",
	"configs/grafana/faceagent.json",
}

// seriesName finds the agent's series names in a PromQL expression or any text: every
// series the agent serves is named faceagent_… or process_…, and nothing else in the
// rules (alert names are CamelCase, labels and their values are not prefixed so) is.
var seriesName = regexp.MustCompile(`\b(?:faceagent|process)_[A-Za-z0-9_:]*`)

// servedNames returns every series name in a /metrics exposition: the families declared
// by # TYPE (a histogram's as its _bucket, _sum and _count), so a labelled family that has
// no series yet counts as served, and the names of the samples.
func servedNames(exposition string) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(exposition))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			f := strings.Fields(rest)
			if len(f) != 2 {
				continue
			}
			names[f[0]] = true
			if f[1] == "histogram" {
				names[f[0]+"_bucket"], names[f[0]+"_sum"], names[f[0]+"_count"] = true, true, true
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// referencedNames returns the series names a file of opsFiles uses, with the line of
// their first use. The dashboard is parsed as JSON first (a file Grafana could not import
// fails here), and every string in it is searched.
func referencedNames(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".json") {
		var dash struct {
			Title  string            `json:"title"`
			Panels []json.RawMessage `json:"panels"`
		}
		if err := json.Unmarshal(b, &dash); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if dash.Title == "" || len(dash.Panels) == 0 {
			t.Fatalf("%s: no title or no panels: not a dashboard", path)
		}
	}
	used := map[string]int{}
	for i, line := range strings.Split(string(b), "\n") {
		for _, name := range seriesName.FindAllString(line, -1) {
			if _, ok := used[name]; !ok {
				used[name] = i + 1
			}
		}
	}
	return used
}

func TestSeriesNamesAreFoundInExpressions(t *testing.T) {
	got := seriesName.FindAllString(`sum by (instance) (rate(faceagent_x_total{device="t1",journal="outbox"}[5m])) / on (instance) faceagent_limit{key="a.b"} > 0.8 and process_resident_memory_bytes`, -1)
	if want := []string{"faceagent_x_total", "faceagent_limit", "process_resident_memory_bytes"}; !slices.Equal(got, want) {
		t.Errorf("found %v, want %v", got, want)
	}
	served := servedNames("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\n# TYPE faceagent_v gauge\nfaceagent_s{a=\"b\"} 1\n")
	for _, n := range []string{"h_bucket", "h_sum", "h_count", "faceagent_v", "faceagent_s"} {
		if !served[n] {
			t.Errorf("%s not found served", n)
		}
	}
}

// TestOpsConfigsUseLiveSeries starts an agent (embedded broker, data_dir, a protocol 2
// terminal simulated), scrapes /metrics and checks that every series the alerting rules,
// their unit tests and the dashboard name is one it serves. It also checks the series the
// rules were written for: the configured bounds (faceagent_limit) and the per-terminal
// sync state.
func TestOpsConfigsUseLiveSeries(t *testing.T) {
	root := filepath.Join("..", "..")
	dir := t.TempDir()
	cfg := parse(t, fmt.Sprintf("[agent]\ngateway_id = \"ops\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[dispatch]\nheartbeat_timeout = \"2s\"\n[[devices]]\nid = \"t1\"\n[[devices]]\nid = \"t2\"\n[[devices]]\nid = \"t3\"\n", dir))
	addr, a, stop := startAgentFull(t, cfg)
	defer stop()
	fleet, err := sim.StartMQTT("mqtt://"+addr, []string{"t1", "t2"}, sim.Options{Seed: 1, HeartbeatInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()

	// One task makes t1's desired list the agent's; then its state is judged. t2 gets no
	// task: unmanaged, it must not have the series (an alert would fire for it forever).
	bo := connectBackOffice(t, addr, "ops")
	bo.publish("faceagent/ops/tasks", []byte(`{"taskId":"o-1","deviceId":"t1","op":"AddPerson","person":{"id":"p1","name":"Ann"}}`))
	var body string
	deadline := time.Now().Add(20 * time.Second)
	for {
		body = scrape(t, a)
		if v, ok := seriesValue(body, `faceagent_terminal_in_sync{device="t1"}`); ok && v == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("faceagent_terminal_in_sync{device=\"t1\"} not 1 within 20 s:\n%s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := seriesValue(body, `faceagent_terminal_in_sync{device="t2"}`); ok {
		t.Error("faceagent_terminal_in_sync has a series for t2, which no task named (unmanaged)")
	}
	if _, ok := seriesValue(body, `faceagent_terminal_in_sync{device="t3"}`); ok {
		t.Error("faceagent_terminal_in_sync has a series for t3, which never sent a heartbeat")
	}
	for series, want := range map[string]float64{
		`faceagent_limit{key="dispatch.max_queue_total"}`: float64(cfg.Dispatch.MaxQueueTotal),
		`faceagent_limit{key="intake.max_deadletters"}`:   float64(cfg.Intake.MaxDeadLetters),
		`faceagent_limit{key="broker.store_max_bytes"}`:   float64(cfg.Broker.StoreMaxBytes),
		`faceagent_upstream_configured`:                   0,
	} {
		if got, ok := seriesValue(body, series); !ok || got != want {
			t.Errorf("%s = %v (served %v), want %v", series, got, ok, want)
		}
		if want == 0 && strings.HasPrefix(series, "faceagent_limit") {
			t.Errorf("%s: the config's bound is 0: defaults not applied?", series)
		}
	}

	served := servedNames(body)
	for _, f := range opsFiles {
		used := referencedNames(t, filepath.Join(root, f))
		if len(used) < 5 {
			t.Errorf("%s names only %d series: is it the right file?", f, len(used))
		}
		for name, line := range used {
			if !served[name] {
				t.Errorf("%s:%d: %s is not a series the agent serves", f, line, name)
			}
		}
	}
}
