package backlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/seed0e69bba5/faceagent/agent/journal"
)

// Record kinds the backlog writes for itself; every other kind is an entry's (Kind.Code).
const (
	recordVersion = 1
	// KindReported marks every add with an id <= the record's id as accepted upstream.
	kindReported = 'R'
	// kindSeen says every id below the record's was issued: written last in a snapshot,
	// so that an add repeated in the segment after the snapshot is recognised.
	kindSeen = 'S'
)

// MaxKeyLen bounds a key in a record.
const MaxKeyLen = 256

// RecordOverhead is what a record adds to its entry's key and payload in the journal's
// files, at most: the journal's frame and the record's header (version, kind, uvarint
// id, key length).
const RecordOverhead = journal.FrameOverhead + 2 + binary.MaxVarintLen64 + 2

// appendRecord encodes one record onto dst. key and payload are empty for the reported
// and seen marks; key is written only when keyed.
func appendRecord(dst []byte, keyed bool, kind byte, id uint64, key string, payload []byte) []byte {
	dst = append(dst, recordVersion, kind)
	dst = binary.AppendUvarint(dst, id)
	if kind == kindReported || kind == kindSeen {
		return dst
	}
	if keyed {
		dst = binary.AppendUvarint(dst, uint64(len(key)))
		dst = append(dst, key...)
	}
	return append(dst, payload...)
}

// parseRecord decodes one record; key and payload alias rec. isKind says which add kinds
// the log may hold.
func parseRecord(rec []byte, keyed bool, isKind func(byte) bool) (kind byte, id uint64, key, payload []byte, err error) {
	if len(rec) < 3 {
		return 0, 0, nil, nil, fmt.Errorf("record of %d bytes is too short", len(rec))
	}
	if rec[0] != recordVersion {
		return 0, 0, nil, nil, fmt.Errorf("record version %d is unknown", rec[0])
	}
	kind = rec[1]
	id, n := binary.Uvarint(rec[2:])
	if n <= 0 || id == 0 {
		return 0, 0, nil, nil, errors.New("record: bad id")
	}
	rest := rec[2+n:]
	switch {
	case kind == kindReported || kind == kindSeen:
		if len(rest) != 0 {
			return 0, 0, nil, nil, fmt.Errorf("record: trailing bytes after a %q mark", kind)
		}
		return kind, id, nil, nil, nil
	case !isKind(kind):
		return 0, 0, nil, nil, fmt.Errorf("record kind %q is unknown", kind)
	}
	if keyed {
		k, n := binary.Uvarint(rest)
		if n <= 0 || k == 0 || k > MaxKeyLen || k > uint64(len(rest)-n) {
			return 0, 0, nil, nil, errors.New("record: bad key length")
		}
		key, rest = rest[n:n+int(k)], rest[n+int(k):]
		if !KeyOK(key) {
			return 0, 0, nil, nil, fmt.Errorf("record: key %q is not a topic level", key)
		}
	}
	if len(rest) == 0 {
		return 0, 0, nil, nil, errors.New("record: empty payload")
	}
	return kind, id, key, rest, nil
}

// KeyOK reports whether k can be an entry's key: 1..MaxKeyLen bytes with no '/', '+',
// '#' or NUL, so that it can be an MQTT topic level (MQTT 4.7). Add checks what replay
// checks: a record written is a record replay accepts.
func KeyOK[T string | []byte](k T) bool {
	if len(k) == 0 || len(k) > MaxKeyLen {
		return false
	}
	for i := range len(k) {
		if c := k[i]; c == '/' || c == '+' || c == '#' || c == 0 {
			return false
		}
	}
	return true
}

// Marks of ParseRecord: the backlog's own record kinds.
const (
	KindReported = kindReported
	KindSeen     = kindSeen
)

// ParseRecord decodes one record of a backlog's journal, for tools and tests that read
// it directly: an entry's (any kind but the marks; key only if keyed) or a mark
// (KindReported, KindSeen). key and payload alias rec.
func ParseRecord(rec []byte, keyed bool) (kind byte, id uint64, key, payload []byte, err error) {
	return parseRecord(rec, keyed, func(byte) bool { return true })
}
