package faces

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// By its hash in hex, as commands carry it: the size, a chunk that ends exactly at the
// face's end without io.EOF, a shorter one with it, and ErrNotFound for a face not held.
func TestFaceByHexHash(t *testing.T) {
	s := open(t, t.TempDir(), Options{MaxBytes: 1 << 20})
	data, sum := face(3, 5000)
	if err := s.Put(sum, int64(len(data)), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.FaceSize(sum.String()); n != 5000 || err != nil {
		t.Fatalf("FaceSize = %d, %v; want 5000", n, err)
	}
	p := make([]byte, 1000)
	if n, err := s.ReadFace(sum.String(), p, 4000); n != 1000 || err != nil || !bytes.Equal(p, data[4000:]) {
		t.Fatalf("the last full chunk: %d bytes, %v", n, err)
	}
	if n, err := s.ReadFace(sum.String(), p, 4500); n != 500 || !errors.Is(err, io.EOF) || !bytes.Equal(p[:n], data[4500:]) {
		t.Fatalf("past the end: %d bytes, %v; want 500 and io.EOF", n, err)
	}
	_, other := face(4, 10)
	if _, err := s.FaceSize(other.String()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("FaceSize of a face not held: %v, want ErrNotFound", err)
	}
	if _, err := s.ReadFace(other.String(), p, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadFace of a face not held: %v, want ErrNotFound", err)
	}
	if _, err := s.FaceSize("not hex"); err == nil {
		t.Fatal("FaceSize took a hash that is not hex")
	}
}
