package whitelist

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// Record is one person's desired record on a terminal: what an AddPerson carries.
// ValidFrom and ValidTo are kept as text, byte for byte; Face is the person's face: its
// SHA-256 in 64 lower-case hex digits, its size in bytes and kind (zero without a face;
// size 0 and kind "" when not known).
type Record struct {
	ID        string
	Name      string
	ValidFrom string
	ValidTo   string
	Face      face.FaceRef
}

// Rev is the record's revision as protocol v2 defines it (face.RecordRev): the face's
// hash is part of it, its size and kind are not.
func (r Record) Rev() face.Rev {
	return face.RecordRev(r.ID, r.Name, r.ValidFrom, r.ValidTo, r.Face.SHA256)
}

// Person is the record as a terminal command carries it, with its rev.
func (r Record) Person() face.Person {
	return face.Person{ID: r.ID, Name: r.Name, ValidFrom: r.ValidFrom, ValidTo: r.ValidTo, Rev: r.Rev().String(), Face: r.Face}
}

// Bounds of a record's fields: a record the store accepts is one a terminal command can
// carry.
const (
	MaxIDLen   = face.MaxIDLen   // person id and device id, bytes
	MaxTextLen = face.MaxTextLen // name, validFrom, validTo, bytes
	faceLen    = 32              // a face's SHA-256, raw
	maxKindLen = 16              // a face's kind, bytes
)

// The forms of a record's face in its full form (the byte after validTo).
const (
	faceNone = 0 // no face
	faceHash = 1 // the SHA-256 alone (records written before sizes and kinds were kept)
	faceFull = 2 // the SHA-256, the size (uvarint) and the kind (string)
)

// ErrInvalid is wrapped by the errors of records and device ids the store refuses.
var ErrInvalid = errors.New("whitelist: invalid")

func checkRecord(r *Record) error {
	if err := checkID("person id", r.ID); err != nil {
		return err
	}
	for _, f := range [...]struct{ name, v string }{{"name", r.Name}, {"validFrom", r.ValidFrom}, {"validTo", r.ValidTo}} {
		if len(f.v) > MaxTextLen {
			return fmt.Errorf("%w: person %q: %s longer than %d bytes", ErrInvalid, r.ID, f.name, MaxTextLen)
		}
	}
	f := &r.Face
	switch {
	case f.IsZero():
	case !isFaceHex(f.SHA256):
		return fmt.Errorf("%w: person %q: face must be 64 lower-case hex digits", ErrInvalid, r.ID)
	case f.Size < 0 || f.Size > face.MaxFaceSize:
		return fmt.Errorf("%w: person %q: face size %d out of range (0..%d)", ErrInvalid, r.ID, f.Size, face.MaxFaceSize)
	case len(f.Kind) > maxKindLen:
		return fmt.Errorf("%w: person %q: face kind longer than %d bytes", ErrInvalid, r.ID, maxKindLen)
	}
	return nil
}

func checkID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: %s missing", ErrInvalid, what)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalid, what, MaxIDLen)
	}
	return nil
}

