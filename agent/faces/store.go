package faces

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Errors of the store. Put's errors wrap ErrBudget, ErrHashMismatch or ErrSize when the
// face is refused for that reason (the intake dead-letters the task with the text).
var (
	ErrBudget       = errors.New("faces: over the disk budget [faces] max_bytes")
	ErrHashMismatch = errors.New("faces: data does not hash to the face's sha256")
	ErrSize         = errors.New("faces: data is not the face's size")
	ErrNotFound     = errors.New("faces: no such face")
	ErrLocked       = errors.New("faces: directory in use by another store")
	ErrClosed       = errors.New("faces: store closed")
)

// BlockSize is what the budget charges a face at the least, and the unit its size is
// rounded up to: a file takes whole blocks of the filesystem (4 KiB on ext4 and F2FS).
const BlockSize = 4096

// DefaultMaxBytes is the budget when Options.MaxBytes is 0.
const DefaultMaxBytes = 1 << 30

const (
	lockName   = "LOCK"
	tempPrefix = ".tmp-"
)

// Options configure a Store.
type Options struct {
	// MaxBytes bounds the disk the faces take, each counted as its size rounded up to
	// BlockSize ([faces] max_bytes); 0 means DefaultMaxBytes. A Put that would pass it
	// fails with ErrBudget.
	MaxBytes int64
	// VerifyOnOpen hashes every face at Open and removes those whose content does not
	// match their name. Without it Open checks sizes only (a bit flip is then found by
	// Verify, or by the terminal's own hash check).
	VerifyOnOpen bool
	// Metrics receives the store's series; nil records nothing.
	Metrics *Metrics
	// Logger reports what Open found and removed; nil: slog.Default().
	Logger *slog.Logger
}

// Recovery is what Open found in the directory besides good faces.
type Recovery struct {
	// TempRemoved counts the temporary files of Puts a crash interrupted, removed.
	TempRemoved int
	// Damaged lists the faces removed because their file was not what its name says
	// (truncated or grown, or, with VerifyOnOpen, not hashing to it): file name and why.
	Damaged []string
	// Unknown lists files that are neither faces nor temporary files, left alone.
	Unknown []string
}

// Stats are the store's figures.
type Stats struct {
	Faces        int    // faces held
	Bytes        int64  // their sizes, summed
	Charged      int64  // what the budget counts: sizes rounded up to BlockSize, with Puts in progress
	Puts         uint64 // Puts that stored a face (a face already held is not counted)
	HashFailures uint64 // faces refused or removed because their data did not hash to their name
	Removed      uint64 // faces removed by Sweep
	Fsyncs       uint64 // fsync calls of Puts and Sweeps (files and the directory)
	BytesWritten uint64 // bytes Puts wrote into files
}

// entry is one face held: its size, the sweep generation it was last put, held or
// released in, and how many Pins hold it.
type entry struct {
	size    int64
	touched uint64
	holds   int32
}

// busy is a Put or a removal in progress for one face: other Puts of the face wait for
// done, so a face is written once and never renamed into place while it is being removed.
type busy struct {
	done chan struct{}
	err  error
}

// Store is a directory of faces, each in one file named by its SHA-256 and size. Its
// methods are safe for concurrent use.
type Store struct {
	dir  string
	opts Options
	max  int64
	log  *slog.Logger
	lock *os.File
	rec  Recovery

	mu      sync.Mutex
	faces   map[Sum]entry
	busy    map[Sum]*busy
	bytes   int64
	charged int64
	gen     uint64 // the sweep generation: Mark advances it
	closed  bool

	puts, hashFailures, removed, fsyncs, written atomic.Uint64
}

// Open opens (creating it if needed) the store in dir and rebuilds its index from the
// files there: temporary files of interrupted Puts are removed, and so is every face
// whose file size differs from the size in its name (or, with VerifyOnOpen, whose content
// does not hash to it). What it found is in Recovery and in the log. The directory is
// locked until Close.
func Open(dir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("faces: %w", err)
	}
	lock, err := lockDir(filepath.Join(dir, lockName))
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir, opts: opts, max: opts.MaxBytes, log: opts.Logger, lock: lock,
		faces: map[Sum]entry{}, busy: map[Sum]*busy{}, gen: 1}
	if s.max <= 0 {
		s.max = DefaultMaxBytes
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if err := s.load(); err != nil {
		lock.Close()
		return nil, err
	}
	s.gauges()
	return s, nil
}

