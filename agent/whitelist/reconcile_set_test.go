package whitelist

import (
	"slices"
	"strings"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/wire"
	"github.com/seed0e69bba5/faceagent/device/face"
)

// setTask replaces dev's desired list by list as a SetWhitelist task id does, and tells
// the reconciler, as the intake would.
func (h *harness) setTask(dev, id string, list []Record) Counts {
	h.t.Helper()
	c, err := h.store.ReplaceTask(dev, list, SetTask{MessageID: "m-" + id, TaskID: id})
	if err != nil {
		h.t.Fatal(err)
	}
	h.rec.SetWhitelist(dev)
	return c
}

// TestReconcileSetWhitelistV2: a SetWhitelist on a v2 terminal that differs every way
// (extras, missing, changed) is reconciled with reason setWhitelist and succeeds only once
// a heartbeat shows the terminal's digest equal to the new desired one.
func TestReconcileSetWhitelistV2(t *testing.T) {
	h := newHarness(t, ReconcileOptions{})
	old := people(6, "p")
	m := h.addTerminal("d", 2, old)
	m.persons["hand"] = face.Person{ID: "hand", Name: "added by hand"}
	h.converge(10) // the hand-added person goes: the list is managed
	list := append(slices.Clone(old[2:5]), people(3, "q")...)
	list[0].Name = "renamed"
	c := h.setTask("d", "t1", list)
	if c != (Counts{Added: 4, Deleted: 3, Unchanged: 2}) {
		t.Fatalf("counts %+v", c)
	}
	h.pump()
	if _, ok := h.store.PendingSet("d"); !ok {
		t.Fatal("the task finished before the terminal was reconciled")
	}
	h.converge(10)
	if !slices.Equal(h.held("d"), h.desired("d")) {
		t.Fatalf("held %v", h.held("d"))
	}
	res := h.store.SetResults(10)
	if len(res) != 1 || res[0].Status != SetSucceeded || res[0].TaskID != "t1" || res[0].Counts != c {
		t.Fatalf("results %+v", res)
	}
	st := h.statuses("d")
	if !slices.Contains(st, "setWhitelist/started") || st[len(st)-1] != "setWhitelist/done" {
		t.Fatalf("reports %v", st)
	}
	last := h.reportsOf("d")[len(h.reportsOf("d"))-1]
	if last.Missing != 3 || last.Extra != 3 || last.Changed != 1 {
		t.Fatalf("report %+v", last)
	}
}

// TestReconcileSetWhitelistV1: a v1 terminal cannot list: it is sent a DeletePerson for
// each person the replacement removed and an AddPerson for each one it added or changed,
// nothing for the unchanged, and the task succeeds once they were all acked.
func TestReconcileSetWhitelistV1(t *testing.T) {
	h := newHarness(t, ReconcileOptions{})
	old := people(6, "p")
	m := h.addTerminal("d", 1, old)
	h.converge(10)
	list := append(slices.Clone(old[2:5]), people(3, "q")...)
	list[0].Name = "renamed"
	h.setTask("d", "t1", list)
	adds, deletes := m.adds, m.deletes
	h.converge(10)
	if m.adds-adds != 4 || m.deletes-deletes != 3 {
		t.Fatalf("%d adds, %d deletes; want 4 and 3", m.adds-adds, m.deletes-deletes)
	}
	if !slices.Equal(h.held("d"), h.desired("d")) {
		t.Fatalf("held %v", h.held("d"))
	}
	if res := h.store.SetResults(10); len(res) != 1 || res[0].Status != SetSucceeded {
		t.Fatalf("results %+v", res)
	}
	if st := h.statuses("d"); st[len(st)-1] != "setWhitelist/done" {
		t.Fatalf("reports %v", st)
	}
}

// TestReconcileSetWhitelistFails: a terminal that refuses every delete fails MaxSetFailures
// reconciliations with backoff; the task's result is then failed with the reason, and
// reconciliation goes on for reason digest.
func TestReconcileSetWhitelistFails(t *testing.T) {
	h := newHarness(t, ReconcileOptions{MaxSetFailures: 3})
	m := h.addTerminal("d", 2, people(3, "p"))
	h.converge(5)
	m.refuse = func(cmd face.Command) int {
		if cmd.Op == face.DeletePerson {
			return 7
		}
		return 0
	}
	h.setTask("d", "t1", people(1, "p"))
	for range 200 {
		h.tick()
		if len(h.store.SetResults(1)) > 0 {
			break
		}
	}
	res := h.store.SetResults(1)
	if len(res) != 1 || res[0].Status != SetFailed || res[0].Tries != 3 || !strings.Contains(res[0].Err, "refused DeletePerson") {
		t.Fatalf("results %+v", res)
	}
	reps := h.reportsOf("d")
	failed := 0
	for _, r := range reps {
		if r.Reason == wire.SyncSetWhitelist && r.Status == wire.SyncFailed {
			failed++
		}
	}
	if failed != 3 {
		t.Fatalf("%d setWhitelist/failed reports: %v", failed, h.statuses("d"))
	}
	for range 100 {
		h.tick()
	}
	if st := h.statuses("d"); st[len(st)-1] != "digest/failed" && st[len(st)-2] != "digest/failed" {
		t.Fatalf("after the task failed: %v", st[len(st)-4:])
	}
}

// TestReconcileSetWhitelistSuperseded: a second SetWhitelist while the first is pending
// supersedes it; the second succeeds once the terminal holds its list.
func TestReconcileSetWhitelistSuperseded(t *testing.T) {
	h := newHarness(t, ReconcileOptions{})
	h.addTerminal("d", 2, people(3, "p"))
	h.converge(5)
	h.setTask("d", "t1", people(2, "q"))
	h.setTask("d", "t2", people(4, "r"))
	h.converge(10)
	res := h.store.SetResults(10)
	if len(res) != 2 || res[0].TaskID != "t1" || res[0].Status != SetSuperseded || res[1].TaskID != "t2" || res[1].Status != SetSucceeded {
		t.Fatalf("results %+v", res)
	}
}
