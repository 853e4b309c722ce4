package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
	"github.com/seed0e69bba5/faceagent/device/sim"
)

// The operator's page in a real browser (headless Chromium through chromedriver), on a
// real agent with simulated terminals: it lists the terminals, says whether each holds its
// desired whitelist (door-1, protocol 2, took a task: in sync; door-2 never named in a
// task: unmanaged), shows one going offline within two seconds through its live stream,
// refuses actions without the token (and says so: the page is read-only without it),
// retries a failed task from a button (the terminal receives it again), and shows a
// deadletter whose reason holds markup as text. A screenshot is saved for a person.
func TestOperatorPageInBrowser(t *testing.T) {
	wd := startBrowser(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "ui-token")
	if err := os.WriteFile(token, []byte("page-token-7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// [ui] listen is [metrics] listen: the page is served with /metrics. Whitelist sync is
	// off: it would repair door-1 with a command of its own for the person whose task
	// failed, and that later command makes the failure not worth retrying (outbox.RetryFailed).
	cfg := parse(t, fmt.Sprintf("[agent]\ngateway_id = \"gw-ui\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n"+
		"[whitelist]\nreconcile = false\n"+
		"[dispatch]\nretry_interval = \"200ms\"\nheartbeat_timeout = \"500ms\"\nmax_tries = 3\n"+
		"[metrics]\nlisten = \"127.0.0.1:0\"\n[ui]\nlisten = \"127.0.0.1:0\"\ntoken_file = %q\n"+
		"[[devices]]\nid = \"door-1\"\n[[devices]]\nid = \"door-2\"\n", filepath.Join(dir, "data"), token))
	addr, a, _ := startAgentFull(t, cfg)
	page := "http://" + a.UIAddr()
	if a.UIAddr() != a.MetricsAddr() {
		t.Fatalf("the page is at %s, /metrics at %s: the same listen must share the server", a.UIAddr(), a.MetricsAddr())
	}
	opts := sim.Options{Seed: 5, Protocol: 1, HeartbeatInterval: 100 * time.Millisecond,
		AckLatency: sim.Latency{Kind: sim.Fixed, A: 2 * time.Millisecond}}
	opts2 := opts
	opts2.Protocol = 2 // its heartbeats carry the digest of what it holds
	door1, err := sim.StartMQTT("mqtt://"+addr, []string{"door-1"}, opts2)
	if err != nil {
		t.Fatal(err)
	}
	defer door1.Close()
	door2, err := sim.StartMQTT("mqtt://"+addr, []string{"door-2"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer door2.Close()
	bo := connectBackOffice(t, addr, "gw-ui")

	wd.navigate(page + "/")
	for _, id := range []string{"door-1", "door-2"} {
		wd.waitText(id+" listed online", `#terminals tr[data-id="`+id+`"] td.state`, 10*time.Second, contains("online"))
	}
	wd.waitText("the live stream", "#conn", 5*time.Second, func(s string) bool { return s == "live" })
	// Whitelist sync: door-1 in sync once it holds the person of its one task; door-2 has
	// no desired list at all.
	first, _ := json.Marshal(wire.Task{TaskID: "ui-0", DeviceID: "door-1", Op: face.AddPerson, Person: face.Person{ID: "950", Name: "Grace"}})
	bo.publish("faceagent/gw-ui/tasks", first)
	wd.waitText("door-1 in sync", `#terminals tr[data-id="door-1"] td.sync`, 10*time.Second, contains("in sync"))
	wd.waitText("door-1 holding 1 of 1", `#terminals tr[data-id="door-1"] td:nth-child(6)`, 5*time.Second,
		func(s string) bool { return s == "1 / 1" })
	wd.waitText("door-2 unmanaged", `#terminals tr[data-id="door-2"] td.sync`, 5*time.Second, contains("unmanaged"))
	var csp bool
	wd.js(&csp, `return document.scripts.length === 1 && !document.querySelector("script[src], link[rel=stylesheet]");`)
	if !csp {
		t.Fatal("the page loads external scripts or styles")
	}

	// Offline: door-2 stops; the agent deems it offline 500ms after its last heartbeat,
	// and the page must say so through its stream within two seconds.
	door2.Close()
	took := wd.waitText("door-2 offline", `#terminals tr[data-id="door-2"] td.state`, 2*time.Second, contains("offline"))
	t.Logf("door-2 shown offline %v after its terminal stopped (heartbeat_timeout 500ms)", took)

	// Without the token: the action is refused and the page says so.
	wd.click(`#terminals tr[data-id="door-1"] button[data-action="pause"]`)
	wd.waitText("the refusal", "#msg", 5*time.Second, contains("refused (401)"))
	if strings.Contains(wd.text(`#terminals tr[data-id="door-1"] td.state`), "paused") {
		t.Fatal("door-1 paused without the token")
	}
	resp, err := http.Post(page+"/api/action", "application/json", strings.NewReader(`{"action":"pause","device":"door-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an action without credentials: %d", resp.StatusCode)
	}

	// A failed task: door-1 refuses it; the page lists it.
	door1.Terminal("door-1").RefuseNext(face.AddPerson, "951")
	task, _ := json.Marshal(wire.Task{TaskID: "ui-1", DeviceID: "door-1", Op: face.AddPerson, Person: face.Person{ID: "951", Name: "Ada"}})
	bo.publish("faceagent/gw-ui/tasks", task)
	bo.waitFor("the failed result", 10*time.Second, func() bool { return bo.results["ui-1"].Status == wire.Failed })
	wd.waitText("the failure listed", "#failures", 5*time.Second, contains("ui-1"))
	wd.waitText("one failure held", "#failed-held", 5*time.Second, func(s string) bool { return s == "1" })
	received := door1.Terminal("door-1").Stats().Received

	// With the token, retry from the page: the terminal receives the same command again.
	wd.typeInto("#token", "page-token-7")
	wd.click("#use-token")
	wd.waitText("acting", "#mode", 5*time.Second, contains("acting as token holder"))
	wd.click(`#terminals tr[data-id="door-1"] button[data-action="retry-failed"]`)
	wd.waitText("the retry's result", "#msg", 5*time.Second, contains("retry-failed door-1: 1 command scheduled again"))
	pollUntil(t, "door-1 to receive the task again", func() bool {
		st := door1.Terminal("door-1").Stats()
		return st.Received > received && st.Duplicates >= 1
	})

	// A deadletter whose reason carries markup is shown as text, and runs nothing.
	evil := `<img src=x onerror=window.pwned=1><script>window.pwned=2</script>`
	bad, _ := json.Marshal(wire.Task{TaskID: "ui-2", DeviceID: evil, Op: face.AddPerson, Person: face.Person{ID: "1"}})
	bo.publish("faceagent/gw-ui/tasks", bad)
	wd.waitText("the deadletter", "#deadletters", 5*time.Second, contains(`unknown device "<img src=x onerror=window.pwned=1><script>`))
	var pwned any
	var images int
	wd.js(&pwned, `return window.pwned === undefined ? null : window.pwned;`)
	wd.js(&images, `return document.querySelectorAll("#deadletters img, #deadletters script").length;`)
	if pwned != nil || images != 0 {
		t.Fatalf("the deadletter's reason became markup: pwned=%v, elements=%d", pwned, images)
	}
	wd.screenshot("page")
}
