package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"go.uber.org/goleak"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeAgent is an in-process mochi broker with an inline subscriber playing the agent:
// it parses each task message like the agent does and publishes a result for every task
// (failed for person "refuse-me", none for person "never"), and a deadletter for each
// reject.
type fakeAgent struct {
	srv  *mqtt.Server
	url  string
	work chan []byte
	wg   sync.WaitGroup
}

func startFakeAgent(t *testing.T, gw string, known ...string) *fakeAgent {
	t.Helper()
	srv := mqtt.New(&mqtt.Options{InlineClient: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := srv.AddHook(new(allowAll), nil); err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreeAddr(t)
	if err := srv.AddListener(listeners.NewTCP(listeners.Config{ID: "t", Address: addr})); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	f := &fakeAgent{srv: srv, url: "mqtt://" + addr, work: make(chan []byte, 1024)}
	isKnown := func(id string) bool {
		for _, k := range known {
			if k == id {
				return true
			}
		}
		return false
	}
	// Publishing from inside the inline handler would run on the publisher's read loop;
	// hand the work to a goroutine as the real agent does.
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for payload := range f.work {
			b := wire.Parse(payload, wire.Limits{KnownDevice: isKnown, MaxWhitelist: wire.DefaultMaxWhitelist})
			for _, r := range b.Rejects {
				dl, _ := json.Marshal(r)
				_ = srv.Publish("faceagent/"+gw+"/deadletter", dl, false, 1)
			}
			for i, task := range b.Tasks {
				res := wire.Result{TaskID: task.TaskID, DeviceID: task.DeviceID, MessageID: task.MessageID(), Status: wire.Succeeded, Tries: 1, DurationMs: int64(10 + i)}
				if task.Op == wire.SetWhitelist {
					// Against an empty previous list: every person is added, after a
					// reconciliation reported as started and done.
					res.WhitelistCounts = &wire.WhitelistCounts{Added: len(task.Persons)}
					for _, st := range []wire.SyncStatus{wire.SyncStarted, wire.SyncDone} {
						rep := wire.SyncReport{DeviceID: task.DeviceID, Reason: wire.SyncSetWhitelist, Status: st,
							Missing: len(task.Persons), At: "2026-11-27T15:04:05.000Z"}
						out, err := rep.AppendJSON(nil)
						if err != nil {
							panic(err)
						}
						_ = srv.Publish(wire.GatewayTopics(gw).DeviceSync(task.DeviceID), out, false, 1)
					}
				}
				switch task.Person.ID {
				case "refuse-me":
					res.Status, res.Error = wire.Failed, "terminal refused: code 3"
				case "never":
					continue
				}
				out, _ := json.Marshal(res)
				_ = srv.Publish("faceagent/"+gw+"/results", out, false, 1)
			}
		}
	}()
	err := srv.Subscribe("faceagent/"+gw+"/tasks", 1, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		f.work <- append([]byte(nil), pk.Payload...)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Close()
		close(f.work)
		f.wg.Wait()
	})
	return f
}

// allowAll lets every client connect and use every topic (mochi's auth package would
// pull in yaml for its ledger).
type allowAll struct{ mqtt.HookBase }

func (allowAll) ID() string { return "allow-all" }
func (allowAll) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}
func (allowAll) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }
func (allowAll) OnACLCheck(*mqtt.Client, string, bool) bool              { return true }

func runTaskctl(t *testing.T, tty bool, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, args, strings.NewReader(""), &out, &errOut, tty)
	return out.String(), errOut.String(), code
}

func summaryRow(t *testing.T, out, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+(.*)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary row %q in\n%s", name, out)
	}
	return strings.Join(strings.Fields(m[1]), " ")
}

func TestSubmitFileAndFollow(t *testing.T) {
	f := startFakeAgent(t, "gw-t", "term-01", "term-02")
	out, errOut, code := runTaskctl(t, false, "submit", "-url", f.url, "-gateway", "gw-t", "-every", "10ms", "testdata/tasks.jsonl", "-batch", "2")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	// done failed superseded missing p50 p99
	if got := summaryRow(t, out, "term-01"); got != "2 1 0 0 10ms 11ms" && got != "2 1 0 0 10ms 10ms" {
		t.Errorf("term-01 row %q\n%s", got, out)
	}
	if got := summaryRow(t, out, "term-02"); got != "2 0 0 0 10ms 11ms" {
		t.Errorf("term-02 row %q\n%s", got, out)
	}
	if got := summaryRow(t, out, "term-99"); !strings.HasPrefix(got, "0 1 0 0 - -") {
		t.Errorf("term-99 (dead-lettered) row %q\n%s", got, out)
	}
	if got := summaryRow(t, out, "total"); !strings.HasPrefix(got, "4 2 0 0 ") {
		t.Errorf("total row %q\n%s", got, out)
	}
	if !strings.Contains(out, "submitted 6 tasks") {
		t.Errorf("no submit line:\n%s", out)
	}
}

