package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/broker"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// openOutbox hands the links the outbox's own journal: a command sent through them was
// preceded by a write-out of that journal.
func TestOpenOutboxGivesTheLinksItsJournal(t *testing.T) {
	cfg := parse(t, fmt.Sprintf("[agent]\ngateway_id = \"gw-d\"\ndata_dir = %q\n[broker]\nlisten = \"127.0.0.1:0\"\n[[devices]]\nid = \"d1\"\n", t.TempDir()))
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", AllowAnonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := openLinks(cfg, b, "", quietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ob, err := openOutbox(cfg, l, quietLog)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	fc := face.Command{MessageID: "m-1", Op: face.AddPerson, Person: face.Person{ID: "p1", Name: "P"}}
	payload, err := fc.AppendMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	if errs := ob.EnqueueBatch([]outbox.Task{{MessageID: "m-1", TaskID: "t-1", DeviceID: "d1", Op: "AddPerson", PersonID: "p1", Payload: payload}}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	ob.LinkUp("d1")
	ob.Heartbeat("d1")
	deadline := time.After(10 * time.Second)
	for {
		if st, _ := ob.DeviceStatus("d1"); st.Sent > 0 {
			break
		}
		select {
		case <-deadline:
			t.Fatal("the command was not sent")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if st := ob.JournalStats(); st.WriteOuts == 0 {
		t.Fatalf("the outbox's journal after a send: %+v, want a write-out", st)
	}
}