// load reads the directory into the index.
func (s *Store) load() error {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("faces: %w", err)
	}
	changed := false
	remove := func(name, why string) error {
		if err := os.Remove(filepath.Join(s.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("faces: removing %s (%s): %w", name, why, err)
		}
		changed = true
		return nil
	}
	for _, e := range ents {
		name := e.Name()
		switch {
		case name == lockName:
			continue
		case strings.HasPrefix(name, tempPrefix):
			if err := remove(name, "interrupted put"); err != nil {
				return err
			}
			s.rec.TempRemoved++
			continue
		}
		sum, size, ok := parseName(name)
		if !ok || !e.Type().IsRegular() {
			s.rec.Unknown = append(s.rec.Unknown, name)
			s.log.Warn("faces: unknown file left alone", "dir", s.dir, "file", name)
			continue
		}
		why := ""
		if info, err := e.Info(); err != nil {
			why = err.Error()
		} else if info.Size() != size {
			why = fmt.Sprintf("%d bytes, its name says %d", info.Size(), size)
		} else if _, dup := s.faces[sum]; dup {
			why = "a second file of the same face"
		} else if s.opts.VerifyOnOpen {
			if err := verifyFile(filepath.Join(s.dir, name), sum, size); err != nil {
				why = err.Error()
				s.hashFailures.Add(1)
				s.opts.Metrics.hashFailure()
			}
		}
		if why != "" {
			if err := remove(name, why); err != nil {
				return err
			}
			s.rec.Damaged = append(s.rec.Damaged, name+": "+why)
			s.log.Warn("faces: damaged face removed", "dir", s.dir, "file", name, "why", why)
			s.opts.Metrics.removedFace("damaged")
			continue
		}
		s.faces[sum] = entry{size: size}
		s.bytes += size
		s.charged += charge(size)
	}
	if s.rec.TempRemoved > 0 {
		s.log.Info("faces: removed temporary files of interrupted puts", "dir", s.dir, "count", s.rec.TempRemoved)
	}
	if changed {
		return s.syncDir()
	}
	return nil
}

// Recovery reports what Open found besides good faces.
func (s *Store) Recovery() Recovery { return s.rec }

// Close releases the directory. Faces opened for reading stay readable until closed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	return s.lock.Close()
}

// Has reports whether the store holds the face.
func (s *Store) Has(sum Sum) bool {
	s.mu.Lock()
	_, ok := s.faces[sum]
	s.mu.Unlock()
	return ok
}

// Size returns the face's size, and whether the store holds it.
func (s *Store) Size(sum Sum) (int64, bool) {
	s.mu.Lock()
	e, ok := s.faces[sum]
	s.mu.Unlock()
	return e.size, ok
}

// Stats returns the store's figures.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	st := Stats{Faces: len(s.faces), Bytes: s.bytes, Charged: s.charged}
	s.mu.Unlock()
	st.Puts = s.puts.Load()
	st.HashFailures = s.hashFailures.Load()
	st.Removed = s.removed.Load()
	st.Fsyncs = s.fsyncs.Load()
	st.BytesWritten = s.written.Load()
	return st
}

// Put stores the face sum of size bytes read from r, unless the store holds it already
// (r is then not read). It returns once the face is durable. See Pin.Put, which also
// keeps it from sweeps until the Pin is released.
func (s *Store) Put(sum Sum, size int64, r io.Reader) error {
	p := s.Pin()
	defer p.Release()
	return p.Put(sum, size, r)
}

// put stores the face, or finds it stored, and holds it once for the caller (Pin.Put).
func (s *Store) put(sum Sum, size int64, r io.Reader) error {
	if size < 0 {
		return fmt.Errorf("%w: face %s: negative size %d", ErrSize, sum.short(), size)
	}
	cost := charge(size)
	s.mu.Lock()
	for {
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		if e, ok := s.faces[sum]; ok {
			if e.size != size {
				s.mu.Unlock()
				return fmt.Errorf("%w: face %s is %d bytes, not %d", ErrSize, sum.short(), e.size, size)
			}
			e.holds++
			e.touched = s.gen
			s.faces[sum] = e
			s.mu.Unlock()
			return nil
		}
		b, ok := s.busy[sum]
		if !ok {
			break
		}
		s.mu.Unlock()
		<-b.done
		s.mu.Lock()
	}
	if s.charged+cost > s.max {
		used := s.charged
		s.mu.Unlock()
		return fmt.Errorf("%w = %d: face %s needs %d bytes on disk, %d in use", ErrBudget, s.max, sum.short(), cost, used)
	}
	s.charged += cost
	b := &busy{done: make(chan struct{})}
	s.busy[sum] = b
	s.mu.Unlock()

	err := s.write(sum, size, r)

	s.mu.Lock()
	delete(s.busy, sum)
	if err != nil {
		s.charged -= cost
	} else {
		s.faces[sum] = entry{size: size, touched: s.gen, holds: 1}
		s.bytes += size
	}
	s.mu.Unlock()
	b.err = err
	close(b.done)
	if err == nil {
		s.puts.Add(1)
		s.opts.Metrics.put()
	}
	s.gauges()
	return err
}

