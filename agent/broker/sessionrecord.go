package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// Records of the sessions journal.
//
// Each journal record is one group commit (or one live record of a snapshot):
//
//	version byte = 1
//	then, repeated to the end:
//	  op      byte     opPut or opDelete
//	  key     uvarint length, bytes
//	  value   uvarint length, bytes   (opPut only)
//
// A key is a kind byte (kindClient, kindSubscription, kindInflight, kindRetained), the
// client id as uvarint length and bytes, then the kind's own part: nothing for a client,
// the filter of a subscription, the packet id (2 bytes, big endian) of an in-flight
// message, the topic of a retained message (whose client part is empty). Client ids may
// hold any byte, so nothing is parsed out of a separator. A value is the mochi storage
// type's own encoding (storage.Client, storage.Subscription, storage.Message:
// MarshalBinary), with the packet id of an in-flight message in it.

const sessionRecordVersion = 1

const (
	opPut    byte = 1
	opDelete byte = 2
)

const (
	kindClient       byte = 'C'
	kindSubscription byte = 'S'
	kindInflight     byte = 'I'
	kindRetained     byte = 'R'
)

// errBadSessionRecord wraps every decoding failure.
var errBadSessionRecord = errors.New("broker: bad sessions journal record")

// sessionOp is one change of a record; value nil deletes it.
type sessionOp struct {
	key   string
	value []byte
}

// makeKey builds a record key of kind for client, with rest the kind's own part.
func makeKey(kind byte, client string, rest string) string {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(client)+len(rest))
	b = append(b, kind)
	b = binary.AppendUvarint(b, uint64(len(client)))
	b = append(b, client...)
	b = append(b, rest...)
	return string(b)
}

func clientKey(client string) string               { return makeKey(kindClient, client, "") }
func subscriptionKey(client, filter string) string { return makeKey(kindSubscription, client, filter) }
func retainedKey(topic string) string              { return makeKey(kindRetained, "", topic) }
func inflightKey(client string, id uint16) string {
	return makeKey(kindInflight, client, string([]byte{byte(id >> 8), byte(id)}))
}

// parseKey splits a key into its kind, client id and rest.
func parseKey(key string) (kind byte, client, rest string, err error) {
	if len(key) == 0 {
		return 0, "", "", fmt.Errorf("%w: empty key", errBadSessionRecord)
	}
	kind = key[0]
	n, w := binary.Uvarint([]byte(key[1:min(len(key), 1+binary.MaxVarintLen64)]))
	if w <= 0 || n > uint64(len(key)-1-w) {
		return 0, "", "", fmt.Errorf("%w: key client length", errBadSessionRecord)
	}
	client = key[1+w : 1+w+int(n)]
	rest = key[1+w+int(n):]
	switch kind {
	case kindClient:
		if rest != "" {
			return 0, "", "", fmt.Errorf("%w: client key with a suffix", errBadSessionRecord)
		}
	case kindSubscription:
	case kindInflight:
		if len(rest) != 2 || rest == "\x00\x00" {
			return 0, "", "", fmt.Errorf("%w: in-flight key without a packet id", errBadSessionRecord)
		}
	case kindRetained:
		if client != "" {
			return 0, "", "", fmt.Errorf("%w: retained key with a client", errBadSessionRecord)
		}
	default:
		return 0, "", "", fmt.Errorf("%w: unknown kind %q", errBadSessionRecord, kind)
	}
	return kind, client, rest, nil
}

// keyClient returns the client id in key ("" for a retained message or a bad key).
func keyClient(key string) string {
	_, client, _, err := parseKey(key)
	if err != nil {
		return ""
	}
	return client
}

// describeKey renders key for logs.
func describeKey(key string) string {
	kind, client, rest, err := parseKey(key)
	if err != nil {
		return strconv.Quote(key)
	}
	if kind == kindInflight {
		rest = strconv.Itoa(int(rest[0])<<8 | int(rest[1]))
	}
	return string(kind) + " " + strconv.Quote(client) + " " + strconv.Quote(rest)
}

// appendSessionOps appends ops as one record to dst.
func appendSessionOps(dst []byte, ops []sessionOp) []byte {
	dst = append(dst, sessionRecordVersion)
	for _, op := range ops {
		if op.value == nil {
			dst = append(dst, opDelete)
		} else {
			dst = append(dst, opPut)
		}
		dst = binary.AppendUvarint(dst, uint64(len(op.key)))
		dst = append(dst, op.key...)
		if op.value != nil {
			dst = binary.AppendUvarint(dst, uint64(len(op.value)))
			dst = append(dst, op.value...)
		}
	}
	return dst
}

// opSize is the encoded size of op, at most.
func opSize(op sessionOp) int {
	return 1 + 2*binary.MaxVarintLen64 + len(op.key) + len(op.value)
}

// decodeSessionOps calls fn for each op of rec, in order. Keys and values are copies
// (journal records are only valid during replay). A damaged record is an error wrapping
// errBadSessionRecord; fn sees only the ops before the damage.
func decodeSessionOps(rec []byte, fn func(sessionOp) error) error {
	if len(rec) == 0 || rec[0] != sessionRecordVersion {
		return fmt.Errorf("%w: unknown version", errBadSessionRecord)
	}
	p := rec[1:]
	field := func(what string) ([]byte, error) {
		n, w := binary.Uvarint(p)
		if w <= 0 || n > uint64(len(p)-w) {
			return nil, fmt.Errorf("%w: %s length", errBadSessionRecord, what)
		}
		f := p[w : w+int(n)]
		p = p[w+int(n):]
		return f, nil
	}
	for len(p) > 0 {
		op := p[0]
		p = p[1:]
		if op != opPut && op != opDelete {
			return fmt.Errorf("%w: unknown op %d", errBadSessionRecord, op)
		}
		key, err := field("key")
		if err != nil {
			return err
		}
		if _, _, _, err := parseKey(string(key)); err != nil {
			return err
		}
		o := sessionOp{key: string(key)}
		if op == opPut {
			v, err := field("value")
			if err != nil {
				return err
			}
			o.value = append(make([]byte, 0, len(v)), v...) // non-nil even when empty
		}
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}
