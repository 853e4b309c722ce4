package outbox

import (
	"bytes"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
	"github.com/seed0e69bba5/faceagent/internal/testutil"
)

// repairWatch tells a test when the outbox finished a round of payload repairs or a
// background compaction, and what it logged.
type repairWatch struct {
	rounds   chan struct{}
	compacts chan error
	log      *testutil.SyncBuffer
}

// newRepairEnv opens an outbox that reports its repair rounds and background compactions
// to the returned watch. Compactions run only when the test calls for one (or a repair
// does), unless opts says otherwise.
func newRepairEnv(t *testing.T, opts Options) (*env, *repairWatch) {
	w := &repairWatch{rounds: make(chan struct{}, 10_000), compacts: make(chan error, 100), log: &testutil.SyncBuffer{}}
	opts.afterRepair = func() { w.rounds <- struct{}{} }
	opts.afterCompact = func(err error) { w.compacts <- err }
	opts.Logger = slog.New(slog.NewTextHandler(w.log, nil))
	if opts.CompactAfter == 0 {
		opts.CompactAfter = 1 << 30
	}
	if opts.Settings.HeartbeatTimeout == 0 {
		opts.Settings.HeartbeatTimeout = time.Hour
	}
	e := newEnv(t, opts)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the outbox's log:\n%s", w.log)
		}
	})
	return e, w
}

func (w *repairWatch) round(t *testing.T) {
	t.Helper()
	select {
	case <-w.rounds:
	case <-time.After(5 * time.Second):
		t.Fatal("no round of payload repairs ended")
	}
}

func (w *repairWatch) compaction(t *testing.T) error {
	t.Helper()
	select {
	case err := <-w.compacts:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("no background compaction ended")
		return nil
	}
}

// flipByte flips one bit of the byte at off in path, as a failing medium would.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	if err := flipOne(path, off); err != nil {
		t.Fatal(err)
	}
}

// damageSpill flips a byte of id's record in payloads.cache on disk, at offset at of the
// record (0: its checksum; spillHdr on: its payload), after writing the buffer out.
func (e *env) damageSpill(id string, at int64) {
	e.t.Helper()
	e.o.mu.Lock()
	e.o.t.flushSpill()
	ref := e.o.t.items.get(id).pay
	e.o.mu.Unlock()
	if ref == 0 {
		e.t.Fatalf("%s's payload is not in the payload file", id)
	}
	flipByte(e.t, filepath.Join(e.dir, spillName), ref.off()+at)
}

func (e *env) repairState() (running bool, lost int, scans uint64) {
	e.o.mu.Lock()
	defer e.o.mu.Unlock()
	return e.o.repair.running, len(e.o.repair.lost), e.o.repair.scans.Load()
}

