package main

import (
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// A count of one takes the singular: "1 task", "1 terminal", never "1 tasks".
func TestCountsOfOneAreSingular(t *testing.T) {
	tr := newTracker([]pending{{taskID: "t-1", deviceID: "d1"}})
	tr.result(wire.Result{TaskID: "t-1", DeviceID: "d1", Status: wire.Succeeded})
	tr.result(wire.Result{TaskID: "other", DeviceID: "d1", Status: wire.Succeeded})
	for range maxSyncShown + 1 {
		tr.sync(wire.SyncReport{DeviceID: "d1"})
	}
	var b strings.Builder
	tr.summary(&b, time.Second)
	st := newStatusTable("gw", []string{"d1"})
	st.render(&b, time.Now())
	out := b.String()
	for _, want := range []string{"\n1 task in 1s", "(1 more sync report)", "(1 result of other runs ignored)", "  1 terminal, 0 online, 0 in sync"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	for n, want := range map[int]string{0: "0 tasks", 1: "1 task", 2: "2 tasks"} {
		if got := count(n, "task", "tasks"); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}
