package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/wire"
)

// tracker follows the submitted tasks' outcomes. Safe for concurrent use: results arrive
// on the MQTT client's goroutine while the renderer reads.
type tracker struct {
	mu        sync.Mutex
	devices   []string // sorted
	dev       map[string]*devProgress
	tasks     map[string]*taskState
	total     int
	finished  int
	foreign   int      // results for tasks this run did not submit
	unmatched []string // deadletter reasons that name no task of ours
	// whitelists are the SetWhitelist results of this run, in arrival order.
	whitelists []wire.Result
	// syncs are the first maxSyncShown sync reports seen, of any terminal; syncsLeft
	// counts the ones past them. lastSync is each terminal's latest, for the bars.
	syncs     []wire.SyncReport
	syncsLeft int
	lastSync  map[string]wire.SyncReport
	done      chan struct{}
}

// maxSyncShown bounds the sync reports kept for the summary: a run with many terminals
// drifting at once shows the first ones and how many more came.
const maxSyncShown = 50

type taskState struct {
	device   string
	finished bool
}

type devProgress struct {
	total, succeeded, failed, superseded, dead int
	durations                                  []int64 // ms, of succeeded tasks
}

func newTracker(tasks []pending) *tracker {
	t := &tracker{dev: map[string]*devProgress{}, tasks: make(map[string]*taskState, len(tasks)),
		lastSync: map[string]wire.SyncReport{}, done: make(chan struct{})}
	for _, p := range tasks {
		d := t.dev[p.deviceID]
		if d == nil {
			d = &devProgress{}
			t.dev[p.deviceID] = d
			t.devices = append(t.devices, p.deviceID)
		}
		d.total++
		t.tasks[p.taskID] = &taskState{device: p.deviceID}
	}
	slices.Sort(t.devices)
	t.total = len(tasks)
	if t.total == 0 {
		close(t.done)
	}
	return t
}

// Done is closed when every submitted task has a result or was dead-lettered.
func (t *tracker) Done() <-chan struct{} { return t.done }

// finish marks one task finished; the caller holds t.mu. A task finishes once: a second
// result (a redelivery) is not counted again.
func (t *tracker) finish(taskID string) (*devProgress, bool) {
	st := t.tasks[taskID]
	if st == nil || st.finished {
		return nil, false
	}
	st.finished = true
	t.finished++
	if t.finished == t.total {
		close(t.done)
	}
	return t.dev[st.device], true
}

func (t *tracker) result(r wire.Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ours := t.tasks[r.TaskID]; !ours {
		t.foreign++
		return
	}
	d, ok := t.finish(r.TaskID)
	if !ok {
		return
	}
	if r.WhitelistCounts != nil {
		c := *r.WhitelistCounts // the result's own copy: r's pointer is not kept
		r.WhitelistCounts = &c
		t.whitelists = append(t.whitelists, r)
	}
	switch r.Status {
	case wire.Succeeded:
		d.succeeded++
		d.durations = append(d.durations, r.DurationMs)
	case wire.Failed:
		d.failed++
	case wire.Superseded:
		d.superseded++
	}
}

// sync records a whitelist sync report.
func (t *tracker) sync(s wire.SyncReport) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ours := t.dev[s.DeviceID]; ours {
		t.lastSync[s.DeviceID] = s
	}
	if len(t.syncs) < maxSyncShown {
		t.syncs = append(t.syncs, s)
	} else {
		t.syncsLeft++
	}
}

