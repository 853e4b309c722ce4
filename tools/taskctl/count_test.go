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

// The SYNC column says what the operator's page says: "not confirmed" for a terminal whose
// heartbeat shows another digest or none (a protocol 1 terminal: it is never in sync),
// "pending" while commands are queued or in flight for it.
func TestStatusSyncColumn(t *testing.T) {
	st := newStatusTable("gw", []string{"v1", "busy", "ok"})
	for id, s := range map[string]wire.DeviceState{
		"v1":   {DeviceID: "v1", Online: true},
		"busy": {DeviceID: "busy", Online: true, QueueDepth: 3},
		"ok":   {DeviceID: "ok", Online: true, InSync: true},
	} {
		b, err := s.MarshalMsg(nil)
		if err != nil {
			t.Fatal(err)
		}
		st.set(id, b, "")
	}
	var b strings.Builder
	st.render(&b, time.Now())
	want := map[string]string{"v1": "not confirmed", "busy": "pending", "ok": "yes"}
	for _, line := range strings.Split(b.String(), "\n")[2:] {
		id, rest, _ := strings.Cut(line, " ")
		if w, ok := want[id]; ok {
			if !strings.HasPrefix(strings.TrimLeft(rest, " "), "online    "+w+" ") {
				t.Errorf("%s's row %q: want SYNC %q", id, line, w)
			}
			delete(want, id)
		}
	}
	if len(want) != 0 {
		t.Errorf("no rows for %v in:\n%s", want, b.String())
	}
}
