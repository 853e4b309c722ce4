package outbox

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// The face step (protocol v2): before a command whose person carries a face the terminal
// lacks, the face goes first, in PutFace chunks, through the device's one in-flight slot.
// See "Faces" in the package documentation. The dispatch core calls it at five points:
// pump (faceFirst, before a task's send), ack (faceMissing for code 21, faceAlias for the
// ack of a command resent after a 21), ackQuery (faceChunkAcked), queryTryFailed
// (faceChunkFailed) and requeueQuery (a chunk in flight when the device went offline).

// FaceSource gives the bytes of the faces commands refer to (the agent's face store).
// Its methods are called with the outbox's lock held, once per chunk: they must only read
// (the page cache, a small file), never wait for the network.
type FaceSource interface {
	// FaceSize returns the size of the face with that SHA-256 (64 lower-case hex digits),
	// or an error when the gateway does not hold it.
	FaceSize(sha256 string) (int64, error)
	// ReadFace reads the face's bytes from off into p; fewer than len(p) only at its end.
	ReadFace(sha256 string, p []byte, off int64) (int, error)
}

const (
	// DefaultFaceChunk is the chunk size of a device without its own
	// (DeviceConfig.FaceChunk): protocol v2's default for MQTT terminals.
	DefaultFaceChunk = 64 << 10
	// maxFaceMissing bounds how often one command is sent again after a code 21 (its
	// face sent before each): a terminal that answers 21 however often it is sent the face
	// fails the command instead of looping.
	maxFaceMissing = 3
	// maxFaceHash is how many transfers of a face for one command may end in code 22:
	// the face is sent again once, then the command fails.
	maxFaceHash = 2
	// maxFaceStalls bounds the chunks in a row a terminal acks without taking their bytes
	// (have does not grow): a terminal that never takes the face fails the command.
	maxFaceStalls = 3
	// faceProbeAbove is the largest chunk sent again as it was after its ack timeout; a
	// larger one is replaced by a probe (an empty chunk) that learns the terminal's have,
	// so that a cut costs what the terminal lost. A chunk this small costs less on the
	// wire than the probe's round trip would save: the serial chunk (4 KiB) is resent,
	// the MQTT chunk (64 KiB) is probed.
	faceProbeAbove = 4 << 10
	// maxKnownFaces bounds the faces remembered as held, per device. Forgetting one costs
	// a chunk the terminal answers with have = size, never a wrong command.
	maxKnownFaces = 4096
)

// deviceFaces is what the outbox knows of a device's faces. It lives in memory only: a
// wrong "held" costs a code 21 and the face sent again; a forgotten one a chunk.
type deviceFaces struct {
	v2      bool   // the terminal speaks protocol v2 (its heartbeat said so, or it answered 21)
	serial  string // its serial and persons in the last heartbeat: a change is a reset
	persons int
	seen    bool
	held    map[uint64]struct{} // faces it holds, by the first 8 bytes of their SHA-256
	xfer    faceXfer
	// The command sent again after a code 21 (at the head of the queue), how often, and
	// the message id it was last sent under: the terminal answered its own id already.
	missItem *item
	missN    int
	alias    string
}

// faceXfer is the face being sent to the device, as far as the agent knows it.
type faceXfer struct {
	sha       string
	size      int
	have      int   // what the terminal holds of it from 0 (its last ack)
	probe     bool  // ask for have first (empty chunk): a chunk was lost in an outage
	hashFails int   // transfers ended in code 22 for the command below
	stalls    int   // chunks acked without progress, in a row
	timedOut  bool  // the chunk in flight is a probe for a chunk that got no ack in time
	forItem   *item // the command the transfer is for (the head when the last chunk left)
}

func faceKey(sha string) uint64 {
	var b [8]byte
	if len(sha) >= 16 {
		_, _ = hex.Decode(b[:], []byte(sha[:16]))
	}
	return binary.BigEndian.Uint64(b[:])
}

