package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// make demo's inputs stay consistent with the code that reads them: configs/demo.toml
// loads under the strict config rules, configs/demo.sh starts a simulated terminal for
// exactly the devices it lists and finds them the way the script does, and the agent
// accepts every task of configs/demo-tasks.jsonl but the two the file says it refuses.
func TestDemoFiles(t *testing.T) {
	root := filepath.Join("..", "..", "configs")
	cfg, err := config.Load(filepath.Join(root, "demo.toml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var devices []string
	for _, d := range cfg.Devices {
		devices = append(devices, d.ID)
	}

	// demo.sh reads the device ids with sed 's/^id = "\(.*\)"$/\1/p'.
	toml, err := os.ReadFile(filepath.Join(root, "demo.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var scripted []string
	for _, m := range regexp.MustCompile(`(?m)^id = "(.*)"$`).FindAllSubmatch(toml, -1) {
		scripted = append(scripted, string(m[1]))
	}
	if !slices.Equal(scripted, devices) {
		t.Errorf("demo.sh's sed finds devices %v, the config has %v", scripted, devices)
	}
	script, err := os.ReadFile(filepath.Join(root, "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var simulated []string
	for _, m := range regexp.MustCompile(`(?m)^sim \S+ (\S+) `).FindAllSubmatch(script, -1) {
		for _, id := range bytes.Split(m[1], []byte(",")) {
			simulated = append(simulated, string(id))
		}
	}
	if !slices.Equal(simulated, devices) {
		t.Errorf("demo.sh simulates %v, the config has %v", simulated, devices)
	}

	f, err := os.Open(filepath.Join(root, "demo-tasks.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tasks, err := readTasks(f, "demo-tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lim := wire.Limits{KnownDevice: func(id string) bool { return slices.Contains(devices, id) }}
	var refused []string
	for _, task := range tasks {
		if b := wire.Parse(task.raw, lim); len(b.Rejects) > 0 {
			refused = append(refused, task.taskID)
		}
	}
	if want := []string{"demo-401", "demo-402"}; !slices.Equal(refused, want) || len(tasks) != 402 {
		t.Errorf("%d tasks, refused %v; want 402 tasks, refused %v", len(tasks), refused, want)
	}
}

// The demo's repair: demo.sh resets term-01 through facesim's -stdin (a FIFO) once the
// tasks are done, and the commands it uses to show the drift, the repair and the sync
// reports exist as written. With FACEAGENT_DEMO_RUN=1 the whole demo runs (about a
// minute: it builds the binaries and waits for the slow terminals) and its output must
// show the drift noticed, the repair's started and done reports, and term-01 in sync.
func TestDemoRepair(t *testing.T) {
	root := filepath.Join("..", "..")
	script, err := os.ReadFile(filepath.Join(root, "configs", "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	fast := regexp.MustCompile(`(?m)^sim fast (\S+) .*-stdin$`).FindSubmatch(script)
	if fast == nil || !slices.Contains(strings.Split(string(fast[1]), ","), "term-01") {
		t.Errorf("demo.sh does not start term-01's group with -stdin")
	}
	for _, want := range []string{
		`mkfifo "$DEMO/ctl-fast"`,
		`echo "reset term-01" >&3`,
		`taskctl" watch-sync -url "$URL" -gateway demo-gw`,
		`taskctl" states -config configs/demo.toml term-01`,
	} {
		if !bytes.Contains(script, []byte(want)) {
			t.Errorf("demo.sh lacks %q", want)
		}
	}
	if os.Getenv("FACEAGENT_DEMO_RUN") == "" {
		t.Skip("FACEAGENT_DEMO_RUN=1 runs the whole demo")
	}
	cmd := exec.Command("sh", "configs/demo.sh")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, re := range []string{
		`(?m)^   facesim \(stdin\): reset term-01$`,
		`(?m)^     .*whitelist drift.*device=term-01.*reason=digest`,
		`(?m)^     sync term-01 digest: started, missing 0, extra 0, changed 0, at `,
		`(?m)^     sync term-01 digest: done, missing [1-9][0-9]*, extra 0, changed 0, at `,
		`(?m)^     term-01 +true +0 .* true `,
	} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("the demo's output lacks %s:\n%s", re, out)
		}
	}
}
