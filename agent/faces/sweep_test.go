package faces

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestSweepKeepsReferencedAndRemovesTheRest(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	var sums []Sum
	for i := range 4 {
		d, sum := face(20+i, 1000)
		if err := s.Put(sum, 1000, bytes.NewReader(d)); err != nil {
			t.Fatal(err)
		}
		sums = append(sums, sum)
	}
	inUse := map[Sum]bool{sums[0]: true, sums[2]: true}
	n, err := s.Sweep(s.Mark(), func(x Sum) bool { return inUse[x] })
	if err != nil || n != 2 {
		t.Fatalf("Sweep = %d, %v; want 2 removed", n, err)
	}
	for i, sum := range sums {
		if s.Has(sum) != inUse[sum] {
			t.Errorf("face %d: held %v, referenced %v", i, s.Has(sum), inUse[sum])
		}
	}
	if got := files(t, dir); len(got) != 2 {
		t.Fatalf("files %v", got)
	}
	if st := s.Stats(); st.Removed != 2 || st.Faces != 2 || st.Bytes != 2000 {
		t.Fatalf("stats %+v", st)
	}
	// A restart finds what the sweep left.
	s.Close()
	s2 := open(t, dir, Options{})
	if !s2.Has(sums[0]) || !s2.Has(sums[2]) || s2.Has(sums[1]) {
		t.Fatal("reopened store differs from the swept one")
	}
}

// TestSweepSparesFacesOnTheirWayIn: a face a task is bringing into the desired state is
// not removed by a sweep whose reading of the desired state missed it, whether the task's
// Pin still holds it or was released after the sweep's Mark.
func TestSweepSparesFacesOnTheirWayIn(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	nobody := func(Sum) bool { return false }
	held, sh := face(30, 100)
	pin := s.Pin()
	if err := pin.Put(sh, 100, bytes.NewReader(held)); err != nil {
		t.Fatal(err)
	}
	// Held by a Pin: kept by any sweep.
	if n, _ := s.Sweep(s.Mark(), nobody); n != 0 || !s.Has(sh) {
		t.Fatal("a sweep removed a held face")
	}
	// The sweep marks, then (the desired state being read meanwhile) the task finishes.
	m := s.Mark()
	pin.Release()
	if n, _ := s.Sweep(m, nobody); n != 0 || !s.Has(sh) {
		t.Fatal("a sweep removed a face released after its mark")
	}
	// The next sweep reads a desired state that would show the reference; without it the
	// face goes.
	if n, _ := s.Sweep(s.Mark(), nobody); n != 1 || s.Has(sh) {
		t.Fatal("an unreferenced face survived a sweep marked after its release")
	}
	// A face referred to without data: Keep holds it like Put.
	kept, sk := face(31, 100)
	if err := s.Put(sk, 100, bytes.NewReader(kept)); err != nil {
		t.Fatal(err)
	}
	m = s.Mark()
	pin2 := s.Pin()
	if !pin2.Keep(sk) || pin2.Keep(sh) {
		t.Fatal("Keep: want true for a held face, false for a removed one")
	}
	if n, _ := s.Sweep(m, nobody); n != 0 {
		t.Fatal("a sweep removed a face kept by a Pin")
	}
	pin2.Release()
	pin2.Release() // idempotent
	if n, _ := s.Sweep(s.Mark(), nobody); n != 1 {
		t.Fatal("the face was not removed once released and unreferenced")
	}
}

// TestSweepDuringPutOfTheSameFace: a face being removed is not renamed into place under
// the removal, and a Put racing a sweep ends with the face held.
func TestSweepDuringPutOfTheSameFace(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	d, sum := face(32, 50000)
	for i := range 50 {
		if err := s.Put(sum, int64(len(d)), bytes.NewReader(d)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		var putErr error
		go func() { defer wg.Done(); putErr = s.Put(sum, int64(len(d)), bytes.NewReader(d)) }()
		go func() { defer wg.Done(); s.Sweep(s.Mark(), func(Sum) bool { return false }) }()
		wg.Wait()
		if putErr != nil {
			t.Fatal(putErr)
		}
		// Whatever the order, the index and the disk agree.
		f, err := s.Open(sum)
		if s.Has(sum) != (err == nil) {
			t.Fatalf("round %d: Has %v, Open %v", i, s.Has(sum), err)
		}
		if err == nil {
			f.Close()
		}
	}
}

// TestConcurrentPutHasReadSweep runs Puts, Has, chunked reads and sweeps together (under
// -race): every read face is whole, and the store's figures match its directory at the end.
func TestConcurrentPutHasReadSweep(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	const nFaces = 16
	type fc struct {
		d   []byte
		sum Sum
	}
	var fs []fc
	for i := range nFaces {
		d, sum := face(100+i, 2000+i*700)
		fs = append(fs, fc{d, sum})
	}
	keep := map[Sum]bool{}
	for i := 0; i < nFaces; i += 2 {
		keep[fs[i].sum] = true
	}
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	for w := range 6 {
		wg.Go(func() {
			buf := make([]byte, 1024)
			for i := 0; i < 300 && time.Now().Before(deadline); i++ {
				f := fs[(w*7+i)%nFaces]
				pin := s.Pin()
				if err := pin.Put(f.sum, int64(len(f.d)), bytes.NewReader(f.d)); err != nil {
					errc <- err
					return
				}
				r, err := s.Open(f.sum) // held by the pin: must be there
				if err != nil {
					errc <- fmt.Errorf("Open of a pinned face: %w", err)
					return
				}
				var got []byte
				for off := int64(0); off < r.Size(); {
					n, err := r.ReadAt(buf, off)
					if n == 0 && err != nil {
						errc <- err
						return
					}
					got = append(got, buf[:n]...)
					off += int64(n)
				}
				r.Close()
				pin.Release()
				if !bytes.Equal(got, f.d) {
					errc <- errors.New("a read face differs from what was put")
					return
				}
				s.Has(fs[i%nFaces].sum)
			}
		})
	}
	wg.Go(func() {
		for i := 0; i < 200 && time.Now().Before(deadline); i++ {
			if _, err := s.Sweep(s.Mark(), func(x Sum) bool { return keep[x] }); err != nil {
				errc <- err
				return
			}
		}
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	st := s.Stats()
	if got := len(files(t, dir)); got != st.Faces {
		t.Fatalf("%d files, %d faces in the index", got, st.Faces)
	}
	var bytesHeld int64
	for _, f := range fs {
		if s.Has(f.sum) {
			bytesHeld += int64(len(f.d))
		}
	}
	if bytesHeld != st.Bytes {
		t.Fatalf("index counts %d bytes, faces held are %d", st.Bytes, bytesHeld)
	}
}
