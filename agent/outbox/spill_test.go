package outbox

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// faultySpill is a payload file whose writes and reads fail while told to.
type faultySpill struct {
	*os.File
	failWrite, failRead *atomic.Bool
}

func (f faultySpill) WriteAt(p []byte, off int64) (int, error) {
	if f.failWrite.Load() {
		return 0, &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.WriteAt(p, off)
}

func (f faultySpill) ReadAt(p []byte, off int64) (int, error) {
	if f.failRead.Load() {
		return 0, &fs.PathError{Op: "read", Path: f.Name(), Err: syscall.EIO}
	}
	return f.File.ReadAt(p, off)
}

type spillFaults struct{ failWrite, failRead atomic.Bool }

func (sf *spillFaults) create(path string) (spillFile, error) {
	f, err := createSpillFile(path)
	if err != nil {
		return nil, err
	}
	return faultySpill{f.(*os.File), &sf.failWrite, &sf.failRead}, nil
}

// payloadOf is the payload the tests here give message id: n bytes, derived from id so a
// payload read from the wrong place shows.
func payloadOf(id string, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = id[i%len(id)] ^ byte(i/len(id))
	}
	return b
}

// enqueueSized enqueues id for dev with a payload of n bytes (payloadOf).
func (e *env) enqueueSized(id, dev string, n int) {
	e.t.Helper()
	if err := e.o.Enqueue(Task{MessageID: id, TaskID: "t-" + id, DeviceID: dev, Op: "AddPerson", Payload: payloadOf(id, n)}); err != nil {
		e.t.Fatalf("Enqueue %s: %v", id, err)
	}
}

// expectPayload waits for the next send and checks it is id's first try with its payload.
func (e *env) expectPayload(id string, n int) {
	e.t.Helper()
	c := e.snd.next(e.t)
	if c.MessageID != id || c.Try != 1 || !bytes.Equal(c.Payload, payloadOf(id, n)) {
		e.t.Fatalf("sent %s try %d with %d payload bytes (right: %v); want %s try 1, %d bytes",
			c.MessageID, c.Try, len(c.Payload), bytes.Equal(c.Payload, payloadOf(c.MessageID, n)), id, n)
	}
}

// checkPayloads is checkPayloads with e.o's lock held (and released by a failure too).
func (e *env) checkPayloads(want func(*item) string, where string) {
	e.t.Helper()
	e.o.mu.Lock()
	defer e.o.mu.Unlock()
	checkPayloads(e.t, e.o, want, where)
}

// spillState returns a copy of the payload file's counters, taken with e.o's lock held.
func (e *env) spillState() (pins int, live, dead int64, rewrites uint64) {
	e.o.mu.Lock()
	defer e.o.mu.Unlock()
	s := e.o.t.spill
	return s.pins, s.live, s.dead, s.rewrites
}

// TestSpillPayloadsAcrossRestart: payloads of every size (none, small, longer than the
// write buffer) are in the file, not on the heap; Close removes the file; Open rebuilds it
// from the journal, and each command is sent with its own payload.
func TestSpillPayloadsAcrossRestart(t *testing.T) {
	e := newEnv(t, Options{Settings: Settings{RetryInterval: time.Second}})
	sizes := []int{0, 1, 100, spillBufSize + 1000, 300, 5000, spillBufSize - spillHdr, 7}
	var want int64
	for i, n := range sizes {
		e.enqueueSized("m"+strconv.Itoa(i), "d", n)
		if n > 0 {
			want += int64(spillHdr + n)
		}
	}
	path := filepath.Join(e.dir, spillName)
	if s := e.o.Stats(); s.PayloadsOnHeap != 0 || s.PayloadFileBytes != want {
		t.Fatalf("stats %+v; want %d bytes in the payload file, none on the heap", s, want)
	}
	if st, err := os.Stat(path); err != nil || st.Size() > want {
		t.Fatalf("payload file: %v, %v", st, err)
	}
	e.restart()
	e.checkPayloads(func(it *item) string {
		i, _ := strconv.Atoi(it.id()[1:])
		return string(payloadOf(it.id(), sizes[i]))
	}, "after restart")
	if s := e.o.Stats(); s.PayloadFileBytes != want {
		t.Fatalf("rebuilt payload file holds %d bytes, want %d", s.PayloadFileBytes, want)
	}
	e.o.Heartbeat("d")
	for i, n := range sizes {
		id := "m" + strconv.Itoa(i)
		e.expectPayload(id, n)
		e.o.Ack("d", id, 0, "")
	}
	if err := e.o.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Close left the payload file: %v", err)
	}
}