// TestPayloadRepairedFromJournalWhileRunning: a flipped byte in a queued command's
// record of payloads.cache does not stall its terminal until a restart: the payload is
// read again from the journal and the command sent with it at once. A snapshot that meets
// a damaged record gets it repaired the same way and compacts again by itself.
func TestPayloadRepairedFromJournalWhileRunning(t *testing.T) {
	e, w := newRepairEnv(t, Options{})
	e.enqueueSized("m1", "d", 300)
	e.enqueueSized("m2", "d", 300)
	e.enqueueSized("m3", "d2", spillBufSize+100) // written to the file at once
	e.damageSpill("m1", spillHdr+7)
	e.o.Heartbeat("d")
	e.expectPayload("m1", 300) // no backoff, no restart
	w.round(t)
	s := e.o.Stats()
	if s.PayloadReadErrors != 1 || s.PayloadRepairs != 1 || s.PayloadRepairFailures != 0 {
		t.Fatalf("after one repair: %+v", s)
	}
	e.o.Ack("d", "m1", 0, "")
	e.expectPayload("m2", 300)
	e.o.Ack("d", "m2", 0, "")
	e.o.mu.Lock()
	onHeap, err := len(e.o.t.heapPay), e.o.t.rewriteSpill() // takes m1's payload back
	e.o.mu.Unlock()
	if onHeap != 1 || err != nil {
		t.Fatalf("%d payloads on the heap after the repair, want m1's; rewrite: %v", onHeap, err)
	}
	e.checkPayloads(func(it *item) string {
		return map[string]string{"m1": string(payloadOf("m1", 300)), "m2": string(payloadOf("m2", 300)),
			"m3": string(payloadOf("m3", spillBufSize+100))}[it.id()]
	}, "after the repair")
	if !strings.Contains(w.log.String(), "first_task=t-m1") {
		t.Errorf("the repair was not logged with its task id:\n%s", w.log)
	}

	// A snapshot meets a damaged record (m3, queued for a terminal that is offline).
	e.damageSpill("m3", 0)
	if err := e.o.compact(); err == nil {
		t.Fatal("a snapshot was written with a payload it could not read")
	}
	w.round(t) // the repair the snapshot asked for, then a compaction of its own
	if err := w.compaction(t); err != nil {
		t.Fatalf("the compaction after the repair: %v", err)
	}
	s = e.o.Stats()
	if js := e.o.JournalStats(); js.Snapshots != 1 || s.PayloadRepairs != 2 || s.PayloadReadErrors != 2 {
		t.Fatalf("after the snapshot's repair: %+v, journal %+v", s, js)
	}
	e.o.Heartbeat("d2")
	e.expectPayload("m3", spillBufSize+100)
	e.restart() // m3 comes back from the snapshot, in flight: it is sent again
	e.o.Heartbeat("d2")
	c := e.snd.next(t)
	if c.MessageID != "m3" || !bytes.Equal(c.Payload, payloadOf("m3", spillBufSize+100)) {
		t.Fatalf("after the restart: sent %s with %d bytes (right: %v)", c.MessageID, len(c.Payload), bytes.Equal(c.Payload, payloadOf("m3", spillBufSize+100)))
	}
}

// TestPayloadRepairAfterTruncation: a payload file cut in half under a running outbox
// (the records of 100 of 200 commands on four terminals lost at once) costs one read of
// the journal, not one per command; every command is delivered with its payload, in
// order; the file's rewrite takes the repaired payloads back from the heap.
func TestPayloadRepairAfterTruncation(t *testing.T) {
	e, w := newRepairEnv(t, Options{})
	const perDevice = 50
	devices := []string{"d0", "d1", "d2", "d3"}
	size := func(i int) int {
		if i%17 == 3 {
			return spillBufSize + i
		}
		return 1 + i%7*90
	}
	for i := range perDevice {
		for _, d := range devices {
			e.enqueueSized(d+"-"+strconv.Itoa(i), d, size(i))
		}
	}
	// Cut the file in the middle of a record: the records after the cut are lost, the ones
	// before it are intact (and not repaired), both kinds on every device.
	e.o.mu.Lock()
	e.o.t.flushSpill()
	cut := e.o.t.spill.size/2 + 7
	var lost uint64
	for _, it := range e.o.t.items.all() {
		if it.pay.off()+it.pay.size() > cut {
			lost++
		}
	}
	e.o.mu.Unlock()
	if err := os.Truncate(filepath.Join(e.dir, spillName), cut); err != nil {
		t.Fatal(err)
	}
	for _, d := range devices {
		e.o.Heartbeat(d)
	}
	next := map[string]int{}
	for range perDevice * len(devices) {
		c := e.snd.next(t)
		i := next[c.DeviceID]
		if want := c.DeviceID + "-" + strconv.Itoa(i); c.MessageID != want || !bytes.Equal(c.Payload, payloadOf(want, size(i))) {
			t.Fatalf("sent %s with %d bytes; want %s with its %d\n%s", c.MessageID, len(c.Payload), want, size(i), w.log)
		}
		next[c.DeviceID]++
		e.o.Ack(c.DeviceID, c.MessageID, 0, "")
	}
	// Rounds after the first find nothing damaged: they only pump the devices that asked.
	for running, _, _ := e.repairState(); running; running, _, _ = e.repairState() {
		w.round(t)
	}
	s := e.o.Stats()
	if _, _, scans := e.repairState(); scans != 1 || s.PayloadRepairs != lost || s.PayloadRepairFailures != 0 {
		t.Fatalf("%d journal reads, %+v; want one read and the %d payloads past the cut repaired", scans, s, lost)
	}
	if s.PayloadsOnHeap != int(lost) {
		t.Fatalf("%d payloads on the heap, want the %d repaired", s.PayloadsOnHeap, lost)
	}
	e.o.mu.Lock()
	err := e.o.t.rewriteSpill() // due once the dead bytes outnumber the live ones
	e.o.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	e.checkPayloads(func(it *item) string {
		i, _ := strconv.Atoi(it.id()[strings.IndexByte(it.id(), '-')+1:])
		return string(payloadOf(it.id(), size(i)))
	}, "after the repair")
	if err := e.o.compact(); err != nil {
		t.Fatalf("compaction after the repair: %v", err)
	}
}