func (fs *deviceFaces) holds(sha string) bool {
	_, ok := fs.held[faceKey(sha)]
	return ok
}

func (fs *deviceFaces) hold(sha string) {
	if fs.held == nil {
		fs.held = map[uint64]struct{}{}
	}
	if len(fs.held) >= maxKnownFaces {
		for k := range fs.held { // any one: a forgotten face costs one chunk
			delete(fs.held, k)
			break
		}
	}
	fs.held[faceKey(sha)] = struct{}{}
}

func (fs *deviceFaces) forget(sha string) {
	delete(fs.held, faceKey(sha))
	if fs.xfer.sha == sha {
		fs.xfer = faceXfer{}
	}
}

// reset forgets every face: the terminal was reset or replaced.
func (fs *deviceFaces) reset() {
	fs.held = nil
	fs.xfer = faceXfer{}
}

func (o *Outbox) facesOf(d *device) *deviceFaces {
	if d.live.faces == nil {
		d.live.faces = &deviceFaces{}
	}
	return d.live.faces
}

// TerminalHeartbeat is Heartbeat with the terminal's heartbeat: the face step learns from
// it whether the terminal speaks protocol v2, and forgets the faces it knew the terminal
// held when the terminal was replaced (its serial changed) or reset (its persons dropped
// to 0); batches (batch.go) learn the batch size it announces.
func (o *Outbox) TerminalHeartbeat(deviceID string, h face.Heartbeat) {
	o.mu.Lock()
	if !o.closed {
		d := o.dev(deviceID)
		d.noteBatchSize(&h) // batch.go
		if o.faces != nil {
			fs := o.facesOf(d)
			fs.v2 = h.Version() >= 2
			if fs.seen && (h.Serial != fs.serial || h.Persons == 0 && fs.persons > 0) {
				fs.reset()
			}
			fs.seen, fs.serial, fs.persons = true, h.Serial, h.Persons
		}
	}
	o.mu.Unlock()
	o.Heartbeat(deviceID)
}

// FacesKnown returns how many faces the outbox knows deviceID holds (for tests and
// status).
func (o *Outbox) FacesKnown(deviceID string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if d, ok := o.t.devices[deviceID]; ok && d.live.faces != nil {
		return len(d.live.faces.held)
	}
	return 0
}

// faceOutcome is what faceFirst decided for a command.
type faceOutcome uint8

const (
	faceNone   faceOutcome = iota // no face to send first: send the command
	faceSent                      // a chunk took the slot
	faceFailed                    // the command failed (finished): go on with the next
)

// faceNeeds returns the faces cmd's persons carry.
func faceNeeds(cmd *face.Command, dst []face.FaceRef) []face.FaceRef {
	switch cmd.Op {
	case face.AddPerson:
		if cmd.Person.Face.SHA256 != "" {
			dst = append(dst, cmd.Person.Face)
		}
	case face.AddPersons:
		for i := range cmd.Persons {
			if f := cmd.Persons[i].Face; f.SHA256 != "" {
				dst = append(dst, f)
			}
		}
	}
	return dst
}

// faceFirst is pump's hook before it sends it: when its person needs a face the terminal
// is not known to hold, a chunk of that face takes the slot instead (the command is sent
// once every face it needs is held).
func (o *Outbox) faceFirst(d *device, it *item, payload []byte, now int64) faceOutcome {
	fs := d.live.faces
	if fs == nil || !fs.v2 {
		return faceNone
	}
	if fs.missItem != nil && fs.missItem != it {
		fs.missItem, fs.missN, fs.alias = nil, 0, ""
	}
	if op := o.t.opOf(it); op != string(face.AddPerson) && op != string(face.AddPersons) {
		return faceNone
	}
	var cmd face.Command
	if _, err := cmd.UnmarshalMsg(payload); err != nil {
		return faceNone // not a face.Command: the Sender decides
	}
	var buf [1]face.FaceRef
	for _, ref := range faceNeeds(&cmd, buf[:0]) {
		if fs.holds(ref.SHA256) {
			continue
		}
		return o.sendChunk(d, fs, it, ref, now)
	}
	return faceNone
}

