package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/seed0e69bba5/faceagent/agent"
	"github.com/seed0e69bba5/faceagent/agent/backlog"
	"github.com/seed0e69bba5/faceagent/agent/config"
	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

const deadLetterChildEnv = "FACEAGENT_DEADLETTER_CRASH_DIR"

// deadLetterKillConfig is the crash test's config; with upstream (a broker's address) the
// agent reports there, besides running its embedded broker.
func deadLetterKillConfig(dir, upstream string) (*config.Config, error) {
	src := fmt.Sprintf("[agent]\ngateway_id = \"gw-k\"\ndata_dir = %q\n"+
		"[broker]\nlisten = \"127.0.0.1:0\"\n[[devices]]\nid = \"k1\"\n", dir)
	if upstream != "" {
		src += fmt.Sprintf("[upstream]\nurl = \"mqtt://%s\"\nreconnect_max = \"300ms\"\n[store]\nrequest_timeout = \"2s\"\n", upstream)
	}
	return config.Parse("k.toml", []byte(src), nil)
}

// deadLetterChild runs an agent with the embedded broker and publishes task messages for
// an unknown device, one at a time with QoS 1 (MQTT5), printing each task id once its
// PUBACK came back — until the parent kills the process.
func deadLetterChild(dir string) {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "deadletter child:", err); os.Exit(3) }
	cfg, err := deadLetterKillConfig(dir, "")
	if err != nil {
		fail(err)
	}
	a, err := agent.New(&agent.Options{Config: cfg})
	if err != nil {
		fail(err)
	}
	go func() { fail(a.Run(context.Background())) }()
	<-a.Ready()
	conn, err := net.Dial("tcp", a.BrokerAddr())
	if err != nil {
		fail(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	ctx := context.Background()
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "crash-publisher", KeepAlive: 30, CleanStart: true}); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	// Fewer than a compaction, which would drop the reported deadletters from the log the
	// test reads: report.CompactDeadLetters counts the reported records too, one per deadletter
	// when the publisher reports each as it comes, so at most two records per message.
	for i := 0; i < report.CompactDeadLetters/4; i++ {
		id := fmt.Sprintf("k-%d", i)
		payload := fmt.Appendf(nil, `{"taskId":%q,"deviceId":"nope","op":"AddPerson","person":{"id":"1"}}`, id)
		if _, err := c.Publish(ctx, &paho.Publish{Topic: "faceagent/gw-k/tasks", QoS: 1, Payload: payload}); err != nil {
			fail(err)
		}
		fmt.Println(id)
	}
	select {} // until the SIGKILL
}

// SIGKILL right after PUBACKs: the deadletter of every task message the embedded broker
// acknowledged is in the deadletter log (it was fsynced before the PUBACK), and what the
// log had not marked reported is published by the next run.
func TestDeadLettersSurviveSIGKILL(t *testing.T) {
	dir := t.TempDir()
	acked := map[string]bool{}
	n := testutil.CrashChild(t, []string{deadLetterChildEnv + "=" + dir}, 20*time.Second, 200*time.Millisecond,
		func(id string) { acked[id] = true })
	if n == 0 {
		t.Fatal("the child had no message acknowledged before the kill")
	}

	// Read the log as the kill left it.
	taskOf := func(payload []byte) string {
		var dl wire.DeadLetter
		var task struct {
			TaskID string `json:"taskId"`
		}
		if json.Unmarshal(payload, &dl) != nil || json.Unmarshal(dl.Payload, &task) != nil {
			return ""
		}
		return task.TaskID
	}
	j, err := journal.Open(filepath.Join(dir, report.DeadLetterDir), nil)
	if err != nil {
		t.Fatal(err)
	}
	logged := map[uint64]string{}
	var reportedThrough uint64
	err = j.Replay(func(rec []byte) error {
		kind, id, _, payload, err := backlog.ParseRecord(rec, false)
		if err == nil && kind != backlog.KindReported && kind != backlog.KindSeen {
			logged[id] = taskOf(payload)
		} else if err == nil && kind == backlog.KindReported {
			reportedThrough = max(reportedThrough, id)
		}
		return err
	})
	if cerr := j.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	inLog := map[string]bool{}
	unreported := map[string]bool{}
	for id, task := range logged {
		inLog[task] = true
		if id > reportedThrough {
			unreported[task] = true
		}
	}
	for id := range acked {
		if !inLog[id] {
			t.Errorf("task message %s was acknowledged but its deadletter is not in the log", id)
		}
	}

	// The next run reports to an upstream broker (a broker-only agent) on which the test
	// subscribed before the run started, so nothing the backlog sends is missed: the
	// embedded broker serves before any client could subscribe there.
	upstreamAddr, _ := startAgent(t, parse(t, fmt.Sprintf("[agent]\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n", t.TempDir())))
	sub := testutil.SubscribeInOrder(t, upstreamAddr, "faceagent/gw-k/deadletter")
	cfg, err := deadLetterKillConfig(dir, upstreamAddr)
	if err != nil {
		t.Fatal(err)
	}
	_, a, stop := startAgentFull(t, cfg)
	missing := func() []string {
		got := map[string]bool{}
		for _, p := range sub.Received() {
			got[taskOf([]byte(p))] = true
		}
		var m []string
		for id := range unreported {
			if !got[id] {
				m = append(m, id)
			}
		}
		return m
	}
	deadline := time.After(30 * time.Second)
	for len(missing()) > 0 {
		select {
		case <-sub.Changed():
		case <-deadline:
			t.Fatalf("%d of the %d deadletters not marked reported were not published after the restart: %v",
				len(missing()), len(unreported), missing())
		}
	}
	t.Logf("%d messages acknowledged before SIGKILL, all in the log; %d not yet marked reported, all published after the restart",
		n, len(unreported))
	pollUntil(t, "the backlog to empty", func() bool { return metric(t, a, "faceagent_deadletter_backlog") == 0 })
	stop()
}
