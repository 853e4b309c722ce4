package whitelist

import (
	"errors"
	"slices"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// TestSetTaskDurableWithItsList: a SetWhitelist task's counts are taken against the list
// it replaced and survive a restart with the list (one record); a redelivery of the same
// message changes nothing and answers with the counts taken; the result is offered once
// finished and leaves once reported, the id kept for dedupe — across restarts and
// snapshots alike.
func TestSetTaskDurableWithItsList(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(map[bool]string{false: "journal", true: "snapshot"}[compact], func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, Options{})
			a, b, c := Record{ID: "1", Name: "Ann"}, Record{ID: "2", Name: "Bo"}, Record{ID: "3", Name: "Cy"}
			if err := s.Set("d", a); err != nil {
				t.Fatal(err)
			}
			if err := s.Set("d", b); err != nil {
				t.Fatal(err)
			}
			b2 := Record{ID: "2", Name: "Bob"}
			want := Counts{Added: 2, Deleted: 0, Unchanged: 1} // b changed, c new, a kept
			got, err := s.ReplaceTask("d", []Record{a, b2, c}, SetTask{MessageID: "m1", TaskID: "t1"})
			if err != nil || got != want {
				t.Fatalf("ReplaceTask: %+v %v", got, err)
			}
			reopen := func() {
				t.Helper()
				if compact {
					if err := s.Compact(); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				s = openTest(t, dir, Options{})
			}
			reopen()
			p, ok := s.PendingSet("d")
			if !ok || p.MessageID != "m1" || p.TaskID != "t1" || p.Counts != want || p.Added.IsZero() {
				t.Fatalf("pending after restart: %+v %v", p, ok)
			}
			if gone, touched := s.SetWork("d"); len(gone) != 0 || !slices.Equal(touched, []string{"2", "3"}) {
				t.Fatalf("work: gone %v touched %v", gone, touched)
			}
			// The redelivered message: nothing changes, the counts are the first ones.
			d0 := s.Digest("d")
			if got, err := s.ReplaceTask("d", []Record{a, b2, c}, SetTask{MessageID: "m1", TaskID: "t1"}); !errors.Is(err, ErrDuplicateTask) || got != want {
				t.Fatalf("redelivery: %+v %v", got, err)
			}
			if s.Digest("d") != d0 {
				t.Fatal("a redelivery changed the list")
			}
			if ok, err := s.FinishSet("d", "other", SetSucceeded, 1, ""); ok || err != nil {
				t.Fatalf("FinishSet of a task not pending: %v %v", ok, err)
			}
			if ok, err := s.FinishSet("d", "m1", SetSucceeded, 1, ""); !ok || err != nil {
				t.Fatalf("FinishSet: %v %v", ok, err)
			}
			select {
			case <-s.SetResultsReady():
			default:
				t.Fatal("no SetResultsReady after a result")
			}
			reopen()
			res := s.SetResults(10)
			if len(res) != 1 || res[0].MessageID != "m1" || res[0].Status != SetSucceeded || res[0].Counts != want || res[0].Tries != 1 {
				t.Fatalf("results after restart: %+v", res)
			}
			if _, ok := s.PendingSet("d"); ok {
				t.Fatal("still pending after its result")
			}
			if err := s.MarkSetReported("m1"); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			reopen()
			if res := s.SetResults(10); len(res) != 0 {
				t.Fatalf("reported result offered again: %+v", res)
			}
			if _, err := s.ReplaceTask("d", []Record{a}, SetTask{MessageID: "m1", TaskID: "t1"}); !errors.Is(err, ErrDuplicateTask) {
				t.Fatalf("redelivery after the report: %v", err)
			}
		})
	}
}

