package statestore

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

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

// snapshotReader reads a snapshot one frame at a time, so that loading never
// holds more than one record beyond what the store keeps: a snapshot larger
// than the bounds allow (written before they were lowered) costs reading
// time, not memory.
type snapshotReader struct {
	r     *bufio.Reader
	buf   []byte // the last frame read; reused
	limit uint32 // frames longer than this are skipped unread (checksummed only)
}

// readFrame reads the next frame into buf and checks it; skipped reports a
// frame over limit, streamed through the checksum and not kept.
func (sr *snapshotReader) readFrame() (frame []byte, skipped bool, err error) {
	var n32 [4]byte
	if _, err := io.ReadFull(sr.r, n32[:]); err != nil {
		return nil, false, truncated(err)
	}
	n := binary.BigEndian.Uint32(n32[:])
	if n > maxFrame {
		return nil, false, fmt.Errorf("%w: frame length %d", ErrCorruptSnapshot, n)
	}
	var sum uint32
	if n > sr.limit {
		h := crc32.New(castagnoli)
		if _, err := io.CopyN(h, sr.r, int64(n)); err != nil {
			return nil, false, truncated(err)
		}
		sum, skipped = h.Sum32(), true
	} else {
		if cap(sr.buf) < int(n) {
			sr.buf = make([]byte, n)
		}
		frame = sr.buf[:n]
		if _, err := io.ReadFull(sr.r, frame); err != nil {
			return nil, false, truncated(err)
		}
		sum = crc32.Checksum(frame, castagnoli)
	}
	if _, err := io.ReadFull(sr.r, n32[:]); err != nil {
		return nil, false, truncated(err)
	}
	if sum != binary.BigEndian.Uint32(n32[:]) {
		return nil, false, fmt.Errorf("%w: checksum mismatch", ErrCorruptSnapshot)
	}
	return frame, skipped, nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated frame", ErrCorruptSnapshot)
	}
	return err
}

// scanSnapshot reads a snapshot from r and calls each for every key record in
// file order (nil for a record skipped as longer than limit). It fails with
// ErrCorruptSnapshot on any damage: the records already passed to each are
// then not to be trusted as the whole.
func scanSnapshot(r io.Reader, limit uint32, each func(rec *keyRecord)) error {
	sr := &snapshotReader{r: bufio.NewReaderSize(r, 64<<10), limit: max(limit, 64<<10)}
	var magic [len(snapshotMagic)]byte
	if _, err := io.ReadFull(sr.r, magic[:]); err != nil || string(magic[:]) != snapshotMagic {
		return fmt.Errorf("%w: bad magic", ErrCorruptSnapshot)
	}
	frame, skipped, err := sr.readFrame()
	if err != nil {
		return err
	}
	var h snapshotHeader
	if skipped {
		return fmt.Errorf("%w: header too long", ErrCorruptSnapshot)
	}
	if _, err := h.UnmarshalMsg(frame); err != nil {
		return fmt.Errorf("%w: header: %v", ErrCorruptSnapshot, err)
	}
	if h.Format != snapshotFormat {
		return fmt.Errorf("%w: unknown format %d", ErrCorruptSnapshot, h.Format)
	}
	for i := uint32(0); i < h.Count; i++ {
		frame, skipped, err := sr.readFrame()
		if err != nil {
			return fmt.Errorf("record %d: %w", i, err)
		}
		if skipped {
			each(nil)
			continue
		}
		var rec keyRecord // fresh: the store keeps its Value
		if _, err := rec.UnmarshalMsg(frame); err != nil {
			return fmt.Errorf("%w: record %d: %v", ErrCorruptSnapshot, i, err)
		}
		each(&rec)
	}
	if _, err := sr.r.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: trailing bytes", ErrCorruptSnapshot)
	}
	return nil
}

// loadReport counts what a load left out.
type loadReport struct {
	loaded, expired     int
	tooLarge            int   // key or value over MaxKeySize or MaxValueSize
	overKeys, overBytes int   // did not fit in MaxKeys or MaxBytes
	leftOutBytes        int64 // key and value bytes of tooLarge, overKeys and overBytes (when decoded)
	fencesDropped       int   // fences on reserved keys
}