// sendChunk sends the next chunk of ref for it: from the have the terminal last
// acknowledged.
func (o *Outbox) sendChunk(d *device, fs *deviceFaces, it *item, ref face.FaceRef, now int64) faceOutcome {
	x := &fs.xfer
	if x.sha != ref.SHA256 {
		size, err := o.faces.FaceSize(ref.SHA256)
		if err != nil {
			o.finishItem(it, Failed, fmt.Sprintf("face %s: not on the gateway: %v", shortSum(ref.SHA256), err))
			return faceFailed
		}
		if size <= 0 || size > face.MaxFaceSize {
			o.finishItem(it, Failed, fmt.Sprintf("face %s: %d bytes, not 1..%d", shortSum(ref.SHA256), size, face.MaxFaceSize))
			return faceFailed
		}
		*x = faceXfer{sha: ref.SHA256, size: int(size)}
	}
	x.forItem = it
	chunk := face.FaceChunk{SHA256: x.sha, Size: x.size, Offset: x.have}
	if !x.probe && x.have < x.size {
		n := min(o.settingsChunk(d), x.size-x.have)
		data := make([]byte, n)
		got, err := o.faces.ReadFace(x.sha, data, int64(x.have))
		if got < n {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			o.finishItem(it, Failed, fmt.Sprintf("face %s: reading it at %d: %v", shortSum(x.sha), x.have, err))
			*x = faceXfer{}
			return faceFailed
		}
		chunk.Data = data
	}
	x.probe = false
	id := o.chunkID()
	payload, err := (&face.Command{MessageID: id, Op: face.PutFace, Face: chunk}).AppendMsg(nil)
	if err != nil { // cannot happen with these fields
		o.finishItem(it, Failed, fmt.Sprintf("face %s: encoding a chunk: %v", shortSum(x.sha), err))
		return faceFailed
	}
	q := &query{id: id, dev: d, op: string(face.PutFace), payload: payload, step: true}
	if o.queries == nil {
		o.queries = map[string]*query{}
	}
	o.queries[id] = q
	d.live.queries = append([]*query{q}, d.live.queries...)
	o.sendQuery(d, q, now)
	return faceSent
}

// chunkID is a new message id for a PutFace chunk: "f", the outbox's prefix (6 base-62
// digits drawn at Open: 35.8 random bits) and a sequence number in base 62. It is unique
// among the pending queries of every device (o.queries is keyed by it; the prefix has a
// fixed length, so no two sequence numbers give one id), and across restarts (the
// prefix): a terminal answers a repeated id from its memory. It is short because every
// chunk and its ack carry it: on a serial line, 1 KiB faces, the id and its echo are
// about 2 % of the bytes of a person (docs/benchmarks.md).
func (o *Outbox) chunkID() string {
	o.faceSeq++
	b := make([]byte, 0, 1+faceIDPrefixLen+11)
	b = append(b, 'f')
	b = append(b, o.faceIDPrefix...)
	return string(appendBase62(b, o.faceSeq))
}

const (
	base62Digits    = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	faceIDPrefixLen = 6
)

// faceIDPrefix is r in faceIDPrefixLen base-62 digits (r modulo 62^6).
func faceIDPrefix(r uint64) string {
	var b [faceIDPrefixLen]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = base62Digits[r%62]
		r /= 62
	}
	return string(b[:])
}

// appendBase62 appends v in base 62, without leading zeros ("0" for 0).
func appendBase62(dst []byte, v uint64) []byte {
	var b [11]byte // 62^11 > 2^64
	i := len(b)
	for {
		i--
		b[i] = base62Digits[v%62]
		v /= 62
		if v == 0 {
			break
		}
	}
	return append(dst, b[i:]...)
}

