package agent

// The forward log's record format (forward.go has the forwarder that writes and replays it).

import (
	"errors"
	"fmt"
)

// Record kinds of the forward log, each: version 1, kind, uvarint id, then
//
//	ack        'A' uvarint len(device), device, payload (the ack's JSON as forwarded)
//	heartbeat  'H' uvarint len(device), device, payload (the heartbeat's JSON)
//	reported   'R'  every add with an id <= id was accepted upstream
//	seen       'S'  every id below this one was issued; written last in a snapshot, so an
//	                add repeated in the segment after the snapshot is recognised
const (
	fwdRecordVersion   = 1
	fwdRecordAck       = 'A'
	fwdRecordHeartbeat = 'H'
	fwdRecordReported  = 'R'
	fwdRecordSeen      = 'S'
)

// appendForwardRecord encodes one record onto dst. device and payload are empty for the
// reported and seen marks.
func appendForwardRecord(dst []byte, kind byte, id uint64, device string, payload []byte) []byte {
	dst = append(dst, fwdRecordVersion, kind)
	dst = appendUvarint(dst, id)
	if kind == fwdRecordAck || kind == fwdRecordHeartbeat {
		dst = appendUvarint(dst, uint64(len(device)))
		dst = append(dst, device...)
		dst = append(dst, payload...)
	}
	return dst
}

// parseForwardRecord decodes one record; device and payload alias rec.
func parseForwardRecord(rec []byte) (kind byte, id uint64, device, payload []byte, err error) {
	if len(rec) < 3 {
		return 0, 0, nil, nil, fmt.Errorf("forward record of %d bytes is too short", len(rec))
	}
	if rec[0] != fwdRecordVersion {
		return 0, 0, nil, nil, fmt.Errorf("forward record version %d is unknown", rec[0])
	}
	kind = rec[1]
	id, rest, ok := readUvarint(rec[2:])
	if !ok || id == 0 {
		return 0, 0, nil, nil, errors.New("forward record: bad id")
	}
	switch kind {
	case fwdRecordReported, fwdRecordSeen:
		if len(rest) != 0 {
			return 0, 0, nil, nil, fmt.Errorf("forward record: trailing bytes after a %q mark", kind)
		}
		return kind, id, nil, nil, nil
	case fwdRecordAck, fwdRecordHeartbeat:
	default:
		return 0, 0, nil, nil, fmt.Errorf("forward record kind %q is unknown", kind)
	}
	n, rest, ok := readUvarint(rest)
	if !ok || n == 0 || n > maxForwardDeviceID || n > uint64(len(rest)) {
		return 0, 0, nil, nil, errors.New("forward record: bad device id length")
	}
	device, payload = rest[:n], rest[n:]
	if !forwardDeviceOK(device) {
		return 0, 0, nil, nil, fmt.Errorf("forward record: device id %q is not a topic level", device)
	}
	if len(payload) == 0 {
		return 0, 0, nil, nil, errors.New("forward record: empty payload")
	}
	return kind, id, device, payload, nil
}

// forwardDeviceOK reports whether d can be a device id in the log: it becomes a topic
// level, so no separators, wildcards or NUL (MQTT 4.7), and it is bounded. add checks
// what parseForwardRecord checks: a record written is a record replay accepts.
func forwardDeviceOK[T string | []byte](d T) bool {
	if len(d) == 0 || len(d) > maxForwardDeviceID {
		return false
	}
	for i := range len(d) {
		if c := d[i]; c == '/' || c == '+' || c == '#' || c == 0 {
			return false
		}
	}
	return true
}