func isFaceHex(s string) bool {
	if len(s) != 2*faceLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// appendFields encodes a checked record in its full form (the record format's "fields"):
// id, name, validFrom, validTo as uvarint length and bytes, then the face: faceNone; or
// faceHash and its 32 raw bytes when neither size nor kind is known; or faceFull, the 32
// raw bytes, the size (uvarint) and the kind (string). A record without a size or kind
// keeps the bytes it had before they were kept. The same bytes are a record's form in
// memory.
func appendFields(dst []byte, r *Record) []byte {
	for _, f := range [...]string{r.ID, r.Name, r.ValidFrom, r.ValidTo} {
		dst = binary.AppendUvarint(dst, uint64(len(f)))
		dst = append(dst, f...)
	}
	f := &r.Face
	if f.IsZero() {
		return append(dst, faceNone)
	}
	form := byte(faceHash)
	if f.Size != 0 || f.Kind != "" {
		form = faceFull
	}
	dst = append(dst, form)
	dst, _ = hex.AppendDecode(dst, []byte(f.SHA256)) // checkRecord made sure it is hex
	if form == faceFull {
		dst = binary.AppendUvarint(dst, uint64(f.Size))
		dst = appendString(dst, string(f.Kind))
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// readString reads one uvarint-prefixed string of at most limit bytes from b at *off.
func readString[T string | []byte](b T, off *int, limit int) (T, bool) {
	var n uint64
	var shift uint
	i := *off
	for ; ; i++ {
		if i >= len(b) || shift > 63 {
			return b[:0], false
		}
		c := b[i]
		n |= uint64(c&0x7f) << shift
		if c < 0x80 {
			if c == 0 && i > *off { // not the shortest form: one record, one encoding
				return b[:0], false
			}
			i++
			break
		}
		shift += 7
	}
	if n > uint64(limit) || n > uint64(len(b)-i) {
		return b[:0], false
	}
	*off = i + int(n)
	return b[i : i+int(n)], true
}

// readUvarint reads one uvarint in its shortest form from b at *off.
func readUvarint[T string | []byte](b T, off *int) (uint64, bool) {
	var n uint64
	var shift uint
	for i := *off; i < len(b) && shift <= 63; i++ {
		c := b[i]
		n |= uint64(c&0x7f) << shift
		if c < 0x80 {
			if c == 0 && i > *off {
				return 0, false
			}
			*off = i + 1
			return n, true
		}
		shift += 7
	}
	return 0, false
}

// fieldsID returns the id of a record in full form; data is one the store encoded.
func fieldsID(data string) string {
	off := 0
	id, _ := readString(data, &off, MaxIDLen)
	return id
}

// parseFields decodes a record in full form from b at *off and checks it as the store
// checks what it accepts.
func parseFields[T string | []byte](b T, off *int) (Record, error) {
	var r Record
	var ok bool
	var f [4]T
	for i, limit := range [...]int{MaxIDLen, MaxTextLen, MaxTextLen, MaxTextLen} {
		if f[i], ok = readString(b, off, limit); !ok {
			return r, errors.New("bad field length")
		}
	}
	r = Record{ID: string(f[0]), Name: string(f[1]), ValidFrom: string(f[2]), ValidTo: string(f[3])}
	if *off >= len(b) {
		return r, errors.New("face flag missing")
	}
	form := b[*off]
	switch form {
	case faceNone:
		*off++
	case faceHash, faceFull:
		if len(b)-*off-1 < faceLen {
			return r, errors.New("face cut short")
		}
		r.Face.SHA256 = hex.EncodeToString([]byte(b[*off+1 : *off+1+faceLen]))
		*off += 1 + faceLen
		if form == faceHash {
			break
		}
		size, ok := readUvarint(b, off)
		if !ok || size > face.MaxFaceSize {
			return r, errors.New("bad face size")
		}
		kind, ok := readString(b, off, maxKindLen)
		if !ok {
			return r, errors.New("bad face kind")
		}
		if size == 0 && len(kind) == 0 { // written as faceHash: one record, one encoding
			return r, errors.New("face without size or kind in the full form")
		}
		r.Face.Size, r.Face.Kind = int(size), face.FaceKind(kind)
	default:
		return r, fmt.Errorf("face flag %d", form)
	}
	return r, checkRecord(&r)
}

// The journal's record kinds (see the package documentation, "Record format").
const (
	recordVersion = 1

	kindOps      = 'O' // one complete update of one terminal
	kindPart     = 'P' // part of an update, more parts follow
	kindLast     = 'L' // the last part of an update
	kindRecords  = 'r' // snapshot: records in full form, numbered in order
	kindTerminal = 't' // snapshot: one terminal's list
	kindSerial   = 'N' // a terminal's serial: device id, serial ("" forgets it)
	kindSerials  = 'n' // snapshot: (device id, serial) pairs

	flagWhole = 1 // the update replaces the terminal's whole list (Replace)
	flagTask  = 2 // a SetWhitelist task's fields follow the device id (ReplaceTask)

	kindSetEnd      = 'E' // a SetWhitelist task's result
	kindSetReported = 'A' // SetWhitelist results reported upstream
	kindSetSnap     = 's' // snapshot: a SetWhitelist task, pending or unreported
	kindSetWork     = 'g' // snapshot: the ids a pending task removed and set (protocol 1)
	kindSetRecent   = 'k' // snapshot: the ids of the last reported tasks

	opSet     = 'S' // set a person's record: fields follow
	opSetRef  = 'R' // set a person's record the store held already: its rev follows
	opDelete  = 'D' // id
	opExclude = 'X' // id, rev
	opInclude = 'I' // id, rev
	opForget  = 'F' // the terminal leaves the store; alone in its update
)

// rawOp is an update's operation as decoded, before the store resolves it.
type rawOp struct {
	kind byte
	rec  Record   // opSet
	id   string   // opDelete, opExclude, opInclude
	rev  face.Rev // opSetRef, opExclude, opInclude
}

// rawRecord is one journal record as decoded.
type rawRecord struct {
	kind  byte
	flags byte
	dev   string
	ops   []rawOp  // kindOps, kindPart, kindLast
	recs  []Record // kindRecords
	// kindTerminal
	digest  face.Digest
	members []uint64    // zigzag(delta of the snapshot index)<<1 | excluded
	task    *SetTask    // an update's first record with flagTask
	serial  string      // kindSerial
	serials [][2]string // kindSerials: (device id, serial)
}

func appendUpdateHeader(dst []byte, kind, flags byte, dev string) []byte {
	dst = append(dst, recordVersion, kind, flags)
	dst = binary.AppendUvarint(dst, uint64(len(dev)))
	return append(dst, dev...)
}

// parseRecord decodes one journal record. It never panics and checks every field as the
// store checks what it accepts, so a record the store wrote is one it replays.
func parseRecord(b []byte) (rawRecord, error) {
	var rr rawRecord
	if len(b) < 2 {
		return rr, fmt.Errorf("record of %d bytes is too short", len(b))
	}
	if b[0] != recordVersion {
		return rr, fmt.Errorf("record version %d is unknown", b[0])
	}
	rr.kind = b[1]
	off := 2
	switch rr.kind {
	case kindOps, kindPart, kindLast:
		return parseUpdate(b, off, rr)
	case kindRecords:
		for off < len(b) {
			r, err := parseFields(b, &off)
			if err != nil {
				return rr, fmt.Errorf("record %d of a snapshot: %w", len(rr.recs), err)
			}
			rr.recs = append(rr.recs, r)
		}
		if len(rr.recs) == 0 {
			return rr, errors.New("snapshot records: none")
		}
		return rr, nil
	case kindSerial:
		dev, ok := readString(b, &off, MaxIDLen)
		if !ok || len(dev) == 0 {
			return rr, errors.New("serial: bad device id")
		}
		serial, ok := readString(b, &off, MaxIDLen)
		if !ok || off != len(b) {
			return rr, fmt.Errorf("serial of %q: bad serial", dev)
		}
		rr.dev, rr.serial = string(dev), string(serial)
		return rr, nil
	case kindSerials:
		for off < len(b) {
			dev, ok := readString(b, &off, MaxIDLen)
			if !ok || len(dev) == 0 {
				return rr, errors.New("snapshot serials: bad device id")
			}
			serial, ok := readString(b, &off, MaxIDLen)
			if !ok || len(serial) == 0 {
				return rr, fmt.Errorf("snapshot serials: bad serial of %q", dev)
			}
			rr.serials = append(rr.serials, [2]string{string(dev), string(serial)})
		}
		if len(rr.serials) == 0 {
			return rr, errors.New("snapshot serials: none")
		}
		return rr, nil
	case kindTerminal:
		if off >= len(b) {
			return rr, errors.New("snapshot terminal: cut short")
		}
		rr.flags = b[off]
		off++
		dev, ok := readString(b, &off, MaxIDLen)
		if !ok || len(dev) == 0 {
			return rr, errors.New("snapshot terminal: bad device id")
		}
		rr.dev = string(dev)
		if len(b)-off < 8 {
			return rr, errors.New("snapshot terminal: digest cut short")
		}
		rr.digest = face.Digest(binary.LittleEndian.Uint64(b[off:]))
		off += 8
		n, k := binary.Uvarint(b[off:])
		if k <= 0 || n > uint64(len(b)-off-k) { // every member takes at least one byte
			return rr, errors.New("snapshot terminal: bad member count")
		}
		off += k
		rr.members = make([]uint64, 0, n)
		for range n {
			v, k := binary.Uvarint(b[off:])
			if k <= 0 {
				return rr, errors.New("snapshot terminal: bad member")
			}
			off += k
			rr.members = append(rr.members, v)
		}
		if off != len(b) {
			return rr, errors.New("snapshot terminal: trailing bytes")
		}
		return rr, nil
	case kindSetEnd, kindSetReported, kindSetSnap, kindSetWork, kindSetRecent:
		return rr, nil // decoded where they are applied (sets.go)
	}
	return rr, fmt.Errorf("record kind %q is unknown", rr.kind)
}

func parseUpdate(b []byte, off int, rr rawRecord) (rawRecord, error) {
	if off >= len(b) {
		return rr, errors.New("update: cut short")
	}
	rr.flags = b[off]
	off++
	if rr.flags&^(flagWhole|flagTask) != 0 {
		return rr, fmt.Errorf("update: unknown flags %#x", rr.flags)
	}
	dev, ok := readString(b, &off, MaxIDLen)
	if !ok || len(dev) == 0 {
		return rr, errors.New("update: bad device id")
	}
	rr.dev = string(dev)
	if rr.flags&flagTask != 0 {
		if rr.flags&flagWhole == 0 || rr.kind == kindLast {
			return rr, fmt.Errorf("update of %q: a task on an update that is not a whole list's first record", rr.dev)
		}
		r := &setReader{b: b, off: off}
		rr.task = r.task(rr.dev)
		if r.err != nil {
			return rr, fmt.Errorf("update of %q: task: %v", rr.dev, r.err)
		}
		off = r.off
	}
	readRev := func(r *face.Rev) bool {
		if len(b)-off < len(r) {
			return false
		}
		copy(r[:], b[off:])
		off += len(r)
		return true
	}
	for off < len(b) {
		o := rawOp{kind: b[off]}
		off++
		switch o.kind {
		case opSet:
			r, err := parseFields(b, &off)
			if err != nil {
				return rr, fmt.Errorf("update of %q: set: %w", rr.dev, err)
			}
			o.rec = r
		case opSetRef:
			if !readRev(&o.rev) {
				return rr, fmt.Errorf("update of %q: set by rev: cut short", rr.dev)
			}
		case opDelete, opExclude, opInclude:
			id, ok := readString(b, &off, MaxIDLen)
			if !ok || len(id) == 0 {
				return rr, fmt.Errorf("update of %q: op %q: bad person id", rr.dev, o.kind)
			}
			o.id = string(id)
			if o.kind != opDelete && !readRev(&o.rev) {
				return rr, fmt.Errorf("update of %q: op %q: rev cut short", rr.dev, o.kind)
			}
		case opForget:
			if len(rr.ops) > 0 || off != len(b) || rr.kind != kindOps {
				return rr, fmt.Errorf("update of %q: forget is not alone", rr.dev)
			}
		default:
			return rr, fmt.Errorf("update of %q: op %q is unknown", rr.dev, o.kind)
		}
		rr.ops = append(rr.ops, o)
	}
	// An update without operations makes its terminal known with what it holds (a
	// DeletePerson naming a terminal the store did not know).
	return rr, nil
}

// fieldsFace returns the SHA-256 of the face of a record in full form, raw, and whether
// it has one; data is one the store encoded.
func fieldsFace(data string) (sum [faceLen]byte, ok bool) {
	off := 0
	for i := 0; i < 4; i++ {
		if _, ok := readString(data, &off, len(data)); !ok {
			return sum, false
		}
	}
	if off >= len(data) || data[off] == faceNone || len(data)-off-1 < faceLen {
		return sum, false
	}
	copy(sum[:], data[off+1:])
	return sum, true
}
