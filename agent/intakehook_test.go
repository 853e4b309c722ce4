package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/report"
	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// TestTakerStoresEachTaskCommand: each task of a batch reaches its terminal as its own
// command (the payloads are encoded into one buffer for the batch), byte for byte what
// the task's command encodes to alone.
func TestTakerStoresEachTaskCommand(t *testing.T) {
	cfg := parse(t, fmt.Sprintf("[agent]\ngateway_id = \"gw-b\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n[journal]\nsync = \"none\"\n"+
		"[[devices]]\nid = \"d1\"\n[[devices]]\nid = \"d2\"\n[[devices]]\nid = \"d3\"\n", t.TempDir()))
	sent := make(chan outbox.Command, 8)
	ob, err := openOutbox(cfg, outbox.SenderFunc(func(_ context.Context, _ string, c outbox.Command) error {
		c.Payload = append([]byte(nil), c.Payload...) // the outbox's own, kept for retries
		sent <- c
		return nil
	}), quietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	m := testMetrics()
	d, err := report.OpenDeadLetters(filepath.Join(cfg.Agent.DataDir, report.DeadLetterDir), report.DeadLetterOptions{
		Journal: journalOptions(cfg.Journal), Topic: "faceagent/gw-b/deadletter", Metrics: m.deadLetters, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	take := newTaker(cfg, m, quietLog)
	take.dead = d
	take.ob.Store(ob)

	msg := []byte(`[{"taskId":"t1","deviceId":"d1","op":"AddPerson","person":{"id":"1","name":"Li Lei","validFrom":"2026-01-01T00:00:00Z"}},` +
		`{"taskId":"t2","deviceId":"d2","op":"DeletePerson","person":{"id":"22"}},` +
		`{"taskId":"t3","deviceId":"d3","op":"AddPerson","person":{"id":"333","name":"Han Meimei","validTo":"2027-01-01T00:00:00Z"}}]`)
	want := wire.Parse(msg, wire.Limits{})
	if len(want.Tasks) != 3 {
		t.Fatalf("test batch: %+v", want)
	}
	if err := take.accept(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d1", "d2", "d3"} {
		ob.Heartbeat(id)
	}
	got := map[string]outbox.Command{}
	for range 3 {
		select {
		case c := <-sent:
			got[c.DeviceID] = c
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 3 commands sent within 10 s", len(got))
		}
	}
	for i, task := range want.Tasks {
		c, ok := got[task.DeviceID]
		if !ok {
			t.Fatalf("no command for %s", task.DeviceID)
		}
		cmd := want.Command(i)
		alone, err := cmd.AppendMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(c.Payload) != string(alone) {
			t.Errorf("%s: payload %x, want %x", task.TaskID, c.Payload, alone)
		}
		if back, err := face.ParseCommandMsg(c.Payload); err != nil || back != cmd {
			t.Errorf("%s: command %+v (%v), want %+v", task.TaskID, back, err, cmd)
		}
	}
}