// deadletter counts refused tasks: the payload is one task, an array of them (a whole
// batch refused), or a string when it was not JSON.
func (t *tracker) deadletter(dl wire.DeadLetter) {
	var ids []string
	var one struct {
		TaskID string `json:"taskId"`
	}
	var many []struct {
		TaskID string `json:"taskId"`
	}
	if json.Unmarshal(dl.Payload, &one) == nil && one.TaskID != "" {
		ids = []string{one.TaskID}
	} else if json.Unmarshal(dl.Payload, &many) == nil {
		for _, m := range many {
			ids = append(ids, m.TaskID)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	matched := false
	for _, id := range ids {
		if d, ok := t.finish(id); ok {
			d.dead++
			matched = true
		}
	}
	if !matched && len(t.unmatched) < 10 {
		t.unmatched = append(t.unmatched, dl.Reason)
	}
}

// progress returns finished and total.
func (t *tracker) progress() (int, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.finished, t.total
}

const barWidth = 24

// render writes one line per terminal: a bar and the counts. On a terminal (tty) it first
// moves the cursor back over the previous rendering, so the block updates in place.
func (t *tracker) render(w io.Writer, redraw bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	if redraw {
		fmt.Fprintf(&b, "\x1b[%dA", len(t.devices)+1)
	}
	idw := t.idWidth()
	for _, id := range t.devices {
		d := t.dev[id]
		n := d.succeeded + d.failed + d.superseded + d.dead
		fill := n * barWidth / max(d.total, 1)
		fmt.Fprintf(&b, "\x1b[2K%-*s [%s%s] %*d/%d", idw, id, strings.Repeat("#", fill), strings.Repeat(".", barWidth-fill),
			len(fmt.Sprint(d.total)), n, d.total)
		if d.failed+d.dead > 0 {
			fmt.Fprintf(&b, "  failed %d", d.failed+d.dead)
		}
		if s, ok := t.lastSync[id]; ok {
			fmt.Fprintf(&b, "  sync %s", s.Status)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "\x1b[2Ktotal %d/%d\n", t.finished, t.total)
	_, _ = io.WriteString(w, b.String())
}

func (t *tracker) idWidth() int {
	w := len("terminal")
	for _, id := range t.devices {
		w = max(w, len(id))
	}
	return w
}

// summary writes the closing table: per terminal done (succeeded), failed (refused,
// tries spent, or dead-lettered), superseded, missing (no outcome seen), and p50/p99 of
// the succeeded tasks' durations.
func (t *tracker) summary(w io.Writer, elapsed time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	idw := t.idWidth()
	fmt.Fprintf(w, "%-*s %7s %7s %10s %7s %9s %9s\n", idw, "terminal", "done", "failed", "superseded", "missing", "p50", "p99")
	var tot devProgress
	for _, id := range t.devices {
		d := t.dev[id]
		missing := d.total - d.succeeded - d.failed - d.superseded - d.dead
		fmt.Fprintf(w, "%-*s %7d %7d %10d %7d %9s %9s\n", idw, id, d.succeeded, d.failed+d.dead, d.superseded, missing,
			fmtMs(percentile(d.durations, 0.50)), fmtMs(percentile(d.durations, 0.99)))
		tot.total += d.total
		tot.succeeded += d.succeeded
		tot.failed += d.failed + d.dead
		tot.superseded += d.superseded
		tot.durations = append(tot.durations, d.durations...)
	}
	missing := tot.total - tot.succeeded - tot.failed - tot.superseded
	fmt.Fprintf(w, "%-*s %7d %7d %10d %7d %9s %9s\n", idw, "total", tot.succeeded, tot.failed, tot.superseded, missing,
		fmtMs(percentile(tot.durations, 0.50)), fmtMs(percentile(tot.durations, 0.99)))
	if elapsed > 0 && t.finished > 0 {
		fmt.Fprintf(w, "%s in %s (%.0f/s)\n", count(t.finished, "task", "tasks"), elapsed.Round(time.Millisecond), float64(t.finished)/elapsed.Seconds())
	}
	for _, r := range t.whitelists {
		c := r.WhitelistCounts
		fmt.Fprintf(w, "SetWhitelist %s on %s: %s, added %d, deleted %d, unchanged %d", r.TaskID, r.DeviceID, r.Status, c.Added, c.Deleted, c.Unchanged)
		if r.Error != "" {
			fmt.Fprintf(w, " (%s)", r.Error)
		}
		fmt.Fprintln(w)
	}
	for _, s := range t.syncs {
		fmt.Fprintf(w, "sync %s %s: %s, missing %d, extra %d, changed %d, at %s", s.DeviceID, s.Reason, s.Status, s.Missing, s.Extra, s.Changed, s.At)
		if s.Error != "" {
			fmt.Fprintf(w, " (%s)", s.Error)
		}
		fmt.Fprintln(w)
	}
	if t.syncsLeft > 0 {
		fmt.Fprintf(w, "(%s)\n", count(t.syncsLeft, "more sync report", "more sync reports"))
	}
	for _, r := range t.unmatched {
		fmt.Fprintf(w, "deadletter: %s\n", r)
	}
	if t.foreign > 0 {
		fmt.Fprintf(w, "(%s of other runs ignored)\n", count(t.foreign, "result", "results"))
	}
}

// count is n with its noun: "1 task", "0 tasks", "2 tasks".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// percentile is the nearest-rank percentile of ms values; -1 when there are none.
func percentile(ms []int64, p float64) int64 {
	if len(ms) == 0 {
		return -1
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	rank := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(rank, 0)]
}

func fmtMs(ms int64) string {
	if ms < 0 {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}
