package outbox

import (
	"unsafe"

	"github.com/tinylib/msgp/msgp"
)

// decodeRecord decodes p into r like the generated record.UnmarshalMsg, but without
// copying: r's strings, IDs and Payload alias p and are valid only while p is (table.apply
// copies what it keeps). Replay reads a million records; this way it allocates what the
// table keeps and little else. TestDecodeRecordMatchesGenerated and FuzzDecodeRecord hold
// it to the generated decoder.
func decodeRecord(p []byte, r *record) error {
	ids := r.IDs[:0]
	*r = record{}
	n, p, err := msgp.ReadMapHeaderBytes(p)
	if err != nil {
		return err
	}
	for ; n > 0; n-- {
		var key []byte
		if key, p, err = msgp.ReadMapKeyZC(p); err != nil {
			return err
		}
		switch string(key) {
		case "v":
			r.Version, p, err = msgp.ReadUint8Bytes(p)
		case "k":
			r.Kind, p, err = msgp.ReadUint8Bytes(p)
		case "id":
			r.ID, p, err = readStringAlias(p)
		case "ids":
			var cnt uint32
			if cnt, p, err = msgp.ReadArrayHeaderBytes(p); err != nil {
				return err
			}
			if int(cnt) > len(p) { // each element takes at least one byte
				return msgp.ErrShortBytes
			}
			for range cnt {
				var s string
				if s, p, err = readStringAlias(p); err != nil {
					return err
				}
				ids = append(ids, s)
			}
			r.IDs = ids
		case "t":
			r.Task, p, err = readStringAlias(p)
		case "d":
			r.Device, p, err = readStringAlias(p)
		case "op":
			r.Op, p, err = readStringAlias(p)
		case "p":
			r.Person, p, err = readStringAlias(p)
		case "b":
			r.Payload, p, err = msgp.ReadBytesZC(p)
		case "o":
			r.Ord, p, err = msgp.ReadUint64Bytes(p)
		case "at":
			r.At, p, err = msgp.ReadInt64Bytes(p)
		case "ad":
			r.Added, p, err = msgp.ReadInt64Bytes(p)
		case "ex":
			r.Expires, p, err = msgp.ReadInt64Bytes(p)
		case "nx":
			r.Next, p, err = msgp.ReadInt64Bytes(p)
		case "dn":
			r.Done, p, err = msgp.ReadInt64Bytes(p)
		case "n":
			r.Tries, p, err = msgp.ReadUint32Bytes(p)
		case "s":
			r.Status, p, err = msgp.ReadUint8Bytes(p)
		case "e":
			r.Err, p, err = readStringAlias(p)
		case "r":
			r.Reported, p, err = msgp.ReadBoolBytes(p)
		case "pa":
			r.Paused, p, err = msgp.ReadBoolBytes(p)
		case "od":
			r.Outdated, p, err = msgp.ReadBoolBytes(p)
		case "nr":
			r.NoResult, p, err = msgp.ReadBoolBytes(p)
		default:
			p, err = msgp.Skip(p) // a field from a later release
		}
		if err != nil {
			return err
		}
	}
	if r.IDs == nil {
		r.IDs = ids[:0] // keep the scratch space for the next record
	}
	return nil
}

func readStringAlias(p []byte) (string, []byte, error) {
	b, rest, err := msgp.ReadStringZC(p)
	if err != nil || len(b) == 0 {
		return "", rest, err
	}
	return unsafe.String(&b[0], len(b)), rest, nil
}