func TestSetWhitelistAndFollow(t *testing.T) {
	f := startFakeAgent(t, "gw-w", "term-01")
	out, errOut, code := runTaskctl(t, true, "submit", "-url", f.url, "-gateway", "gw-w", "-every", "10ms",
		"-set-whitelist", "testdata/persons.jsonl", "-device", "term-01", "-task-id", "wl-1")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if got := summaryRow(t, out, "term-01"); !strings.HasPrefix(got, "1 0 0 0 ") {
		t.Errorf("term-01 row %q\n%s", got, out)
	}
	for _, want := range []string{
		"SetWhitelist wl-1 on term-01: succeeded, added 3, deleted 0, unchanged 0\n",
		"sync term-01 setWhitelist: started, missing 3, extra 0, changed 0, at 2026-11-27T15:04:05.000Z\n",
		"sync term-01 setWhitelist: done, missing 3, extra 0, changed 0, at 2026-11-27T15:04:05.000Z\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

func TestReadWhitelist(t *testing.T) {
	p, err := readWhitelist(strings.NewReader("# site A\n{\"id\":\"1\", \"name\":\"a\"}\n\n{\"id\":\"2\"}\n"), "x", "wl-\"1", "d1")
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"taskId":"wl-\"1","deviceId":"d1","op":"SetWhitelist","persons":[{"id":"1","name":"a"},{"id":"2"}]}`
	if string(p.raw) != want || p.taskID != "wl-\"1" || p.deviceID != "d1" {
		t.Errorf("task %s (%s, %s)\nwant %s", p.raw, p.taskID, p.deviceID, want)
	}
	// An empty file is an empty list: it clears the terminal.
	empty, err := readWhitelist(strings.NewReader("# nobody\n"), "x", "wl-2", "d1")
	b := wire.Parse(empty.raw, wire.Limits{MaxWhitelist: 10})
	if err != nil || len(b.Tasks) != 1 || b.Tasks[0].Persons == nil || len(b.Tasks[0].Persons) != 0 {
		t.Errorf("empty file: %s %v %+v", empty.raw, err, b.Rejects)
	}
	for in, want := range map[string]string{
		"{\"id\":\"1\"}\n{\"id\":\"2\"}\n{\"id\":\"1\"}\n": `x:3: person id "1" already on line 1`,
		"{\"name\":\"a\"}\n": "x:1: person without id",
		"[{\"id\":\"1\"}]\n": "x:1: not a person object",
		"{\"id\":\"1\"\n":    "x:1: not a person object",
	} {
		if _, err := readWhitelist(strings.NewReader(in), "x", "t", "d"); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	var many strings.Builder
	for i := range maxWhitelistFile + 1 {
		fmt.Fprintf(&many, "{\"id\":\"%d\"}\n", i)
	}
	if _, err := readWhitelist(strings.NewReader(many.String()), "x", "t", "d"); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("%d persons: %v", maxWhitelistFile+1, err)
	}
}

func TestGenerateManyWithLiveBars(t *testing.T) {
	f := startFakeAgent(t, "gw-g", "dev-01", "dev-02", "dev-03")
	out, errOut, code := runTaskctl(t, true, "submit", "-url", f.url, "-gateway", "gw-g", "-generate", "1500", "-devices", "3", "-device-prefix", "dev-", "-run-id", "r1", "-every", "5ms")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	if !strings.Contains(out, "\x1b[4A") || !strings.Contains(out, "dev-01 ") {
		t.Errorf("no in-place redraw of the bars:\n%q", out[:min(len(out), 400)])
	}
	if got := summaryRow(t, out, "total"); !strings.HasPrefix(got, "1500 0 0 0 ") {
		t.Errorf("total row %q", got)
	}
}

func TestTimeoutReportsMissing(t *testing.T) {
	f := startFakeAgent(t, "gw-m", "a")
	in := `{"taskId":"x1","deviceId":"a","op":"AddPerson","person":{"id":"1"}}` + "\n" +
		`{"taskId":"x2","deviceId":"a","op":"AddPerson","person":{"id":"never"}}` + "\n"
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"submit", "-url", f.url, "-gateway", "gw-m", "-timeout", "500ms", "-every", "10ms", "-"},
		strings.NewReader(in), &out, &errOut, false)
	if code != 1 || !strings.Contains(errOut.String(), "not every task has an outcome: 1 of 2 after 500ms") {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	if got := summaryRow(t, out.String(), "a"); !strings.HasPrefix(got, "1 0 0 1 ") {
		t.Errorf("row %q", got)
	}
}

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"Commands:", "submit", "states", "Examples:", "Exit status:"}},
		{[]string{"help"}, []string{"Commands:"}},
		{[]string{"submit", "-h"}, []string{"-generate", "-timeout", "-set-whitelist", "-device", "Examples:", "-set-whitelist site-a.jsonl"}},
		{[]string{"states", "-h"}, []string{"-config FILE", "Examples:"}},
	} {
		out, errOut, code := runTaskctl(t, false, tc.args...)
		for _, want := range tc.want {
			if code != 0 || !strings.Contains(out+errOut, want) {
				t.Errorf("%v: exit %d, no %q in\n%s%s", tc.args, code, want, out, errOut)
			}
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"submit"},
		{"submit", "-generate", "5", "testdata/tasks.jsonl"},
		{"submit", "-batch", "0", "testdata/tasks.jsonl"},
		{"submit", "-generate", "5", "-devices", "0"},
		{"submit", "testdata/does-not-exist.jsonl"},
		{"submit", "-nope"},
		{"submit", "-set-whitelist", "testdata/persons.jsonl"},
		{"submit", "-set-whitelist", "testdata/persons.jsonl", "-device", "d", "testdata/tasks.jsonl"},
		{"submit", "-set-whitelist", "testdata/persons.jsonl", "-device", "d", "-generate", "5"},
		{"submit", "-device", "d", "testdata/tasks.jsonl"},
		{"submit", "-set-whitelist", "testdata/does-not-exist.jsonl", "-device", "d"},
		{"submit", "-set-whitelist", "testdata/tasks.jsonl", "-device", "d"},
		{"states"},
		{"states", "-nope"},
	} {
		if _, _, code := runTaskctl(t, false, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	_, errOut, code := runTaskctl(t, false, "submit", "-url", "mqtt://127.0.0.1:1", "testdata/tasks.jsonl")
	if code != 1 || !strings.Contains(errOut, "connect 127.0.0.1:1") {
		t.Errorf("unreachable broker: %d %q", code, errOut)
	}
}

func TestReadTasks(t *testing.T) {
	for in, want := range map[string]string{
		"{\"taskId\":\"a\"}\n{\"taskId\":\"a\"}\n": `x:2: taskId "a" already on line 1`,
		"{\"deviceId\":\"d\"}\n":                   "x:1: task without taskId",
		"[1,2]\n":                                  "x:1: not a task object",
		"[{\"taskId\":\"a\"}\n":                    "x:1: unexpected end of JSON input",
		"nonsense\n":                               "x:1: not a task object",
	} {
		_, err := readTasks(strings.NewReader(in), "x")
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	long := `{"taskId":"a","pad":"` + strings.Repeat("x", maxLine) + `"}`
	if _, err := readTasks(strings.NewReader(long), "x"); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("long line: %v", err)
	}
}

func TestGenerateAndBatches(t *testing.T) {
	ids := deviceIDs("t-", 64)
	if ids[0] != "t-01" || ids[63] != "t-64" || deviceIDs("x", 100)[0] != "x001" {
		t.Fatalf("ids %v", ids[:2])
	}
	tasks := generateTasks(100, ids[:4], "r")
	seen := map[string]bool{}
	deletes := 0
	for _, p := range tasks {
		b := wire.Parse(p.raw, wire.Limits{})
		if len(b.Tasks) != 1 || b.Tasks[0].TaskID != p.taskID || seen[p.taskID] {
			t.Fatalf("generated task invalid or repeated: %s %+v", p.raw, b.Rejects)
		}
		seen[p.taskID] = true
		if b.Tasks[0].Op == "DeletePerson" {
			deletes++
		}
	}
	if deletes == 0 {
		t.Error("no DeletePerson generated")
	}
	msgs := batches(tasks[:5], 2)
	if len(msgs) != 3 || msgs[2][0] != '{' || msgs[0][0] != '[' {
		t.Fatalf("batches: %d, %s", len(msgs), msgs[2])
	}
	b := wire.Parse(msgs[0], wire.Limits{})
	if len(b.Tasks) != 2 || b.Tasks[1].TaskID != tasks[1].taskID {
		t.Fatalf("batch content %+v", b)
	}
}

func TestPercentile(t *testing.T) {
	ms := make([]int64, 100)
	for i := range ms {
		ms[i] = int64(100 - i)
	}
	if p50, p99 := percentile(ms, 0.5), percentile(ms, 0.99); p50 != 50 || p99 != 99 {
		t.Errorf("p50 %d p99 %d", p50, p99)
	}
	if percentile(nil, 0.5) != -1 || percentile([]int64{7}, 0.99) != 7 {
		t.Error("edge cases")
	}
	if fmtMs(-1) != "-" || fmtMs(1500) != "1.5s" {
		t.Error(fmt.Sprint(fmtMs(1500)))
	}
}