// write writes the face into a temporary file while hashing it, and only when it is
// complete and hashes to sum fsyncs it, renames it to its name and fsyncs the directory:
// a crash leaves a temporary file (removed at Open) or the whole verified face.
func (s *Store) write(sum Sum, size int64, r io.Reader) (err error) {
	f, err := os.CreateTemp(s.dir, tempPrefix+sum.short()+"-*")
	if err != nil {
		return fmt.Errorf("faces: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w := &hashWriter{f: f, h: sha256.New(), limit: size}
	buf := copyBuffers.Get().(*[]byte)
	_, err = io.CopyBuffer(w, r, *buf) // a bytes.Reader writes its slice to w without the buffer
	copyBuffers.Put(buf)
	if err != nil {
		if w.over {
			return fmt.Errorf("%w: face %s: more than %d bytes", ErrSize, sum.short(), size)
		}
		return fmt.Errorf("faces: writing face %s: %w", sum.short(), err)
	}
	s.written.Add(uint64(w.n))
	if w.n != size {
		return fmt.Errorf("%w: face %s: %d bytes, not %d", ErrSize, sum.short(), w.n, size)
	}
	var got Sum
	w.h.Sum(got[:0])
	if got != sum {
		s.hashFailures.Add(1)
		s.opts.Metrics.hashFailure()
		return fmt.Errorf("%w: %s hashes to %s", ErrHashMismatch, sum.short(), got.short())
	}
	s.fsyncs.Add(1)
	if err := f.Sync(); err != nil {
		return fmt.Errorf("faces: fsync face %s: %w", sum.short(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("faces: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, fileName(sum, size))); err != nil {
		return fmt.Errorf("faces: %w", err)
	}
	if err := s.syncDir(); err != nil {
		// The face is complete under its name; whether the rename survives a power cut
		// is unknown, so it is not reported as stored. Removing it keeps the index and
		// the directory in step.
		os.Remove(filepath.Join(s.dir, fileName(sum, size)))
		return err
	}
	return nil
}

// copyBuffers are io.CopyBuffer's buffers for readers that do not write themselves out.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// hashWriter writes to f and h, refusing more than limit bytes in all.
type hashWriter struct {
	f     *os.File
	h     hash.Hash
	n     int64
	limit int64
	over  bool
}

func (w *hashWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > w.limit-w.n {
		w.over = true
		return 0, ErrSize
	}
	n, err := w.f.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	return n, err
}

func (s *Store) syncDir() error {
	s.fsyncs.Add(1)
	d, err := os.Open(s.dir)
	if err != nil {
		return fmt.Errorf("faces: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("faces: fsync directory: %w", err)
	}
	return nil
}

// Verify hashes the face's file again; a face that no longer hashes to its name (the
// disk changed it) is removed and the error wraps ErrHashMismatch. A sender calls it when
// a terminal reports that a face it received failed its hash check.
func (s *Store) Verify(sum Sum) error {
	s.mu.Lock()
	e, ok := s.faces[sum]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, sum.short())
	}
	err := verifyFile(filepath.Join(s.dir, fileName(sum, e.size)), sum, e.size)
	if err == nil || !errors.Is(err, ErrHashMismatch) {
		return err
	}
	s.hashFailures.Add(1)
	s.opts.Metrics.hashFailure()
	if _, rerr := s.remove([]Sum{sum}, "damaged", nil); rerr != nil {
		return errors.Join(err, rerr)
	}
	s.log.Warn("faces: damaged face removed", "dir", s.dir, "face", sum.String(), "why", err.Error())
	return err
}

func verifyFile(path string, sum Sum, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("faces: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("faces: reading face %s: %w", sum.short(), err)
	}
	var got Sum
	h.Sum(got[:0])
	if n != size || got != sum {
		return fmt.Errorf("%w: %s (%d bytes) hashes to %s", ErrHashMismatch, sum.short(), n, got.short())
	}
	return nil
}

// charge is what the budget counts for a face of size bytes: whole blocks, at least one.
func charge(size int64) int64 {
	if size <= 0 {
		return BlockSize
	}
	return (size + BlockSize - 1) / BlockSize * BlockSize
}

// fileName is a face's file name: its SHA-256 in hex, a dot, its size in decimal. The
// size in the name lets Open find a truncated face without reading it.
func fileName(sum Sum, size int64) string {
	return sum.String() + "." + strconv.FormatInt(size, 10)
}

func parseName(name string) (Sum, int64, bool) {
	hexPart, sizePart, ok := strings.Cut(name, ".")
	if !ok {
		return Sum{}, 0, false
	}
	sum, err := ParseSum(hexPart)
	if err != nil {
		return Sum{}, 0, false
	}
	size, err := strconv.ParseInt(sizePart, 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != sizePart {
		return Sum{}, 0, false
	}
	return sum, size, true
}

func (s *Store) gauges() {
	if s.opts.Metrics == nil {
		return
	}
	s.mu.Lock()
	n, b := len(s.faces), s.bytes
	s.mu.Unlock()
	s.opts.Metrics.held(n, b)
}