// load reads the snapshot into the empty store (a missing file is an empty
// store), within the store's bounds, by this rule: records are taken in
// file order; one whose key or value is longer than MaxKeySize or
// MaxValueSize is left out, and so is one that would take the store past
// MaxKeys or MaxBytes (a later, smaller one may still fit). What is left out
// is logged in one warning; the file keeps it until the next snapshot is
// written (on the next change of a persistent key), which holds only what
// was loaded: restarting with the old bounds before that brings it back.
func (s *Store) load() error {
	f, err := os.Open(s.snapshot.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	limit := uint32(maxFrame)
	if s.maxKeySize > 0 && s.maxValue > 0 {
		// A frame holds the key, the value and less than 64 KiB of the rest
		// (field names, versions, the fence's node id).
		limit = uint32(min(int64(s.maxKeySize)+int64(s.maxValue)+64<<10, maxFrame))
	}
	var rep loadReport
	now := s.now()
	err = scanSnapshot(f, limit, func(r *keyRecord) { s.restoreRecord(r, now, &rep) })
	if err != nil {
		return err
	}
	if rep.tooLarge+rep.overKeys+rep.overBytes > 0 {
		s.log.Warn("statestore: the snapshot holds more than the bounds allow; keys left out "+
			"(the file keeps them until the next persistent change is written)",
			"path", s.snapshot.path, "loaded", rep.loaded, "left_out_too_large", rep.tooLarge,
			"left_out_max_keys", rep.overKeys, "left_out_max_bytes", rep.overBytes,
			"left_out_bytes", rep.leftOutBytes, "max_keys", s.maxKeys, "max_bytes", s.maxBytes,
			"max_key_size", s.maxKeySize, "max_value_size", s.maxValue)
	}
	if rep.fencesDropped > 0 {
		s.log.Warn("statestore: fencing tokens on reserved keys dropped at load", "keys", rep.fencesDropped)
	}
	return nil
}

// restoreRecord loads one record (nil: one skipped unread as too long) into
// the store being loaded, by load's rule.
func (s *Store) restoreRecord(r *keyRecord, now int64, rep *loadReport) {
	if r == nil {
		rep.tooLarge++
		return
	}
	if len(r.Key) == 0 || (r.ExpireAt != 0 && r.ExpireAt <= now) {
		rep.expired++
		return
	}
	if (s.maxKeySize > 0 && len(r.Key) > s.maxKeySize) || (s.maxValue > 0 && len(r.Value) > s.maxValue) {
		rep.tooLarge++
		rep.leftOutBytes += int64(len(r.Key) + len(r.Value))
		return
	}
	e := &entry{
		key:       string(r.Key),
		value:     r.Value,
		version:   hlc.Timestamp{Wall: r.Wall, Counter: r.Counter, Node: r.Node},
		heapIndex: -1,
		persist:   true,
	}
	if r.Fenced {
		if s.reserved(r.Key) {
			rep.fencesDropped++
		} else {
			e.fence = &hlc.Timestamp{Wall: r.FenceWall, Counter: r.FenceCounter, Node: r.FenceNode}
		}
	}
	if old := s.keys[e.key]; old != nil { // duplicate: the later record wins
		s.remove(old)
		rep.loaded--
	}
	switch {
	case s.maxKeys > 0 && len(s.keys) >= s.maxKeys:
		rep.overKeys++
	case s.maxBytes > 0 && s.bytes+e.cost() > s.maxBytes:
		rep.overBytes++
	default:
		s.keys[e.key] = e
		s.bytes += e.cost()
		s.persisted[e] = struct{}{}
		if r.ExpireAt != 0 {
			s.setExpiry(e, r.ExpireAt-now)
		}
		// The clock must never issue a version below one already handed out.
		s.clock.Restore(e.version) // not Observe: no drift check on our own past versions
		rep.loaded++
		return
	}
	rep.leftOutBytes += int64(len(r.Key) + len(r.Value))
	s.clock.Restore(e.version) // a version handed out once, even if the key is left out
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

// write replaces the snapshot atomically (see the layout comment) with h and
// recs, one record at a time: writing holds one encoded record, not a copy
// of the whole set.
func (f *snapshotFile) write(h snapshotHeader, recs []keyRecord) error {
	tmp := f.path + ".tmp"
	file, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = writeSnapshot(file, h, recs)
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

func writeSnapshot(w io.Writer, h snapshotHeader, recs []keyRecord) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	buf, err := appendFrame(append(make([]byte, 0, 4<<10), snapshotMagic...), h.MarshalMsg)
	if err != nil {
		return err
	}
	if _, err := bw.Write(buf); err != nil {
		return err
	}
	for i := range recs {
		if buf, err = appendFrame(buf[:0], recs[i].MarshalMsg); err != nil {
			return err
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
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
	if hook != nil {
		hook()
	}
	err := s.snapshot.write(snapshotHeader{
		Format: snapshotFormat, Node: s.node, Count: uint32(len(recs)), WrittenAt: s.now(),
	}, recs)
	if err != nil {
		s.mu.Lock()
		s.dirty = true // tried again by persistLoop (after a pause), on the next change, or at Close
		logNow := s.snapshotFailedSince.IsZero() || time.Since(s.snapshotFailLogged) >= snapshotFailLogEvery
		if s.snapshotFailedSince.IsZero() {
			s.snapshotFailedSince = time.Now()
		}
		if logNow {
			s.snapshotFailLogged = time.Now()
		}
		since := s.snapshotFailedSince
		s.mu.Unlock()
		if logNow {
			s.log.Error("statestore: snapshot write failed; retrying", "path", s.snapshot.path, "error", err,
				"since", since.Format(time.RFC3339))
		}
		return err
	}
	s.mu.Lock()
	s.durableSeq = seq
	ready := s.takeWaiters(seq)
	s.releaseDeferred(seq)
	failedSince := s.snapshotFailedSince
	s.snapshotFailedSince = time.Time{}
	s.mu.Unlock()
	if !failedSince.IsZero() {
		s.log.Warn("statestore: snapshot written again", "path", s.snapshot.path,
			"after", time.Since(failedSince).Round(time.Millisecond))
	}
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
	cost    int64 // counted in Store.bytes while it waits
}

// takeWaiters removes and returns the waiters satisfied by seq. Called with
// s.mu held.
func (s *Store) takeWaiters(seq uint64) []durableWaiter {
	var ready []durableWaiter
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if w.seq <= seq {
			ready = append(ready, w)
			s.bytes -= w.cost
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
//
// While it waits, the answer counts against MaxBytes with Request.WaitBytes
// (WaiterOverhead): a change that would take the store past MaxBytes with what
// waits for its snapshot is refused, so that while snapshot writes fail the
// answers and notifications waiting stay within the bound.
func (s *Store) DoDurable(req *Request, dst []byte, done func(reply []byte, version hlc.Timestamp, err error)) (out []byte, version hlc.Timestamp, wait bool) {
	req.durable = done != nil
	out, version = s.Do(req, dst)
	req.durable = false
	if req.persistSeq == 0 || done == nil {
		return out, version, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.durableSeq >= req.persistSeq {
		return out, version, false // a snapshot already took it
	}
	reply := bytes.Clone(out) // not out's spare capacity (a caller's buffer sized for the request)
	cost := waiterCost(len(reply), req.WaitBytes)
	s.bytes += cost
	s.waiters = append(s.waiters, durableWaiter{req.persistSeq, reply, version, done, cost})
	return out, version, true
}

// Pauses before a failed snapshot write is tried again (doubling from the first to the
// last), and how often a failure that lasts is logged.
const (
	snapshotRetryFirst   = 100 * time.Millisecond
	snapshotRetryMax     = 5 * time.Second
	snapshotFailLogEvery = time.Minute
)

// persistLoop writes snapshots off the request path: requests only mark the
// store dirty, so a client's read loop never waits for the disk. Changes that
// arrive while a snapshot is being written are coalesced into the next one. A
// write that failed is tried again after a pause (snapshotRetryFirst, doubling
// up to snapshotRetryMax) until one succeeds: the answers DoDurable holds and
// the notifications of persistent changes wait for it, and must not wait for a
// further change that may not come.
func (s *Store) persistLoop() {
	defer s.wg.Done()
	retry := time.NewTimer(snapshotRetryMax)
	retry.Stop() // armed by a failure only
	defer retry.Stop()
	var pause time.Duration
	for {
		select {
		case <-s.done:
			return
		case <-s.wakePersist:
		case <-retry.C:
		}
		if s.writeSnapshot() == nil {
			pause = 0
			continue
		}
		pause = min(max(2*pause, snapshotRetryFirst), snapshotRetryMax)
		// A change meanwhile tries at once: it is the next change's write either way.
		retry.Reset(pause)
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