// TestPayloadRepairFromIOError: a payload file whose reads fail (EIO) and keep failing:
// the payloads are read from the journal and kept on the heap, so the commands are sent
// (not held for a backoff, and not sent back to the repair by the next read); once the
// file reads again its next rewrite takes them back.
func TestPayloadRepairFromIOError(t *testing.T) {
	var faults spillFaults
	e, w := newRepairEnv(t, Options{createSpill: faults.create})
	big := spillBufSize + 10 // written at once: read from the file, not the buffer
	e.enqueueSized("m1", "d", big)
	e.enqueueSized("m2", "d", 10)
	faults.failRead.Store(true)
	e.o.Heartbeat("d")
	e.expectPayload("m1", big)
	w.round(t)
	e.o.Ack("d", "m1", 0, "")
	e.expectPayload("m2", 10) // in the buffer when m1 failed; the round wrote it out, and found it unreadable
	e.o.Ack("d", "m2", 0, "")
	if s := e.o.Stats(); s.PayloadRepairs != 2 || s.PayloadsOnHeap != 2 || s.PayloadReadErrors != 1 {
		t.Fatalf("%+v: want both payloads repaired, on the heap, after one failed read", s)
	}
	if _, _, scans := e.repairState(); scans != 1 {
		t.Fatalf("%d journal reads, want 1", scans)
	}
	faults.failRead.Store(false)
	e.o.mu.Lock()
	err := e.o.t.rewriteSpill()
	e.o.mu.Unlock()
	if s := e.o.Stats(); err != nil || s.PayloadsOnHeap != 0 {
		t.Fatalf("rewrite: %v, %+v", err, s)
	}
	e.checkPayloads(func(it *item) string {
		return map[string]string{"m1": string(payloadOf("m1", big)), "m2": string(payloadOf("m2", 10))}[it.id()]
	}, "after the rewrite")
}

