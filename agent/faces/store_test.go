package faces

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/seed0e69bba5/faceagent/agent/metrics"
)

// face returns n bytes of data distinct for seed, and its Sum.
func face(seed, n int) ([]byte, Sum) {
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(seed*131 + i*7 + i>>8)
	}
	copy(data, fmt.Sprintf("face-%d-", seed))
	return data, sha256.Sum256(data)
}

func open(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// files lists the directory's names but the lock file.
func files(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.Name() != lockName {
			names = append(names, e.Name())
		}
	}
	return names
}

func readAll(t testing.TB, s *Store, sum Sum) []byte {
	t.Helper()
	f, err := s.Open(sum)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if n, err := f.ReadAt(b, 0); n != len(b) || (err != nil && err != io.EOF) {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	return b
}

func TestPutThenReadChunksAndReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	data, sum := face(1, 10000)
	if s.Has(sum) {
		t.Fatal("Has before Put")
	}
	if err := s.Put(sum, int64(len(data)), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if !s.Has(sum) {
		t.Fatal("no face after Put")
	}
	f, err := s.Open(sum)
	if err != nil {
		t.Fatal(err)
	}
	// A chunked transfer: 4 KiB from each "have".
	var got []byte
	chunk := make([]byte, 4096)
	for have := int64(0); have < f.Size(); {
		n, err := f.ReadAt(chunk, have)
		if err != nil && err != io.EOF {
			t.Fatal(err)
		}
		got = append(got, chunk[:n]...)
		have += int64(n)
	}
	f.Close()
	if !bytes.Equal(got, data) {
		t.Fatal("chunks differ from the face")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, dir, Options{VerifyOnOpen: true})
	if size, ok := s2.Size(sum); !ok || size != int64(len(data)) {
		t.Fatalf("after reopen: Size = %d, %v", size, ok)
	}
	if rec := s2.Recovery(); rec.TempRemoved != 0 || len(rec.Damaged) != 0 || len(rec.Unknown) != 0 {
		t.Fatalf("clean directory reported %+v", rec)
	}
	if !bytes.Equal(readAll(t, s2, sum), data) {
		t.Fatal("face differs after reopen")
	}
	if _, err := s2.Open(Sum{1}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open of an unknown face: %v", err)
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	open(t, dir, Options{})
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
}

func TestSameFaceTwiceIsOneFile(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	data, sum := face(2, 5000)
	for range 2 {
		// The reader of the second Put is one that fails if read: a held face is not read again.
		r := io.Reader(bytes.NewReader(data))
		if s.Has(sum) {
			r = iotest.ErrReader(errors.New("read although the store holds the face"))
		}
		if err := s.Put(sum, int64(len(data)), r); err != nil {
			t.Fatal(err)
		}
	}
	if got := files(t, dir); len(got) != 1 || got[0] != fileName(sum, 5000) {
		t.Fatalf("files %v, want one %s", got, fileName(sum, 5000))
	}
	if st := s.Stats(); st.Faces != 1 || st.Puts != 1 || st.BytesWritten != 5000 || st.Bytes != 5000 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRefusedFaceLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	reg := metrics.NewRegistry()
	s := open(t, dir, Options{Metrics: NewMetrics(reg)})
	data, sum := face(3, 3000)
	bad := bytes.Clone(data)
	bad[2999] ^= 1
	cases := []struct {
		name string
		size int64
		r    io.Reader
		want error
	}{
		{"hash mismatch", 3000, bytes.NewReader(bad), ErrHashMismatch},
		{"short", 3000, bytes.NewReader(data[:2999]), ErrSize},
		{"long", 2999, bytes.NewReader(data), ErrSize},
		{"long through a plain reader", 2999, io.MultiReader(bytes.NewReader(data)), ErrSize},
		{"reader fails", 3000, io.MultiReader(bytes.NewReader(data[:100]), iotest.ErrReader(io.ErrClosedPipe)), io.ErrClosedPipe},
	}
	for _, c := range cases {
		err := s.Put(sum, c.size, c.r)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Put = %v, want %v", c.name, err, c.want)
		}
		if got := files(t, dir); len(got) != 0 {
			t.Errorf("%s: left %v behind", c.name, got)
		}
		if s.Has(sum) {
			t.Errorf("%s: Has after a refused Put", c.name)
		}
	}
	if st := s.Stats(); st.Charged != 0 || st.HashFailures != 1 || st.Puts != 0 {
		t.Fatalf("stats after refusals %+v", st)
	}
	var out strings.Builder
	reg.WriteTo(&out)
	if !strings.Contains(out.String(), "faceagent_faces_hash_failures_total 1\n") {
		t.Fatalf("metrics:\n%s", out.String())
	}
	// The right data is taken after all.
	if err := s.Put(sum, 3000, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

func TestBudgetRefusesPutNamingTheKey(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{MaxBytes: 3 * BlockSize})
	a, sa := face(4, BlockSize+1) // two blocks
	if err := s.Put(sa, int64(len(a)), bytes.NewReader(a)); err != nil {
		t.Fatal(err)
	}
	b, sb := face(5, 1) // one block: fits exactly
	if err := s.Put(sb, 1, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	c, sc := face(6, 10)
	err := s.Put(sc, 10, bytes.NewReader(c))
	if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "[faces] max_bytes") {
		t.Fatalf("Put over the budget: %v", err)
	}
	if s.Has(sc) || len(files(t, dir)) != 2 {
		t.Fatalf("a refused face left something: %v", files(t, dir))
	}
	// A face held already costs nothing more.
	if err := s.Put(sb, 1, bytes.NewReader(b)); err != nil {
		t.Fatalf("Put of a held face at the budget: %v", err)
	}
	// Freed by a sweep, the space takes the face.
	if n, err := s.Sweep(s.Mark(), func(x Sum) bool { return x == sb }); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v", n, err)
	}
	if err := s.Put(sc, 10, bytes.NewReader(c)); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRemovesTruncatedFaceAndStrayTemp(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	good, sg := face(7, 6000)
	cut, sc := face(8, 6000)
	for _, f := range []struct {
		d []byte
		s Sum
	}{{good, sg}, {cut, sc}} {
		if err := s.Put(f.s, 6000, bytes.NewReader(f.d)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if err := os.Truncate(filepath.Join(dir, fileName(sc, 6000)), 4096); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(dir, tempPrefix+"0123456789abcdef-42")
	if err := os.WriteFile(stray, good[:100], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("operator's note"), 0o644); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, dir, Options{})
	rec := s2.Recovery()
	if rec.TempRemoved != 1 || len(rec.Damaged) != 1 || !strings.Contains(rec.Damaged[0], "4096 bytes, its name says 6000") ||
		!slices.Equal(rec.Unknown, []string{"README"}) {
		t.Fatalf("recovery %+v", rec)
	}
	if s2.Has(sc) || !s2.Has(sg) {
		t.Fatalf("after Open: truncated held %v, good held %v", s2.Has(sc), s2.Has(sg))
	}
	if got := files(t, dir); !slices.Equal(got, []string{fileName(sg, 6000), "README"}) {
		t.Fatalf("files %v", got)
	}
	// The truncated face can be put again.
	if err := s2.Put(sc, 6000, bytes.NewReader(cut)); err != nil {
		t.Fatal(err)
	}
}

func TestChangedBytesFoundByVerify(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	a, sa := face(9, 2000)
	b, sb := face(10, 2000)
	for _, f := range []struct {
		d []byte
		s Sum
	}{{a, sa}, {b, sb}} {
		if err := s.Put(f.s, 2000, bytes.NewReader(f.d)); err != nil {
			t.Fatal(err)
		}
	}
	flip := func(sum Sum) {
		path := filepath.Join(dir, fileName(sum, 2000))
		d, _ := os.ReadFile(path)
		d[1000] ^= 0x80
		if err := os.WriteFile(path, d, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	flip(sa)
	if err := s.Verify(sb); err != nil {
		t.Fatalf("Verify of a good face: %v", err)
	}
	if err := s.Verify(sa); !errors.Is(err, ErrHashMismatch) || s.Has(sa) {
		t.Fatalf("Verify of a changed face: %v, still held %v", err, s.Has(sa))
	}
	flip(sb)
	s.Close()
	s2 := open(t, dir, Options{VerifyOnOpen: true})
	if rec := s2.Recovery(); len(rec.Damaged) != 1 || s2.Has(sb) || len(files(t, dir)) != 0 {
		t.Fatalf("VerifyOnOpen: %+v, held %v, files %v", rec, s2.Has(sb), files(t, dir))
	}
}
