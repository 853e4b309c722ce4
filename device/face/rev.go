package face

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
)

// Rev is the agent's revision of a person record (protocol v2): the first 8 bytes of
// SHA-256 over the record's canonical form, id "\n" name "\n" validFrom "\n" validTo "\n"
// the face's sha256 in hex ("" without a face). The same record always has the same Rev,
// so a back office can compute it too; a terminal stores it with the person and never
// computes it. On the wire it is 16 lower-case hex digits.
type Rev [8]byte

// RecordRev returns the Rev of a person record with the given fields.
func RecordRev(id, name, validFrom, validTo, faceSHA256 string) Rev {
	h := sha256.New()
	for i, f := range [...]string{id, name, validFrom, validTo, faceSHA256} {
		if i > 0 {
			h.Write([]byte{'\n'})
		}
		h.Write([]byte(f))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return Rev(sum[:8])
}

// PersonRecordRev returns the Rev of p's record: its id, name, validity bounds and face
// hash (the face's size and kind are not part of it).
func PersonRecordRev(p *Person) Rev {
	return RecordRev(p.ID, p.Name, p.ValidFrom, p.ValidTo, p.Face.SHA256)
}

// String is the wire form: 16 lower-case hex digits.
func (r Rev) String() string { return hex.EncodeToString(r[:]) }

// ErrBadRev is returned by ParseRev for anything but 16 lower-case hex digits.
var ErrBadRev = errors.New("face: rev must be 16 lower-case hex digits")

// ParseRev parses the wire form of a Rev.
func ParseRev(s string) (Rev, error) {
	var r Rev
	if len(s) != 2*len(r) {
		return r, ErrBadRev
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return r, ErrBadRev
		}
	}
	_, _ = hex.Decode(r[:], []byte(s))
	return r, nil
}

// Digest is the order-free summary of the persons a terminal holds (protocol v2): the XOR,
// over every person, of the first 8 bytes of SHA-256(id "\n" rev), where rev is the Rev's
// wire form. The zero Digest is the empty list's. Adding a person, removing it or changing
// its rev is one Toggle each (a change toggles the old rev out and the new one in), so
// both sides keep it up to date without rereading the list. On the wire it is 16
// lower-case hex digits ("0000000000000000": empty).
type Digest uint64

// Toggle adds the person id with rev to d, or takes it out if d holds it.
func (d *Digest) Toggle(id string, rev Rev) { *d ^= Digest(Member(id, rev)) }

// Member is what the person id with rev contributes to a Digest.
func Member(id string, rev Rev) uint64 {
	var buf [64]byte
	b := append(buf[:0], id...)
	b = append(b, '\n')
	b = hex.AppendEncode(b, rev[:])
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[:8])
}

// String is the wire form: 16 lower-case hex digits.
func (d Digest) String() string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(d))
	return hex.EncodeToString(b[:])
}

// ParseDigest parses the wire form of a Digest.
func ParseDigest(s string) (Digest, error) {
	r, err := ParseRev(s) // the same form: 16 lower-case hex digits
	if err != nil {
		return 0, errors.New("face: digest must be 16 lower-case hex digits")
	}
	return Digest(binary.BigEndian.Uint64(r[:])), nil
}