// TestSpillRewriteUnderChurn runs intake, sends, acks, reports, journal compactions and
// restarts with a low rewrite threshold and checks every payload sent, the file's
// accounting and its bound (live bytes plus at most max(live, threshold) dead ones).
func TestSpillRewriteUnderChurn(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("OUTBOX_SPILL_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (OUTBOX_SPILL_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	const minDead = 16 << 10
	e := newEnvSender(t, Options{
		Journal:      journal.Options{Sync: journal.SyncNone, SegmentSize: 64 << 10},
		Settings:     Settings{RetryInterval: time.Hour, HeartbeatTimeout: time.Hour},
		CompactAfter: 300, spillMinDead: minDead,
	}, true)
	devices := []string{"d0", "d1", "d2"}
	size := map[string]int{}
	next, rewrites, snapshots := 0, uint64(0), uint64(0)
	ack := func(k int) { // acks up to k commands sent; the others stay in flight
		for range k {
			select {
			case c := <-e.snd.sent:
				if n, ok := size[c.MessageID]; !ok || !bytes.Equal(c.Payload, payloadOf(c.MessageID, n)) {
					t.Fatalf("%s sent with a wrong payload (%d bytes)", c.MessageID, len(c.Payload))
				}
				e.o.Ack(c.DeviceID, c.MessageID, 0, "")
			default:
				return
			}
		}
	}
	for step := range 600 {
		for range rng.IntN(12) {
			id := "m" + strconv.Itoa(next)
			next++
			n := rng.IntN(700)
			if rng.IntN(50) == 0 {
				n = spillBufSize + rng.IntN(4000)
			}
			size[id] = n
			e.enqueueSized(id, devices[rng.IntN(len(devices))], n)
		}
		switch r := rng.IntN(100); {
		case r < 60:
			for _, d := range devices {
				e.o.Heartbeat(d)
			}
			ack(rng.IntN(20))
		case r < 62:
			_, _, _, n := e.spillState()
			rewrites += n
			snapshots += e.o.JournalStats().Snapshots
			e.restart()
		}
		res := e.results()
		ids := make([]string, len(res))
		for i, r := range res {
			ids[i] = r.MessageID
		}
		if err := e.o.MarkReported(ids...); err != nil {
			t.Fatal(err)
		}
		e.checkPayloads(func(it *item) string { return string(payloadOf(it.id(), size[it.id()])) }, fmt.Sprintf("step %d", step))
		if pins, live, dead, _ := e.spillState(); pins == 0 && dead > max(live, minDead) {
			t.Fatalf("step %d: payload file holds %d dead bytes, %d live", step, dead, live)
		}
	}
	_, _, _, n := e.spillState()
	rewrites += n
	snapshots += e.o.JournalStats().Snapshots
	if rewrites == 0 || snapshots == 0 {
		t.Fatalf("%d rewrites of the payload file, %d snapshots: the test missed them", rewrites, snapshots)
	}
	t.Logf("%d tasks, %d rewrites, %d snapshots", next, rewrites, snapshots)
}

// TestSpillWriteFailureKeepsPayloadsOnHeap: while the payload file refuses writes (a full
// disk), payloads stay on the heap and are sent, snapshotted and replayed all the same;
// once it takes writes again, new payloads go to it.
func TestSpillWriteFailureKeepsPayloadsOnHeap(t *testing.T) {
	var faults spillFaults
	e := newEnv(t, Options{createSpill: faults.create})
	faults.failWrite.Store(true)
	const n, size = 40, 1000 // 40 KB: more than the write buffer holds
	for i := range n {
		e.enqueueSized("a"+strconv.Itoa(i), "d", size)
	}
	s := e.o.Stats()
	if s.PayloadsOnHeap < spillBufSize/(size+spillHdr) || s.PayloadWriteErrors == 0 {
		t.Fatalf("a refused write should leave its payloads on the heap: %+v", s)
	}
	faults.failWrite.Store(false)
	for i := range n {
		e.enqueueSized("b"+strconv.Itoa(i), "d", size)
	}
	if s2 := e.o.Stats(); s2.PayloadsOnHeap != s.PayloadsOnHeap || s2.PayloadFileBytes == 0 || s2.PayloadWriteErrors != s.PayloadWriteErrors {
		t.Fatalf("once the file takes writes, payloads go there: %+v, before %+v", s2, s)
	}
	if err := e.o.compact(); err != nil { // a snapshot of both kinds
		t.Fatal(err)
	}
	e.restart()
	if s := e.o.Stats(); s.PayloadsOnHeap != 0 {
		t.Fatalf("after a restart every payload is in the file again: %+v", s)
	}
	sendAll := func(prefixes ...string) {
		t.Helper()
		e.o.Heartbeat("d")
		for _, p := range prefixes {
			for i := range n {
				id := p + strconv.Itoa(i)
				e.expectPayload(id, size)
				e.o.Ack("d", id, 0, "")
			}
		}
	}
	sendAll("a", "b")

	// Without a restart, a rewrite brings heap payloads back into the file.
	e.o.LinkDown("d")
	faults.failWrite.Store(true)
	for i := range n {
		e.enqueueSized("c"+strconv.Itoa(i), "d", size)
	}
	faults.failWrite.Store(false)
	for i := range n {
		e.enqueueSized("e"+strconv.Itoa(i), "d", size)
	}
	onHeap := e.o.Stats().PayloadsOnHeap
	e.o.mu.Lock()
	err := e.o.t.rewriteSpill()
	e.o.mu.Unlock()
	if s := e.o.Stats(); err != nil || onHeap == 0 || s.PayloadsOnHeap != 0 {
		t.Fatalf("rewrite: %v; %d payloads on the heap before, %+v after", err, onHeap, s)
	}
	e.checkPayloads(func(it *item) string { return string(payloadOf(it.id(), size)) }, "after the rewrite")
	sendAll("c", "e")
}

// TestSpillUnavailable: when the payload file cannot be created, the outbox works with
// every payload on the heap.
func TestSpillUnavailable(t *testing.T) {
	e := newEnv(t, Options{createSpill: func(string) (spillFile, error) {
		return nil, &fs.PathError{Op: "open", Path: "payloads.cache", Err: syscall.EMFILE}
	}})
	e.enqueueSized("m1", "d", 500)
	e.enqueueSized("m2", "d", 50)
	if s := e.o.Stats(); s.PayloadsOnHeap != 2 || s.PayloadFileBytes != 0 {
		t.Fatalf("stats %+v", s)
	}
	if err := e.o.compact(); err != nil {
		t.Fatal(err)
	}
	e.restart()
	e.o.Heartbeat("d")
	e.expectPayload("m1", 500)
	e.o.Ack("d", "m1", 0, "")
	e.expectPayload("m2", 50)
}

// lockCheckingSpill is a payload file that, when closed, checks that the journal still
// holds the directory's lock: otherwise another Open could have made its own payload file
// by then, and the remove that follows the close would take it away.
type lockCheckingSpill struct {
	spillFile
	t   *testing.T
	dir string
}

func (f lockCheckingSpill) Close() error {
	if j, err := journal.Open(f.dir, nil); err == nil {
		j.Close()
		f.t.Error("the payload file was closed after the journal let the directory go")
	} else if !errors.Is(err, journal.ErrLocked) {
		f.t.Errorf("journal.Open while the outbox closes: %v, want ErrLocked", err)
	}
	return f.spillFile.Close()
}

// TestSpillRemovedBeforeUnlock: an Open whose replay fails, and Close, remove the payload
// file while the journal still holds the directory's lock.
func TestSpillRemovedBeforeUnlock(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append([]byte("not a record")); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	made := false
	create := func(path string) (spillFile, error) {
		f, err := createSpillFile(path)
		if err != nil {
			return nil, err
		}
		made = true
		return lockCheckingSpill{f, t, dir}, nil
	}
	if o, err := Open(dir, newRecSender(), &Options{createSpill: create}); err == nil {
		o.Close()
		t.Fatal("Open replayed a journal record that is not one")
	}
	if !made {
		t.Fatal("the payload file was never made: the test checks nothing")
	}
	if _, err := os.Stat(filepath.Join(dir, spillName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the payload file outlived the failed Open: %v", err)
	}

	// Close too.
	dir = t.TempDir()
	o, err := Open(dir, newRecSender(), &Options{createSpill: func(path string) (spillFile, error) {
		f, err := createSpillFile(path)
		return lockCheckingSpill{f, t, dir}, err
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSpillRewriteByPurgeFailedClosesReplacedFile: a purge that rewrites the payload file
// closes the file it replaced once it released the lock, as every unlock does, rather than
// leaving it open (its dead bytes still on disk) until some later call.
func TestSpillRewriteByPurgeFailedClosesReplacedFile(t *testing.T) {
	e := newEnv(t, Options{spillMinDead: 1, spillEager: true})
	e.o.Heartbeat("d")
	e.enqueueSized("m1", "d", 100)
	e.expectPayload("m1", 100)
	e.o.Ack("d", "m1", 1, "busy") // failed, held
	e.o.LinkDown("d")
	e.enqueueSized("m2", "d", 100) // live: the rewrite copies it into a new file
	_, _, _, before := e.spillState()
	if n, err := e.o.PurgeFailed("d"); err != nil || n != 1 {
		t.Fatalf("PurgeFailed: %d, %v", n, err)
	}
	e.o.mu.Lock()
	rewrites, retired := e.o.t.spill.rewrites, e.o.t.spill.retired
	e.o.mu.Unlock()
	if rewrites == before {
		t.Fatal("the purge did not rewrite the payload file: the test checks nothing")
	}
	if retired != nil {
		t.Fatal("PurgeFailed left the replaced payload file open")
	}
}

// TestSpillRewriteOfEmptyFileTakesHeapPayloadsBack: when no payload in the file is live,
// the rewrite that reclaims its dead bytes still takes back the payloads a failed write
// left on the heap, as a rewrite with live payloads does.
func TestSpillRewriteOfEmptyFileTakesHeapPayloadsBack(t *testing.T) {
	var faults spillFaults
	e := newEnv(t, Options{createSpill: faults.create, spillMinDead: 1})
	big := spillBufSize + 10 // written at once, not buffered
	faults.failWrite.Store(true)
	e.enqueueSized("a1", "offline", big)
	faults.failWrite.Store(false)
	if s := e.o.Stats(); s.PayloadsOnHeap != 1 {
		t.Fatalf("a refused write should leave its payload on the heap: %+v", s)
	}
	e.o.Heartbeat("d")
	e.enqueueSized("b1", "d", big)
	e.expectPayload("b1", big)
	e.o.Ack("d", "b1", 0, "")
	_, _, _, before := e.spillState()
	if err := e.o.MarkReported("b1"); err != nil { // b1 leaves: the file holds no live payload
		t.Fatal(err)
	}
	if _, _, _, n := e.spillState(); n == before {
		t.Fatal("the payload file was not rewritten: the test checks nothing")
	}
	if s := e.o.Stats(); s.PayloadsOnHeap != 0 {
		t.Fatalf("the rewrite left a payload on the heap: %+v", s)
	}
	e.checkPayloads(func(it *item) string { return string(payloadOf(it.id(), big)) }, "after the rewrite")
	e.o.Heartbeat("offline")
	e.expectPayload("a1", big)
}
