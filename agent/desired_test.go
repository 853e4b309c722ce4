package agent

import (
	"runtime"
	"testing"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/agent/whitelist"
)

// TestRestorerAllocation: the intake makes an undo for every task it applies to the
// desired whitelists and almost never calls it, so the common one (a person new to a
// known terminal) must cost no more than a closure of the device and person ids.
func TestRestorerAllocation(t *testing.T) {
	s, err := whitelist.Open(t.TempDir(), whitelist.Options{Journal: journal.Options{Sync: journal.SyncNone}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Set("t01", whitelist.Record{ID: "951", Name: "Li Lei"}); err != nil {
		t.Fatal(err)
	}
	d := desiredLists{s: s}
	const n = 1000
	undos := make([]func() error, n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range undos {
		undos[i] = d.restorer("t01", "952")
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 64 {
		t.Errorf("an undo of a new person allocates %d bytes; want at most 64", per)
	}
	// And it undoes: 952 is absent again after its Set is undone.
	if err := s.Set("t01", whitelist.Record{ID: "952", Name: "Han Meimei"}); err != nil {
		t.Fatal(err)
	}
	if err := undos[0](); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("t01", "952"); ok {
		t.Error("the undo left 952 on t01")
	}
	if _, ok := s.Get("t01", "951"); !ok {
		t.Error("the undo took 951 off t01")
	}
}