// faceChunkTimedOut is called for a chunk q that got no ack in time and will be sent
// again (lock held). A chunk larger than faceProbeAbove becomes a probe, under a new
// message id, that asks for the terminal's have: the terminal may hold most of it (a
// transfer cut part way), and the next chunk goes from there. The probe keeps q's tries,
// so a terminal that never answers fails the command after MaxTries as before. A late
// ack of the chunk's own id is then ignored; the probe's ack says the same and more.
func (o *Outbox) faceChunkTimedOut(q *query) {
	var sent face.Command
	if _, err := sent.UnmarshalMsg(q.payload); err != nil || len(sent.Face.Data) <= faceProbeAbove {
		return
	}
	probe := face.Command{MessageID: o.chunkID(), Op: face.PutFace,
		Face: face.FaceChunk{SHA256: sent.Face.SHA256, Size: sent.Face.Size, Offset: sent.Face.Offset}}
	payload, err := probe.AppendMsg(nil)
	if err != nil {
		return // cannot happen: fewer bytes than the chunk that encoded
	}
	delete(o.queries, q.id)
	q.id, q.payload = probe.MessageID, payload
	o.queries[q.id] = q
	if fs := q.dev.live.faces; fs != nil && fs.xfer.sha == sent.Face.SHA256 {
		fs.xfer.timedOut = true
	}
}

// settingsChunk is d's chunk size.
func (o *Outbox) settingsChunk(d *device) int {
	n := d.live.cfg.FaceChunk
	if n <= 0 {
		n = o.faceChunk
	}
	return min(max(n, 1), face.MaxChunkSize)
}

// faceChunkAcked takes the terminal's ack of a chunk (called by ackQuery, lock held).
func (o *Outbox) faceChunkAcked(q *query, a *face.Ack) {
	d := q.dev
	fs := o.facesOf(d)
	x := &fs.xfer
	var sent face.Command
	if _, err := sent.UnmarshalMsg(q.payload); err != nil || x.sha != sent.Face.SHA256 {
		return // a transfer forgotten since (reset, 21): the next pump starts over
	}
	switch a.Code {
	case 0:
		if a.Have >= x.size {
			fs.hold(x.sha)
			*x = faceXfer{}
			return
		}
		// A probe for a chunk that got no ack counts as that chunk: a terminal that keeps
		// losing the chunks it is sent stalls too, or probe and chunk would loop.
		if (len(sent.Face.Data) > 0 || x.timedOut) && a.Have <= sent.Face.Offset {
			x.stalls++
		} else {
			x.stalls = 0
		}
		x.timedOut = false
		x.have = max(a.Have, 0)
		if x.stalls >= maxFaceStalls {
			o.faceFailTask(d, fmt.Sprintf("face %s: the terminal does not take it (have stays at %d of %d)", shortSum(x.sha), x.have, x.size))
		}
	case face.CodeFaceHash:
		x.hashFails++
		x.have, x.stalls = 0, 0
		if x.hashFails >= maxFaceHash {
			o.faceFailTask(d, fmt.Sprintf("face %s: failed the terminal's hash check %d times (code %d)", shortSum(x.sha), x.hashFails, a.Code))
		}
	case face.CodeCapacity:
		o.faceFailTask(d, "capacity")
	default:
		o.faceFailTask(d, fmt.Sprintf("face %s: refused by the device: code %d: %s", shortSum(x.sha), a.Code, a.Message))
	}
}

// faceChunkFailed: a chunk got no ack after MaxTries: the command it was for fails.
func (o *Outbox) faceChunkFailed(q *query, reason string) {
	fs := o.facesOf(q.dev)
	o.faceFailTask(q.dev, fmt.Sprintf("face %s: %s (after %d tries)", shortSum(fs.xfer.sha), reason, q.tries))
}

// faceChunkRequeued: the device went offline with a chunk in flight. The chunk is dropped
// (it counts as never sent, as a requeued command does); the transfer goes on with a probe
// once the device is back, so a cut chunk costs its lost tail, not a resend.
func (o *Outbox) faceChunkRequeued(q *query) {
	delete(o.queries, q.id)
	q.payload = nil
	if fs := q.dev.live.faces; fs != nil && fs.xfer.sha != "" {
		fs.xfer.probe = true
	}
}

