package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
