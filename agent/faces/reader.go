package faces

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Face is a stored face opened for reading, for sending it in chunks: ReadAt reads any
// range, from any number of goroutines. It stays readable until Close even if a sweep
// removes the face meanwhile.
type Face struct {
	f    *os.File
	sum  Sum
	size int64
}

// Open opens a stored face for reading; the error wraps ErrNotFound when the store does
// not hold it.
func (s *Store) Open(sum Sum) (*Face, error) {
	s.mu.Lock()
	e, ok := s.faces[sum]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, sum.short())
	}
	f, err := os.Open(filepath.Join(s.dir, fileName(sum, e.size)))
	if err != nil {
		if os.IsNotExist(err) { // removed since the lookup
			return nil, fmt.Errorf("%w: %s", ErrNotFound, sum.short())
		}
		return nil, fmt.Errorf("faces: %w", err)
	}
	return &Face{f: f, sum: sum, size: e.size}, nil
}

// ReadAt reads len(p) bytes of the face from offset off (io.ReaderAt): a chunk of a
// transfer. Fewer bytes than asked come with io.EOF at the face's end.
func (f *Face) ReadAt(p []byte, off int64) (int, error) { return f.f.ReadAt(p, off) }

// Size is the face's size in bytes.
func (f *Face) Size() int64 { return f.size }

// Sum is the face's SHA-256.
func (f *Face) Sum() Sum { return f.sum }

// Close closes the file.
func (f *Face) Close() error { return f.f.Close() }

// FaceSize is the size of the stored face whose SHA-256 is sha, in the hex form commands
// carry it; the error wraps ErrNotFound when the store does not hold it. With ReadFace it
// makes the store a chunk source by hash (the outbox's FaceSource).
func (s *Store) FaceSize(sha string) (int64, error) {
	sum, err := ParseSum(sha)
	if err != nil {
		return 0, err
	}
	n, ok := s.Size(sum)
	if !ok {
		return 0, fmt.Errorf("%w: %s", ErrNotFound, sum.short())
	}
	return n, nil
}

// ReadFace reads len(p) bytes of the face whose SHA-256 is sha from offset off. A read
// that fills p is not an error even at the face's end; fewer bytes come with io.EOF.
func (s *Store) ReadFace(sha string, p []byte, off int64) (int, error) {
	sum, err := ParseSum(sha)
	if err != nil {
		return 0, err
	}
	f, err := s.Open(sum)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := f.ReadAt(p, off)
	if n == len(p) && errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}
