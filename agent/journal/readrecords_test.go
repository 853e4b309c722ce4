package journal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func readRecordsT(t *testing.T, j *Journal) ([]string, []Loss) {
	t.Helper()
	var out []string
	losses, err := j.ReadRecords(func(p []byte) error { out = append(out, string(p)); return nil })
	if err != nil {
		t.Fatalf("ReadRecords: %v", err)
	}
	return out, losses
}

// TestReadRecordsWhileRunning: after appends, a snapshot and appends written out without
// fsync, ReadRecords (unlike Replay) reads them all, in order, and the journal goes on.
func TestReadRecordsWhileRunning(t *testing.T) {
	j := openT(t, t.TempDir(), &Options{SegmentSize: 256, LazyDelay: 1 << 40})
	defer j.Close()
	var want []string
	add := func(n int, prefix string) {
		for i := range n {
			rec := fmt.Sprintf("%s-%02d", prefix, i)
			want = append(want, rec)
			if err := j.Append([]byte(rec)); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(30, "old")
	cp, err := j.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	add(5, "after-checkpoint")
	if err := j.WriteSnapshot(cp, func(emit func([]byte) error) error { return emit([]byte("state")) }); err != nil {
		t.Fatal(err)
	}
	want = append([]string{"state"}, want[30:]...)
	add(20, "new")
	if _, err := j.AppendLazy([]byte("lazy")); err != nil {
		t.Fatal(err)
	}
	if err := j.WriteOut(); err != nil {
		t.Fatal(err)
	}
	want = append(want, "lazy")
	got, losses := readRecordsT(t, j)
	if !slices.Equal(got, want) || len(losses) != 0 {
		t.Fatalf("ReadRecords: %q, losses %v\nwant %q", got, losses, want)
	}
	if st := j.Stats(); st.Segments < 2 {
		t.Fatalf("the test wants several segments: %+v", st)
	}
	if err := j.Append([]byte("more")); err != nil {
		t.Fatal(err)
	}
	if got, _ := readRecordsT(t, j); got[len(got)-1] != "more" {
		t.Fatalf("last record read %q, want %q", got[len(got)-1], "more")
	}
	stop := errors.New("stop")
	n := 0
	if _, err := j.ReadRecords(func([]byte) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("fn's error: %v after %d records, want it after 1", err, n)
	}
	j.Close()
	if _, err := j.ReadRecords(func([]byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}

// TestReadRecordsOfEverySize: records from one byte to several times the read window,
// in a mix that puts every kind of them across window boundaries, come back whole, damage
// in a big one included.
func TestReadRecordsOfEverySize(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, &Options{Sync: SyncNone})
	defer j.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var want [][]byte
	var offsets []int64
	off := int64(fileHeaderSize)
	for i := range 200 {
		n := 1 + rng.IntN(300)
		if i%9 == 4 {
			n = 1000 + rng.IntN(3*readWindow)
		}
		rec := make([]byte, n)
		for k := range rec {
			rec[k] = byte(rng.Uint32())
		}
		want = append(want, rec)
		offsets = append(offsets, off)
		off += int64(frameHeaderSize + n)
		if _, err := j.AppendAsync(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.WriteOut(); err != nil {
		t.Fatal(err)
	}
	check := func(skip int) {
		t.Helper()
		var got [][]byte
		losses, err := j.ReadRecords(func(p []byte) error { got = append(got, bytes.Clone(p)); return nil })
		exp := want
		if skip >= 0 {
			exp = slices.Concat(want[:skip], want[skip+1:])
		}
		if err != nil || len(got) != len(exp) {
			t.Fatalf("ReadRecords: %d records, %v (losses %v); want %d", len(got), err, losses, len(exp))
		}
		for i := range got {
			if !bytes.Equal(got[i], exp[i]) {
				t.Fatalf("record %d differs (%d bytes, want %d)", i, len(got[i]), len(exp[i]))
			}
		}
		if (skip >= 0) != (len(losses) == 1) || (skip >= 0 && (losses[0].Offset != offsets[skip] || losses[0].Bytes != int64(frameHeaderSize+len(want[skip])))) {
			t.Fatalf("losses %v, want record %d at %d", losses, skip, offsets[skip])
		}
	}
	check(-1)
	flipByteAt(t, segFiles(t, dir)[0], offsets[103]+frameHeaderSize+int64(len(want[103])/2))
	check(103)
}

func flipByteAt(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestReadRecordsSkipsDamage: a flipped byte in a sealed segment, in the open one and in
// a sealed segment's header costs the damaged record only (the header: nothing); each is
// reported with its file and offset, and the other records are read.
func TestReadRecordsSkipsDamage(t *testing.T) {
	dir := t.TempDir()
	j := openT(t, dir, &Options{SegmentSize: 200})
	defer j.Close()
	var want []string
	for i := range 30 {
		rec := fmt.Sprintf("record-%02d", i)
		want = append(want, rec)
		if err := j.Append([]byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	segs := segFiles(t, dir)
	if len(segs) < 3 {
		t.Fatalf("want 3 segments or more, have %v", segs)
	}
	frame := int64(frameHeaderSize + len(want[0]))
	flip := func(path string, off int64) { t.Helper(); flipByteAt(t, path, off) }
	perSeg := func(path string) int {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return int((st.Size() - fileHeaderSize) / frame)
	}
	first, last := segs[0], segs[len(segs)-1]
	// The second record of the first segment; the first record of the open one.
	flip(first, fileHeaderSize+frame+frameHeaderSize+3)
	flip(last, fileHeaderSize+5)
	flip(segs[1], 2) // the magic
	got, losses := readRecordsT(t, j)
	lastFirst := len(want) - perSeg(last)
	wantGot := slices.Concat(want[:1], want[2:lastFirst], want[lastFirst+1:])
	if !slices.Equal(got, wantGot) {
		t.Fatalf("read %q\nwant %q", got, wantGot)
	}
	wantLoss := []Loss{
		{File: first, Offset: fileHeaderSize + frame, Bytes: frame, Err: ErrChecksum},
		{File: segs[1], Offset: 0, Bytes: fileHeaderSize},
		{File: last, Offset: fileHeaderSize, Bytes: frame, Err: ErrChecksum},
	}
	if len(losses) != len(wantLoss) {
		t.Fatalf("losses %v, want %v", losses, wantLoss)
	}
	for i, l := range losses {
		w := wantLoss[i]
		if l.File != w.File || l.Offset != w.Offset || l.Bytes != w.Bytes || (w.Err != nil && !errors.Is(l.Err, w.Err)) ||
			(w.Err == nil && !errors.Is(l.Err, ErrBadFormat)) {
			t.Fatalf("loss %d: %+v, want %+v", i, l, w)
		}
	}
	// Damage up to the end of a file: the rest of it is lost, the next file is read.
	st, _ := os.Stat(first)
	flip(first, st.Size()-1)
	got, losses = readRecordsT(t, j)
	if n := perSeg(first); len(losses) != 4 || losses[1].File != first || losses[1].Offset != fileHeaderSize+int64(n-1)*frame || got[0] != want[0] || got[1] != want[2] || got[n-2] != want[n] {
		t.Fatalf("a damaged last record of a sealed segment: read %q, losses %v", got, losses)
	}
}

// TestReadRecordsDuringAppendsAndCompactions reads the journal over and over while one
// goroutine appends and another compacts (a snapshot holding every record so far): every
// read is the log's records in order, with at least every record durable before it began,
// though the files it began with are replaced meanwhile.
func TestReadRecordsDuringAppendsAndCompactions(t *testing.T) {
	j := openT(t, t.TempDir(), &Options{Sync: SyncNone, SegmentSize: 512})
	defer j.Close()
	var (
		mu      sync.Mutex // orders appends with checkpoints, as the outbox's lock does
		log     []string
		durable atomic.Int64
		stop    atomic.Bool
		wg      sync.WaitGroup
		snaps   atomic.Int64
	)
	// The appender goes on past total until the reader and the compactor have each had
	// their rounds (on a loaded machine 3,000 appends can end before either starts),
	// bounded by maxTotal appends and the deadline.
	const total, maxTotal = 3000, 200_000
	deadline := time.Now().Add(30 * time.Second)
	errc := make(chan error, 2)
	wg.Add(2)
	go func() { // the appender
		defer wg.Done()
		for i := 0; i < maxTotal && !stop.Load(); i++ {
			rec := fmt.Sprintf("r-%04d", i)
			mu.Lock()
			seq, err := j.AppendAsync([]byte(rec))
			log = append(log, rec)
			mu.Unlock()
			if err == nil {
				err = j.Wait(seq)
			}
			if err != nil {
				errc <- err
				return
			}
			durable.Store(int64(i + 1))
		}
	}()
	go func() { // the compactor
		defer wg.Done()
		for !stop.Load() {
			mu.Lock()
			cp, err := j.Checkpoint()
			state := slices.Clone(log)
			mu.Unlock()
			if err == nil {
				err = j.WriteSnapshot(cp, func(emit func([]byte) error) error {
					for _, r := range state {
						if err := emit([]byte(r)); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if err != nil {
				errc <- err
				return
			}
			snaps.Add(1)
		}
	}()
	reads := 0
	for len(errc) == 0 && durable.Load() < maxTotal && time.Now().Before(deadline) {
		if durable.Load() >= total && reads >= 5 && snaps.Load() >= 5 {
			break
		}
		before := int(durable.Load())
		got, losses := readRecordsT(t, j)
		if len(losses) != 0 || len(got) < before {
			t.Fatalf("read %d records (losses %v); %d were durable before", len(got), losses, before)
		}
		for i, r := range got {
			if want := fmt.Sprintf("r-%04d", i); r != want {
				t.Fatalf("record %d is %q, want %q", i, r, want)
			}
		}
		reads++
	}
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if reads < 5 || snaps.Load() < 5 {
		t.Fatalf("%d reads, %d snapshots: too few to have raced", reads, snaps.Load())
	}
	t.Logf("%d reads, %d snapshots", reads, snaps.Load())
	if m, _ := filepath.Glob(filepath.Join(j.Dir(), "*.snap")); len(m) != 1 {
		t.Fatalf("snapshots left: %v", m)
	}
}

// FuzzReadRecords puts arbitrary frames into a sealed segment and checks ReadRecords
// against recovery, the other reader of the format: with SkipCorrupt, Replay and
// Recovery().Lost must be exactly ReadRecords' records and losses. Neither may panic.
func FuzzReadRecords(f *testing.F) {
	var frames []byte
	for _, r := range []string{"first", "second", "third"} {
		frames = appendFrame(frames, []byte(r))
	}
	f.Add(frames)
	damaged := bytes.Clone(frames)
	damaged[frameHeaderSize+2] ^= 1
	f.Add(damaged)
	f.Add(frames[:len(frames)-2])
	f.Add(append(bytes.Clone(frames), make([]byte, 30)...))
	f.Add([]byte{})
	if seeds, _ := filepath.Glob("testdata/*.wal"); len(seeds) > 0 {
		for _, s := range seeds {
			if b, err := os.ReadFile(s); err == nil && len(b) >= fileHeaderSize {
				f.Add(b[fileHeaderSize:])
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		seg1 := append(appendFileHeader(nil, segmentKind, 1), data...)
		if err := os.WriteFile(filepath.Join(dir, "00000000000000000001.wal"), seg1, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "00000000000000000002.wal"), appendFileHeader(nil, segmentKind, 2), 0o644); err != nil {
			t.Fatal(err)
		}
		j, err := Open(dir, &Options{SkipCorrupt: true, Sync: SyncNone, MaxRecordSize: 1 << 16})
		if err != nil {
			t.Fatalf("Open with SkipCorrupt over a sealed segment with a valid header: %v", err)
		}
		defer j.Close()
		var replayed, read []string
		if err := j.Replay(func(p []byte) error { replayed = append(replayed, string(p)); return nil }); err != nil {
			t.Fatal(err)
		}
		losses, err := j.ReadRecords(func(p []byte) error { read = append(read, string(p)); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(read, replayed) {
			t.Fatalf("ReadRecords read %d records, Replay %d", len(read), len(replayed))
		}
		lost := j.Recovery().Lost
		if len(losses) != len(lost) {
			t.Fatalf("ReadRecords lost %v, recovery %v", losses, lost)
		}
		for i := range lost {
			if losses[i].File != lost[i].File || losses[i].Offset != lost[i].Offset || losses[i].Bytes != lost[i].Bytes {
				t.Fatalf("loss %d: ReadRecords %+v, recovery %+v", i, losses[i], lost[i])
			}
		}
	})
}
