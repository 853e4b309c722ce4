package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/seed0e69bba5/faceagent/hlc"
)

// Snapshot file layout (all integers big-endian):
//
//	"FASTORE1"                       8-byte magic
//	frame: [len uint32][msgp][crc32c(msgp) uint32]   the snapshotHeader
//	frame × header.Count             one keyRecord each
//
// The file is replaced atomically: written to path+".tmp", fsynced, renamed
// over path, and the directory fsynced, so a crash leaves either the old or
// the new snapshot, never a mix. Any checksum, magic, count or trailing-byte
// mismatch is ErrCorruptSnapshot.
const (
	snapshotMagic  = "FASTORE1"
	snapshotFormat = 1
	maxFrame       = 64 << 20 // a frame longer than this is corruption, not a value
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type snapshotFile struct {
	path string
	// mu serialises snapshot writers (persistLoop, Flush, Close) from
	// collecting to renaming, so an older state never overwrites a newer one.
	mu sync.Mutex
}

// load reads the snapshot; a missing file is an empty store.
func (f *snapshotFile) load() ([]keyRecord, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeSnapshot(b)
}

func decodeSnapshot(b []byte) ([]keyRecord, error) {
	if !bytes.HasPrefix(b, []byte(snapshotMagic)) {
		return nil, fmt.Errorf("%w: bad magic", ErrCorruptSnapshot)
	}
	b = b[len(snapshotMagic):]
	frame, b, err := nextFrame(b)
	if err != nil {
		return nil, err
	}
	var h snapshotHeader
	if _, err := h.UnmarshalMsg(frame); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorruptSnapshot, err)
	}
	if h.Format != snapshotFormat {
		return nil, fmt.Errorf("%w: unknown format %d", ErrCorruptSnapshot, h.Format)
	}
	recs := make([]keyRecord, 0, min(h.Count, 1<<16))
	for i := uint32(0); i < h.Count; i++ {
		if frame, b, err = nextFrame(b); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		var r keyRecord
		if _, err := r.UnmarshalMsg(frame); err != nil {
			return nil, fmt.Errorf("%w: record %d: %v", ErrCorruptSnapshot, i, err)
		}
		recs = append(recs, r)
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrCorruptSnapshot, len(b))
	}
	return recs, nil
}

func nextFrame(b []byte) (frame, rest []byte, err error) {
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("%w: truncated frame", ErrCorruptSnapshot)
	}
	n := binary.BigEndian.Uint32(b)
	if n > maxFrame || uint64(len(b)) < 8+uint64(n) {
		return nil, nil, fmt.Errorf("%w: frame length %d", ErrCorruptSnapshot, n)
	}
	frame = b[4 : 4+n]
	if crc32.Checksum(frame, castagnoli) != binary.BigEndian.Uint32(b[4+n:]) {
		return nil, nil, fmt.Errorf("%w: checksum mismatch", ErrCorruptSnapshot)
	}
	return frame, b[8+n:], nil
}

func appendFrame(dst []byte, marshal func([]byte) ([]byte, error)) ([]byte, error) {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst, err := marshal(dst)
	if err != nil {
		return dst, err
	}
	frame := dst[at+4:]
	binary.BigEndian.PutUint32(dst[at:], uint32(len(frame)))
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(frame, castagnoli)), nil
}