// TestPayloadRepairJournalRecordDamaged: when the journal's record of the command is
// damaged too, the command is not lost and not sent: an error names its task, the failure
// is counted, it stays queued, later reads (after the backoff) and snapshots do not read
// the journal again, and Open then refuses the damaged journal as it always does.
func TestPayloadRepairJournalRecordDamaged(t *testing.T) {
	e, w := newRepairEnv(t, Options{})
	e.enqueueSized("m1", "d", 400)
	e.enqueueSized("m2", "d", 400) // after m1: its damage is not a torn tail
	e.damageSpill("m1", spillHdr+1)
	segs, err := filepath.Glob(filepath.Join(e.dir, "*.wal"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("segments %v, %v", segs, err)
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(data, payloadOf("m1", 400))
	if at < 0 {
		t.Fatal("m1's payload is not in the journal")
	}
	flipByte(t, segs[0], int64(at)+10)

	e.o.Heartbeat("d")
	w.round(t)
	s := e.o.Stats()
	if st := e.status("d"); st.InFlight != "" || st.Queued != 2 || s.PayloadRepairFailures != 1 || s.PayloadRepairs != 0 {
		t.Fatalf("a command whose payload nothing holds intact was sent or dropped: %+v, %+v", st, s)
	}
	if log := w.log.String(); !strings.Contains(log, "task=t-m1") || !strings.Contains(log, "journal damaged in "+segs[0]) {
		t.Fatalf("the log does not name the task and the damage:\n%s", log)
	}
	e.clock.Advance(1100 * time.Millisecond) // the device reads again: no repair for it now
	if running, lost, scans := e.repairState(); running || lost != 1 || scans != 1 || e.o.Stats().PayloadReadErrors != 2 {
		t.Fatalf("after the backoff: repair running %v, %d lost, %d journal reads, %+v", running, lost, scans, e.o.Stats())
	}
	if err := e.o.compact(); err == nil {
		t.Fatal("a snapshot was written without m1's payload")
	}
	if running, _, scans := e.repairState(); running || scans != 1 {
		t.Fatalf("the failed snapshot read the journal again (%d reads, running %v)", scans, running)
	}
	if err := e.o.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open(e.dir, newRecSender(), &Options{Clock: e.clock})
	var ce *journal.CorruptError
	if !errors.As(err, &ce) || ce.File != segs[0] {
		t.Fatalf("Open over the damaged journal: %v, want a *journal.CorruptError in %s", err, segs[0])
	}
}

// TestPayloadRepairStopsAtClose: Close right after a repair started waits for it (goleak
// in TestMain sees no goroutine left), and Open rebuilds the file from the journal.
func TestPayloadRepairStopsAtClose(t *testing.T) {
	e, _ := newRepairEnv(t, Options{})
	for i := range 300 {
		e.enqueueSized("m"+strconv.Itoa(i), "d", 200)
	}
	e.o.mu.Lock()
	e.o.t.flushSpill()
	e.o.mu.Unlock()
	if err := os.Truncate(filepath.Join(e.dir, spillName), 0); err != nil {
		t.Fatal(err)
	}
	e.o.Heartbeat("d") // asks for a repair: Close comes while it reads (usually)
	if err := e.o.Close(); err != nil {
		t.Fatal(err)
	}
	if running, _, _ := e.repairState(); running {
		t.Fatal("a repair outlived Close")
	}
	e.snd.drain()
	e.open()
	e.o.Heartbeat("d")
	for i := range 3 {
		id := "m" + strconv.Itoa(i)
		e.expectPayload(id, 200)
		e.o.Ack("d", id, 0, "")
	}
}

// TestPayloadRepairUnderChurn damages the payload file at random (a flipped byte in a
// live record, now and then a cut) while tasks come in, are sent, acked and reported and
// the journal compacts in the background: every command is sent once, in its device's
// order, with its own payload, and no repair fails.
func TestPayloadRepairUnderChurn(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("OUTBOX_REPAIR_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (OUTBOX_REPAIR_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	e, _ := newRepairEnv(t, Options{Journal: journal.Options{Sync: journal.SyncNone}, CompactAfter: 150, spillMinDead: 4 << 10})
	devices := []string{"d0", "d1", "d2"}
	for _, d := range devices {
		e.o.Heartbeat(d)
	}
	path := filepath.Join(e.dir, spillName)
	size := map[string]int{}
	queued := map[string][]string{} // per device, in intake order, not yet sent
	sent := 0
	take := func(c Command) {
		t.Helper()
		q := queued[c.DeviceID]
		if len(q) == 0 || q[0] != c.MessageID || c.Try != 1 || !bytes.Equal(c.Payload, payloadOf(c.MessageID, size[c.MessageID])) {
			t.Fatalf("sent %s try %d on %s with %d bytes (right: %v); next on the device: %v",
				c.MessageID, c.Try, c.DeviceID, len(c.Payload), bytes.Equal(c.Payload, payloadOf(c.MessageID, size[c.MessageID])), q[:min(len(q), 1)])
		}
		queued[c.DeviceID] = q[1:]
		sent++
		e.o.Ack(c.DeviceID, c.MessageID, 0, "")
	}
	next, damage := 0, 0
	for step := range 300 {
		for range rng.IntN(6) {
			id, d, n := "m"+strconv.Itoa(next), devices[rng.IntN(len(devices))], 1+rng.IntN(600)
			if rng.IntN(40) == 0 {
				n = spillBufSize + rng.IntN(2000)
			}
			next++
			size[id] = n
			queued[d] = append(queued[d], id)
			e.enqueueSized(id, d, n)
		}
		switch r := rng.IntN(100); {
		case r < 12: // a flipped byte in a live record
			e.o.mu.Lock()
			e.o.t.flushSpill()
			var refs []payRef
			for _, it := range e.o.t.items.all() {
				if it.pay != 0 {
					refs = append(refs, it.pay)
				}
			}
			e.o.mu.Unlock()
			if len(refs) > 0 {
				ref := refs[rng.IntN(len(refs))]
				if err := flipOne(path, ref.off()+rng.Int64N(ref.size())); err == nil {
					damage++
				}
			}
		case r < 14: // a cut
			e.o.mu.Lock()
			e.o.t.flushSpill()
			end := e.o.t.spill.size
			e.o.mu.Unlock()
			if end > 0 {
				if err := os.Truncate(path, rng.Int64N(end)); err != nil {
					t.Fatal(err)
				}
				damage++
			}
		}
		for range rng.IntN(8) {
			select {
			case c := <-e.snd.sent:
				take(c)
			default:
			}
		}
		if step%10 == 0 {
			var ids []string
			for _, r := range e.results() {
				ids = append(ids, r.MessageID)
			}
			if err := e.o.MarkReported(ids...); err != nil {
				t.Fatal(err)
			}
		}
	}
	for sent < next {
		take(e.snd.next(t))
	}
	s := e.o.Stats()
	if s.PayloadRepairFailures != 0 || (damage > 0 && s.PayloadRepairs == 0) {
		t.Fatalf("%d damages: %+v", damage, s)
	}
	t.Logf("%d tasks, %d damages, %d payloads repaired, %d journal reads, %d snapshots",
		next, damage, s.PayloadRepairs, e.o.repair.scans.Load(), e.o.JournalStats().Snapshots)
	e.restart()
	if err := e.o.compact(); err != nil {
		t.Fatalf("compaction after the run: %v", err)
	}
}

// BenchmarkPayloadRepair measures one repair round with 10,000 commands queued on 100
// offline devices and their adds in the journal: one damaged record (the round checks
// every record of the payload file, then reads the journal for the one), and every record
// lost to a truncated file (the journal gives back 10,000 payloads, and the file's rewrite
// takes them back from the heap).
func BenchmarkPayloadRepair(b *testing.B) {
	for _, truncate := range []bool{false, true} {
		name := "one-damaged"
		if truncate {
			name = "all-damaged"
		}
		b.Run(name, func(b *testing.B) {
			const n = 10_000
			rounds := make(chan struct{}, 1)
			dir := b.TempDir()
			o, err := Open(dir, nopSender, &Options{Journal: journal.Options{Sync: journal.SyncNone},
				afterRepair: func() { rounds <- struct{}{} }})
			if err != nil {
				b.Fatal(err)
			}
			defer o.Close()
			tasks := make([]Task, n)
			for i := range tasks {
				tasks[i] = benchTask(i)
			}
			for i := 0; i < n; i += 1000 {
				for _, err := range o.EnqueueBatch(tasks[i : i+1000]) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := o.j.WriteOut(); err != nil {
				b.Fatal(err)
			}
			path := filepath.Join(dir, spillName)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				o.mu.Lock()
				if len(o.t.heapPay) > 0 {
					if err := o.t.rewriteSpill(); err != nil { // the last round's payloads back into the file
						b.Fatal(err)
					}
				}
				o.t.flushSpill()
				it := o.t.items.get(tasks[n/2].MessageID)
				ref := it.pay
				o.unlock()
				if truncate {
					err = os.Truncate(path, 0)
				} else {
					err = flipOne(path, ref.off()+spillHdr+3)
				}
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				o.mu.Lock()
				o.requestRepair(it)
				o.unlock()
				<-rounds
			}
			b.StopTimer()
			want := uint64(b.N)
			if truncate {
				want *= n
			}
			if s := o.Stats(); s.PayloadRepairs != want || s.PayloadRepairFailures != 0 {
				b.Fatalf("%+v after %d rounds", s, b.N)
			}
			js := o.JournalStats()
			b.ReportMetric(float64(js.Bytes)/1e6, "journal-MB")
		})
	}
}

func flipOne(path string, off int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		return err
	}
	b[0] ^= 0x04
	_, err = f.WriteAt(b, off)
	return err
}