// TestSetTaskSupersededAndWork: a later SetWhitelist supersedes the pending one (its
// result says so, with its own counts), and the protocol 1 work is what both removed and
// set, without what the later list brought back.
func TestSetTaskSupersededAndWork(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	l1 := siteList(4, 0) // 00000000..00000003
	if _, err := s.Replace("d", l1); err != nil {
		t.Fatal(err)
	}
	if c, err := s.ReplaceTask("d", l1[:2], SetTask{MessageID: "m1", TaskID: "t1"}); err != nil || c != (Counts{Deleted: 2, Unchanged: 2}) {
		t.Fatalf("first: %+v %v", c, err)
	}
	changed := l1[0]
	changed.Name = "renamed"
	c, err := s.ReplaceTask("d", []Record{changed, l1[2]}, SetTask{MessageID: "m2", TaskID: "t2"})
	if err != nil || c != (Counts{Added: 2, Deleted: 1}) {
		t.Fatalf("second: %+v %v", c, err)
	}
	gone, touched := s.SetWork("d")
	if !slices.Equal(gone, []string{"00000001", "00000002", "00000003"}) || !slices.Equal(touched, []string{"00000000", "00000002"}) {
		t.Fatalf("work: gone %v touched %v", gone, touched)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir, Options{})
	res := s.SetResults(10)
	if len(res) != 1 || res[0].MessageID != "m1" || res[0].Status != SetSuperseded || res[0].Err != "superseded by task t2" || res[0].Counts != (Counts{Deleted: 2, Unchanged: 2}) {
		t.Fatalf("superseded result: %+v", res)
	}
	if p, ok := s.PendingSet("d"); !ok || p.MessageID != "m2" {
		t.Fatalf("pending: %+v %v", p, ok)
	}
	if devs := s.PendingSets(); !slices.Equal(devs, []string{"d"}) {
		t.Fatalf("PendingSets %v", devs)
	}
}

// TestSetTaskBound: past Options.MaxSetTasks kept tasks a new one is refused and changes
// nothing; one that supersedes a pending task needs room too (the task it supersedes
// waits for its result to be reported).
func TestSetTaskBound(t *testing.T) {
	s := openTest(t, t.TempDir(), Options{MaxSetTasks: 2})
	for i, dev := range []string{"a", "b"} {
		if _, err := s.ReplaceTask(dev, siteList(1, i), SetTask{MessageID: "m-" + dev, TaskID: dev}); err != nil {
			t.Fatal(err)
		}
	}
	d := s.Digest("c")
	if _, err := s.ReplaceTask("c", siteList(3, 0), SetTask{MessageID: "m-c", TaskID: "c"}); !errors.Is(err, ErrTooManySetTasks) {
		t.Fatalf("over the bound: %v", err)
	}
	if known, _ := s.Known("c"); known || s.Digest("c") != d {
		t.Fatal("a refused task changed the list")
	}
	if _, err := s.ReplaceTask("a", siteList(2, 0), SetTask{MessageID: "m-a2", TaskID: "a2"}); !errors.Is(err, ErrTooManySetTasks) {
		t.Fatalf("a supersede over the bound: %v", err)
	}
}

// TestSetTaskCutByCrash: a large ReplaceTask written in parts and cut by a crash before its
// last part leaves neither the list change nor the task (the message was not
// acknowledged: it comes again and is applied once).
func TestSetTaskCutByCrash(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, Options{})
	if _, err := s.Replace("d", siteList(10, 5)); err != nil {
		t.Fatal(err)
	}
	before := s.Digest("d")
	big := siteList(8000, 1) // well over one 256 KiB part
	for i := range big {
		big[i].Name += " with a name long enough to need several journal parts for this list"
	}
	if _, err := s.ReplaceTask("d", big, SetTask{MessageID: "m1", TaskID: "t1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The same journal without the update's last part: what a crash before its write
	// leaves (the parts before were durable).
	j, err := journal.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var recs [][]byte
	j.Replay(func(b []byte) error { recs = append(recs, append([]byte(nil), b...)); return nil })
	j.Close()
	if k := recs[len(recs)-1][1]; k != kindLast || len(recs) < 4 || recs[1][2]&flagTask == 0 {
		t.Fatalf("%d records, the last of kind %q: want a task on parts", len(recs), k)
	}
	dir = t.TempDir()
	if j, err = journal.Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs[:len(recs)-1] {
		j.Append(r)
	}
	j.Close()
	s = openTest(t, dir, Options{})
	if s.Digest("d") != before {
		t.Fatal("a cut ReplaceTask changed the list")
	}
	if _, ok := s.PendingSet("d"); ok {
		t.Fatal("a cut ReplaceTask left its task")
	}
	c, err := s.ReplaceTask("d", big, SetTask{MessageID: "m1", TaskID: "t1"})
	if err != nil || c != (Counts{Added: 8000, Deleted: 10}) {
		t.Fatalf("applied again: %+v %v", c, err)
	}
}
