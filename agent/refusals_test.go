package agent

import (
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/outbox"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// taskCommand is the outbox command of an AddPerson (or DeletePerson) task for p, as the
// intake encodes it.
func taskCommand(t *testing.T, id string, op face.Op, p face.Person) outbox.Command {
	t.Helper()
	c := face.Command{MessageID: id, Op: op, Person: p}
	payload, err := c.AppendMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	return outbox.Command{MessageID: id, DeviceID: "d", Op: string(op), PersonID: p.ID, Payload: payload}
}

// A refused AddPerson task takes that record out of the terminal's desired list, durably;
// a refusal of an older record, a DeletePerson's, and codes 21 to 23 change nothing; the
// same record taken after all comes back; a later task's Set brings the person back.
func TestTaskRefusalExcludesTheRecord(t *testing.T) {
	dir := t.TempDir()
	open := func() *whitelist.Store {
		s, err := whitelist.Open(dir, whitelist.Options{Journal: journal.Options{Sync: journal.SyncAlways}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	wl := open()
	defer func() { wl.Close() }()
	changed := map[string]int{}
	r := &taskRefusals{changed: func(dev string) { changed[dev]++ }, log: quietLog}
	r.wl.Store(wl)

	old := face.Person{ID: "951", Name: "Li Lei"}
	cur := face.Person{ID: "951", Name: "Li Lei", ValidTo: "2030-01-01T00:00:00Z"}
	other := face.Person{ID: "952", Name: "Han Meimei"}
	for _, p := range []face.Person{cur, other} {
		if err := wl.Set("d", record(&p)); err != nil {
			t.Fatal(err)
		}
	}
	before := wl.Digest("d")
	check := func(what string, excluded bool, count, changes int) {
		t.Helper()
		if got := wl.Excluded("d", "951"); got != excluded {
			t.Fatalf("%s: excluded %v, want %v", what, got, excluded)
		}
		if got := wl.Count("d"); got != count {
			t.Fatalf("%s: count %d, want %d", what, got, count)
		}
		if changed["d"] != changes {
			t.Fatalf("%s: told of %d changes, want %d", what, changed["d"], changes)
		}
	}
	r.acked("d", taskCommand(t, "m1", face.AddPerson, old), 17) // an older record's refusal
	r.acked("d", taskCommand(t, "m2", face.DeletePerson, cur), 17)
	for _, code := range []int{face.CodeFaceMissing, face.CodeFaceHash, face.CodeCapacity} {
		r.acked("d", taskCommand(t, "m3", face.AddPerson, cur), code)
	}
	r.acked("d", taskCommand(t, "m4", face.AddPerson, cur), 0) // taken: nothing to include
	check("no refusal of the desired record", false, 2, 0)

	r.acked("d", taskCommand(t, "m5", face.AddPerson, cur), 17)
	check("refused", true, 1, 1)
	if wl.Digest("d") == before {
		t.Fatal("the digest did not change with the exclusion")
	}
	if err := wl.Close(); err != nil { // durable: the exclusion survives a restart
		t.Fatal(err)
	}
	wl = open()
	r.wl.Store(wl)
	check("refused, after a restart", true, 1, 1)

	r.acked("d", taskCommand(t, "m6", face.AddPerson, cur), 0) // the same record taken after all
	check("taken after all", false, 2, 2)
	if wl.Digest("d") != before {
		t.Fatal("the digest is not back")
	}
	r.acked("d", taskCommand(t, "m7", face.AddPerson, cur), 3)
	check("refused again", true, 1, 3)
	if err := wl.Set("d", record(&cur)); err != nil { // a later task for the person
		t.Fatal(err)
	}
	check("a later task", false, 2, 3)
}