func encodeSnapshot(h snapshotHeader, recs []keyRecord) ([]byte, error) {
	b := append([]byte(nil), snapshotMagic...)
	b, err := appendFrame(b, h.MarshalMsg)
	if err != nil {
		return nil, err
	}
	for i := range recs {
		if b, err = appendFrame(b, recs[i].MarshalMsg); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// write replaces the snapshot atomically (see the layout comment).
func (f *snapshotFile) write(b []byte) error {
	tmp := f.path + ".tmp"
	file, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = file.Write(b)
	if err == nil {
		err = file.Sync()
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, f.path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	dir, err := os.Open(filepath.Dir(f.path))
	if err != nil {
		return err
	}
	err = dir.Sync()
	if cerr := dir.Close(); err == nil {
		err = cerr
	}
	return err
}

// restore loads records into an empty store, skipping keys already expired.
func (s *Store) restore(recs []keyRecord) {
	now := s.now()
	for i := range recs {
		r := &recs[i]
		if len(r.Key) == 0 || (r.ExpireAt != 0 && r.ExpireAt <= now) {
			continue
		}
		e := &entry{
			key:       string(r.Key),
			value:     r.Value,
			version:   hlc.Timestamp{Wall: r.Wall, Counter: r.Counter, Node: r.Node},
			heapIndex: -1,
			persist:   true,
		}
		if r.Fenced {
			e.fence = &hlc.Timestamp{Wall: r.FenceWall, Counter: r.FenceCounter, Node: r.FenceNode}
		}
		if old := s.keys[e.key]; old != nil { // duplicate: the later record wins
			s.remove(old)
		}
		s.keys[e.key] = e
		s.bytes += int64(len(e.key) + len(e.value))
		s.persisted[e] = struct{}{}
		if r.ExpireAt != 0 {
			s.setExpiry(e, r.ExpireAt-now)
		}
		// The clock must never issue a version below one already handed out.
		s.clock.Restore(e.version) // not Observe: no drift check on our own past versions
	}
}

// collect copies the persistent entries into records. Values are shared:
// a stored value is never modified. Called with s.mu held.
func (s *Store) collect() []keyRecord {
	recs := make([]keyRecord, 0, len(s.persisted))
	for e := range s.persisted {
		r := keyRecord{
			Key: []byte(e.key), Value: e.value,
			Wall: e.version.Wall, Counter: e.version.Counter, Node: e.version.Node,
			ExpireAt: e.expireAt,
		}
		if e.fence != nil {
			r.Fenced = true
			r.FenceWall, r.FenceCounter, r.FenceNode = e.fence.Wall, e.fence.Counter, e.fence.Node
		}
		recs = append(recs, r)
	}
	return recs
}

// writeSnapshot writes the current persistent set if it changed.
func (s *Store) writeSnapshot() error {
	s.snapshot.mu.Lock()
	defer s.snapshot.mu.Unlock()
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return nil
	}
	s.dirty = false
	seq := s.dirtySeq
	recs := s.collect()
	hook := s.testHookWrite
	s.mu.Unlock()
	b, err := encodeSnapshot(snapshotHeader{
		Format: snapshotFormat, Node: s.node, Count: uint32(len(recs)), WrittenAt: s.now(),
	}, recs)
	if err == nil {
		if hook != nil {
			hook()
		}
		err = s.snapshot.write(b)
	}
	if err != nil {
		s.mu.Lock()
		s.dirty = true // try again on the next change or at Close
		s.mu.Unlock()
		s.log.Error("statestore: snapshot write failed", "path", s.snapshot.path, "error", err)
		return err
	}
	s.mu.Lock()
	s.durableSeq = seq
	ready := s.takeWaiters(seq)
	s.releaseDeferred(seq)
	s.mu.Unlock()
	for _, w := range ready {
		w.done(w.reply, w.version, nil)
	}
	return nil
}

// durableWaiter is a DoDurable caller waiting for snapshot seq.
type durableWaiter struct {
	seq     uint64
	reply   []byte
	version hlc.Timestamp
	done    func(reply []byte, version hlc.Timestamp, err error)
}

// takeWaiters removes and returns the waiters satisfied by seq. Called with
// s.mu held.
func (s *Store) takeWaiters(seq uint64) []durableWaiter {
	var ready []durableWaiter
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if w.seq <= seq {
			ready = append(ready, w)
		} else {
			kept = append(kept, w)
		}
	}
	clear(s.waiters[len(kept):])
	s.waiters = kept
	return ready
}

// DoDurable is Do for a caller that must not acknowledge a change of the
// persistent keys before it is on disk. When the request changed them (a
// SET with Persist, or a SET, DEL or VDEL of a persistent key) in a store
// with a SnapshotPath, DoDurable returns wait = true and calls done once,
// from the store's persistence goroutine, after a snapshot holding the
// change is fsynced — or with the error at Close if none could be written —
// passing it the reply and version DoDurable returned. Otherwise wait is
// false and done is never called. done must not block.
func (s *Store) DoDurable(req *Request, dst []byte, done func(reply []byte, version hlc.Timestamp, err error)) (out []byte, version hlc.Timestamp, wait bool) {
	out, version = s.Do(req, dst)
	if req.persistSeq == 0 || done == nil {
		return out, version, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.durableSeq >= req.persistSeq {
		return out, version, false // a snapshot already took it
	}
	s.waiters = append(s.waiters, durableWaiter{req.persistSeq, out, version, done})
	return out, version, true
}

// persistLoop writes snapshots off the request path: requests only mark the
// store dirty, so a client's read loop never waits for the disk. Changes that
// arrive while a snapshot is being written are coalesced into the next one.
func (s *Store) persistLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.done:
			return
		case <-s.wakePersist:
			_ = s.writeSnapshot()
		}
	}
}

// Flush writes the persistent keys now if they changed since the last
// snapshot. It is a no-op without Options.SnapshotPath.
func (s *Store) Flush() error {
	if s.snapshot == nil {
		return nil
	}
	return s.writeSnapshot()
}