// faceFailTask fails the command the transfer was for, if it still waits in its device's
// queue, and forgets the transfer.
func (o *Outbox) faceFailTask(d *device, reason string) {
	fs := o.facesOf(d)
	it := fs.xfer.forItem
	fs.xfer = faceXfer{}
	if it != nil && it.status == Scheduled && it.dev == d && o.t.items.get(it.id()) == it { // a batch's task need not be the head
		o.finishItem(it, Failed, reason)
	}
}

// faceMissing handles a code 21 for it, in flight: the faces its persons carry are
// forgotten, and it goes back to the head of the queue without spending the try, to be
// sent again (under a new message id: the terminal answered its own) once its faces were
// sent. Otherwise it returns why it fails: after maxFaceMissing such rounds, or when it
// carries no face to send.
func (o *Outbox) faceMissing(d *device, it *item) (again bool, reason string) {
	fs := o.facesOf(d)
	fs.v2 = true
	payload := d.live.pay
	if d.live.payItem != it {
		p, err := o.t.payload(it)
		if err != nil {
			return false, ""
		}
		payload = p
	}
	var cmd face.Command
	if _, err := cmd.UnmarshalMsg(payload); err != nil {
		return false, ""
	}
	var buf [1]face.FaceRef
	needs := faceNeeds(&cmd, buf[:0])
	if len(needs) == 0 {
		return false, "" // no face to send: a refusal like any other
	}
	for _, ref := range needs {
		fs.forget(ref.SHA256)
	}
	if fs.missItem != it {
		fs.missItem, fs.missN = it, 0
	}
	fs.missN++
	if fs.missN > maxFaceMissing {
		fs.missItem, fs.missN, fs.alias = nil, 0, ""
		return false, fmt.Sprintf("face %s: still missing on the terminal after it was sent %d times (code %d)",
			shortSum(needs[0].SHA256), maxFaceMissing, face.CodeFaceMissing)
	}
	fs.alias = faceAliasID(it.id(), fs.missN)
	if it.status == InFlight {
		o.requeue(it)
	}
	return true, ""
}

// faceAliasID is the message id of a command's n-th send after a code 21: its own id
// with "~f<n>", or, when that would pass the protocol's bound, a digest of it.
func faceAliasID(id string, n int) string {
	suffix := "~f" + strconv.Itoa(n)
	if len(id)+len(suffix) <= face.MaxIDLen {
		return id + suffix
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16]) + suffix
}

// faceAlias returns the command d's ack with messageID answers when it is the alias of
// the command sent again after a 21, else nil.
func (o *Outbox) faceAlias(d *device, messageID string) *item {
	fs := d.live.faces
	if fs == nil || fs.alias == "" || fs.alias != messageID || fs.missItem == nil {
		return nil
	}
	if it := fs.missItem; o.t.items.get(it.id()) == it {
		return it
	}
	return nil
}

// wireID is the message id it is sent under: its own, or its alias after a code 21.
func (o *Outbox) wireID(d *device, it *item) string {
	if fs := d.live.faces; fs != nil && fs.missItem == it && fs.alias != "" {
		return fs.alias
	}
	return it.id()
}

func shortSum(sha string) string {
	if len(sha) > 16 {
		return sha[:16]
	}
	return sha
}

// faceAckItem is ack's lookup of the command an ack answers, with the face step's message
// ids: the alias of a command sent again after a code 21 answers that command, and once
// it has an alias a late ack of its own id (or an earlier alias) is stale: ignored.
func (o *Outbox) faceAckItem(d *device, it *item, messageID string) *item {
	if it == nil {
		return o.faceAlias(d, messageID)
	}
	if fs := d.live.faces; fs != nil && fs.missItem == it && fs.alias != "" {
		return nil
	}
	return it
}
