package outbox

import (
	"errors"
	"flag"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// Upgrades keep data: a journal written by one release is read by the next. The fixture
// under testdata/journal-v1 is a real outbox directory (a snapshot and the segments after
// it) written by the release that introduced record format 1. Every later release must open
// it and rebuild exactly the table described in wantV1 below.
//
// A fixture must NEVER be regenerated once released: -update-fixture exists only to write a
// fixture for a format that has not shipped yet. It is a flag of the test binary, so it goes
// after the package (go test passes everything after an unknown flag to the binary):
//
//	go test ./agent/outbox/ -run TestJournalFixture -update-fixture
//
// The generated files are byte-for-byte reproducible (injected clock, fixed jitter seed). A release that changes the format adds a
// generator for journal-v2 beside this one, and keeps TestJournalFixture replaying v1
// unchanged. If this test fails after a code change, the change broke upgrades: fix the code,
// not the fixture.
var updateFixture = flag.Bool("update-fixture", false,
	"rewrite testdata/journal-v1 (never once released: add journal-vN beside it instead)")

const fixtureV1 = "testdata/journal-v1"

// fixtureBase is the injected clock's start while the fixture was written.
var fixtureBase = time.Unix(1_700_000_000, 0)

// fixtureSettings are the dispatch settings the fixture was written with: three tries, and
// devices that stay online for the whole story once heard from.
var fixtureSettings = Settings{RetryInterval: 2 * time.Second, MaxTries: 3, HeartbeatTimeout: time.Hour}

func fixtureTask(id, dev, person string) Task {
	return Task{MessageID: id, TaskID: "task-" + id, DeviceID: dev, Op: "AddPerson", PersonID: person,
		Payload: []byte(`{"person":"` + person + `"}`)}
}

// writeFixtureV1 writes the v1 fixture into dir with today's code. The story, in three
// sessions (each a Close and Open, as the agent restarting):
//
//  1. cam-a: r1 and r2 succeed and are reported (they leave the table; their ids stay in the
//     dedupe memory); f1 is refused and reported. cam-c: c0 is refused and not reported.
//  2. Opened with CompactAfter 1: Pause(cam-c) triggers a compaction, so the state of 1 and
//     the pause live in a snapshot.
//  3. RetryFailed(cam-a) brings f1 back (cam-a is offline: it stays Scheduled), a1 queues
//     behind it; c1, c2 queue on the paused cam-c; on cam-d, d2 supersedes d1 and d3 waits
//     (cam-d is paused and resumed); on cam-e, x0 succeeds and is reported, g0 is refused
//     and purged, e1 gets no ack three times and fails; on cam-b b0 succeeds (not reported),
//     b1 times out once and is in flight with its second try when the process stops, b2
//     waits.
func writeFixtureV1(t *testing.T, dir string) {
	clock := &fakeClock{testutil.NewFakeClockAt(fixtureBase)}
	snd := newRecSender()
	open := func(compactAfter int) *Outbox {
		t.Helper()
		o, err := Open(dir, snd, &Options{Clock: clock, Seed: 1, Settings: fixtureSettings,
			CompactAfter: compactAfter, Journal: journal.Options{Sync: journal.SyncAlways}})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	enqueue := func(o *Outbox, id, dev, person string) {
		t.Helper()
		must(o.Enqueue(fixtureTask(id, dev, person)))
		clock.Advance(time.Second)
	}
	sent := func(id string, try int) {
		t.Helper()
		if c := snd.next(t); c.MessageID != id || c.Try != try {
			t.Fatalf("fixture: sent %s try %d, want %s try %d", c.MessageID, c.Try, id, try)
		}
	}

	// Session 1.
	o := open(0)
	enqueue(o, "r1", "cam-a", "p-r1")
	enqueue(o, "r2", "cam-a", "p-r2")
	o.Heartbeat("cam-a")
	sent("r1", 1)
	clock.Advance(time.Second)
	o.Ack("cam-a", "r1", 0, "")
	sent("r2", 1)
	clock.Advance(time.Second)
	o.Ack("cam-a", "r2", 0, "")
	enqueue(o, "f1", "cam-a", "p-f1")
	sent("f1", 1)
	o.Ack("cam-a", "f1", 7, "duplicate face")
	enqueue(o, "c0", "cam-c", "p-c0")
	o.Heartbeat("cam-c")
	sent("c0", 1)
	clock.Advance(time.Second)
	o.Ack("cam-c", "c0", 3, "photo too small")
	res, err := o.Results(100)
	must(err)
	if len(res) != 4 {
		t.Fatalf("fixture: results %+v", res)
	}
	must(o.MarkReported("r1", "r2", "f1"))
	must(o.Close())

	// Session 2: compaction.
	o = open(1)
	must(o.Pause("cam-c"))
	for { // Close would cancel a compaction that has not started yet: wait for it.
		o.mu.Lock()
		busy := o.compacting
		o.mu.Unlock()
		if !busy {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if o.j.Stats().Snapshots != 1 {
		t.Fatalf("fixture: no snapshot written: %+v", o.j.Stats())
	}
	must(o.Close())

	// Session 3.
	clock.Advance(time.Minute)
	o = open(0)
	if n, err := o.RetryFailed("cam-a"); err != nil || n != 1 {
		t.Fatalf("fixture: RetryFailed = %d, %v", n, err)
	}
	enqueue(o, "a1", "cam-a", "p-a1")
	enqueue(o, "c1", "cam-c", "p-c1")
	enqueue(o, "c2", "cam-c", "p-c2")
	enqueue(o, "d1", "cam-d", "p-d")
	enqueue(o, "d2", "cam-d", "p-d")
	enqueue(o, "d3", "cam-d", "p-d3")
	// Kinds the snapshot does not show: reported, purge, pause and resume records.
	enqueue(o, "x0", "cam-e", "p-x0")
	o.Heartbeat("cam-e")
	sent("x0", 1)
	o.Ack("cam-e", "x0", 0, "")
	must(o.MarkReported("x0"))
	enqueue(o, "g0", "cam-e", "p-g0")
	sent("g0", 1)
	o.Ack("cam-e", "g0", 5, "bad template")
	if n, err := o.PurgeFailed("cam-e"); err != nil || n != 1 {
		t.Fatalf("fixture: PurgeFailed = %d, %v", n, err)
	}
	must(o.Pause("cam-d"))
	must(o.Resume("cam-d"))
	enqueue(o, "e1", "cam-e", "p-e1")
	sent("e1", 1)
	clock.Advance(2 * time.Second) // ack timeout: backoff of 1-2 s
	clock.Advance(2 * time.Second)
	sent("e1", 2)
	clock.Advance(2 * time.Second) // ack timeout: backoff of 2-4 s
	clock.Advance(4 * time.Second)
	sent("e1", 3)
	clock.Advance(2 * time.Second) // third ack timeout: Failed
	enqueue(o, "b0", "cam-b", "p-b0")
	enqueue(o, "b1", "cam-b", "p-b1")
	enqueue(o, "b2", "cam-b", "p-b2")
	o.Heartbeat("cam-b")
	sent("b0", 1)
	o.Ack("cam-b", "b0", 0, "")
	sent("b1", 1)
	clock.Advance(2 * time.Second) // ack timeout: backoff of 1-2 s
	clock.Advance(2 * time.Second) // sent again, ack deadline 2 s later
	sent("b1", 2)
	must(o.Close())
	if err := os.Remove(filepath.Join(dir, "LOCK")); err != nil {
		t.Fatal(err)
	}
}

// fixtureItem is what the test expects of one message in the replayed table.
type fixtureItem struct {
	Device   string
	Status   Status
	Tries    uint32
	Err      string
	Reported bool
}

type fixtureDevice struct {
	Queue    []string // Scheduled, FIFO order
	InFlight string
	Paused   bool
	Failed   int
}

type fixtureTable struct {
	Items   map[string]fixtureItem
	Devices map[string]fixtureDevice
	Results []string // unreported, in the order they will be reported
}

// wantV1 is the table the v1 fixture must rebuild, written out by hand from the story in
// writeFixtureV1. b1 was in flight: Open schedules it again at the head of cam-b, tries kept.
var wantV1 = fixtureTable{
	Items: map[string]fixtureItem{
		"f1": {Device: "cam-a", Status: Scheduled},
		"a1": {Device: "cam-a", Status: Scheduled},
		"b0": {Device: "cam-b", Status: Succeeded, Tries: 1},
		"b1": {Device: "cam-b", Status: Scheduled, Tries: 2, Err: "no ack within the retry interval"},
		"b2": {Device: "cam-b", Status: Scheduled},
		"c0": {Device: "cam-c", Status: Failed, Tries: 1, Err: "refused by the device: code 3: photo too small"},
		"c1": {Device: "cam-c", Status: Scheduled},
		"c2": {Device: "cam-c", Status: Scheduled},
		"d1": {Device: "cam-d", Status: Superseded, Err: "superseded by d2"},
		"d2": {Device: "cam-d", Status: Scheduled},
		"d3": {Device: "cam-d", Status: Scheduled},
		"e1": {Device: "cam-e", Status: Failed, Tries: 3, Err: "no ack within the retry interval (after 3 tries)"},
	},
	Devices: map[string]fixtureDevice{
		"cam-a": {Queue: []string{"f1", "a1"}},
		"cam-b": {Queue: []string{"b1", "b2"}},
		"cam-c": {Queue: []string{"c1", "c2"}, Paused: true, Failed: 1},
		"cam-d": {Queue: []string{"d2", "d3"}},
		"cam-e": {Failed: 1},
	},
	Results: []string{"c0", "d1", "e1", "b0"},
}

// tableOf reads the outbox's table in the fixture's terms.
func tableOf(o *Outbox) fixtureTable {
	o.mu.Lock()
	defer o.mu.Unlock()
	ft := fixtureTable{Items: map[string]fixtureItem{}, Devices: map[string]fixtureDevice{}}
	for id, it := range o.t.items.all() {
		ft.Items[id] = fixtureItem{Device: it.dev.id, Status: it.status, Tries: uint32(it.tries),
			Err: o.t.lastErr(it), Reported: it.reported}
	}
	for id, d := range o.t.devices {
		fd := fixtureDevice{Paused: d.paused, Failed: d.failed}
		for _, it := range d.queue {
			fd.Queue = append(fd.Queue, it.id())
		}
		if d.inflight != nil {
			fd.InFlight = d.inflight.id()
		}
		ft.Devices[id] = fd
	}
	for _, r := range o.t.results {
		ft.Results = append(ft.Results, r.it.id())
	}
	return ft
}

// copyFixture copies a committed fixture into a temporary directory: opening a journal
// writes to it (a requeue record, a new segment), and the fixture must stay as released.
func copyFixture(t *testing.T, src string) string {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatalf("fixture %s: %v", src, err)
	}
	dst := t.TempDir()
	var n int
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".wal") && !strings.HasSuffix(e.Name(), ".snap") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatalf("fixture %s holds no journal files", src)
	}
	return dst
}

func TestJournalFixture(t *testing.T) {
	if *updateFixture {
		tmp := t.TempDir()
		writeFixtureV1(t, tmp)
		if err := os.RemoveAll(fixtureV1); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(fixtureV1, 0o755); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(tmp)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(tmp, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(fixtureV1, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("rewrote %s (%d files)", fixtureV1, len(entries))
	}

	dir := copyFixture(t, fixtureV1)
	checkFixtureKinds(t, dir)
	clock := &fakeClock{testutil.NewFakeClockAt(fixtureBase.Add(24 * time.Hour))}
	snd := newRecSender()
	opts := Options{Clock: clock, Seed: 1, Journal: journal.Options{Sync: journal.SyncNone}}
	o, err := Open(dir, snd, &opts)
	if err != nil {
		t.Fatalf("the v1 fixture does not open: %v", err)
	}
	t.Cleanup(func() { o.Close() })

	if r := o.Recovery(); r.Snapshot == "" || r.SnapshotRecords == 0 || r.Records == 0 || r.TornTail != "" {
		t.Fatalf("fixture should replay a snapshot and segments, cleanly: %+v", r)
	}
	if got := tableOf(o); !reflect.DeepEqual(got, wantV1) {
		t.Fatalf("the v1 fixture rebuilds\n%+v\nwant\n%+v", got, wantV1)
	}
	if s := tableStats(t, o); s != (Stats{Queued: 8, Unreported: 4, FailedHeld: 2, Devices: 5}) {
		t.Fatalf("stats %+v", s)
	}
	if st, _ := o.DeviceStatus("cam-c"); !st.Paused || st.Queued != 2 || st.FailedHeld != 1 || st.Online {
		t.Fatalf("cam-c: %+v", st)
	}

	// Results keep what was journalled: ids, task ids, outcome, times.
	res, err := o.Results(100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range res {
		ids = append(ids, r.MessageID)
	}
	if !slices.Equal(ids, wantV1.Results) {
		t.Fatalf("results %v, want %v", ids, wantV1.Results)
	}
	// c0 was enqueued 5 s into the story and refused 2 s later (one second per enqueue and
	// per ack in writeFixtureV1).
	if c0 := res[0]; c0.TaskID != "task-c0" || c0.DeviceID != "cam-c" || c0.Status != Failed || c0.Tries != 1 ||
		!c0.AddedAt.Equal(fixtureBase.Add(5*time.Second)) || c0.Duration() != 2*time.Second {
		t.Fatalf("c0's result: %+v", c0)
	}
	if d1 := res[1]; d1.Status != Superseded || d1.Tries != 0 || d1.TaskID != "task-d1" {
		t.Fatalf("d1's result: %+v", d1)
	}

	// Dedupe memory survived the snapshot: reported ids are still duplicates, as are the
	// ids in the table.
	for _, id := range []string{"r1", "r2", "x0", "g0", "f1", "b1", "d1"} {
		if err := o.Enqueue(fixtureTask(id, "cam-a", "p-x")); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("Enqueue %s over the fixture: %v, want ErrDuplicate", id, err)
		}
	}

	// The outbox goes on from there: b1 is resent with its tries kept and acked, b2 and a
	// new b3 follow; results are reported; retried f1 goes out as a first try.
	if err := o.Enqueue(fixtureTask("b3", "cam-b", "p-b3")); err != nil {
		t.Fatal(err)
	}
	o.Heartbeat("cam-b")
	expectSent(t, snd, "b1", 3, `{"person":"p-b1"}`)
	o.Ack("cam-b", "b1", 0, "")
	expectSent(t, snd, "b2", 1, `{"person":"p-b2"}`)
	o.Ack("cam-b", "b2", 0, "")
	expectSent(t, snd, "b3", 1, `{"person":"p-b3"}`)
	o.Ack("cam-b", "b3", 0, "")
	o.Heartbeat("cam-a")
	expectSent(t, snd, "f1", 1, `{"person":"p-f1"}`)
	if err := o.MarkReported("c0", "d1", "e1", "b0", "b1"); err != nil {
		t.Fatal(err)
	}
	res, err = o.Results(100)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].MessageID != "b2" || res[1].MessageID != "b3" || res[0].Tries != 1 {
		t.Fatalf("results after reporting the fixture's: %+v", res)
	}
	if s := tableStats(t, o); s != (Stats{Queued: 6, InFlight: 1, Unreported: 2, FailedHeld: 2, Devices: 5}) {
		t.Fatalf("stats after going on: %+v", s)
	}

	// And what was written on top of the fixture replays too.
	want := tableOf(o)
	want.Items["f1"] = fixtureItem{Device: "cam-a", Status: Scheduled, Tries: 1} // in flight: requeued at Open
	fa := want.Devices["cam-a"]
	fa.Queue, fa.InFlight = []string{"f1", "a1"}, ""
	want.Devices["cam-a"] = fa
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	snd.drain()
	o, err = Open(dir, snd, &opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := tableOf(o); !reflect.DeepEqual(got, want) {
		t.Fatalf("after going on and reopening\n%+v\nwant\n%+v", got, want)
	}
}

func expectSent(t *testing.T, snd *recSender, id string, try int, payload string) {
	t.Helper()
	c := snd.next(t)
	if c.MessageID != id || c.Try != try || string(c.Payload) != payload || c.TaskID != "task-"+id || c.Op != "AddPerson" {
		t.Fatalf("sent %+v, want %s try %d payload %s", c, id, try, payload)
	}
}

// checkFixtureKinds checks that the fixture holds version-1 records of every kind but
// requeue (which Open writes, and the test then replays): a fixture that lost a kind would
// stop testing its decoding.
func checkFixtureKinds(t *testing.T, dir string) {
	t.Helper()
	j, err := journal.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	kinds := map[uint8]int{}
	var r record
	err = j.Replay(func(p []byte) error {
		if err := decodeRecord(p, &r); err != nil {
			return err
		}
		if r.Version != 1 {
			t.Errorf("record of kind %d has version %d, want 1", r.Kind, r.Version)
		}
		kinds[r.Kind]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []uint8{kindAdd, kindSend, kindRetry, kindFinish, kindReported, kindPurge, kindReset,
		kindPause, kindResume, kindItem, kindDevice, kindRecent} {
		if kinds[k] == 0 {
			t.Errorf("the fixture holds no record of kind %d: %v", k, kinds)
		}
	}
}

// tableStats returns o.Stats() with the payload file's figures checked (every payload in
// the file, no failure) and cleared, for comparing the table's figures.
func tableStats(t *testing.T, o *Outbox) Stats {
	t.Helper()
	s := o.Stats()
	if u := o.Unfinished(); u != s.Queued {
		t.Fatalf("Unfinished() = %d, Stats().Queued = %d", u, s.Queued)
	}
	if s.PayloadsOnHeap != 0 || s.PayloadFileBytes == 0 || s.PayloadWriteErrors != 0 || s.PayloadReadErrors != 0 {
		t.Fatalf("payload file: %+v", s)
	}
	s.PayloadFileBytes = 0
	return s
}
