package face

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math"
)

// JSON is the protocol on MQTT (jsonplain.go writes and reads it without reflection,
// encoding/json reads what it leaves); msgp (the generated MarshalMsg/UnmarshalMsg) is
// the protocol inside serial frames. Both decoders validate, so a caller gets either a
// usable message or an *Error naming the problem.

// AppendJSON appends c as JSON to dst after validating it: json.Marshal's bytes, written
// without reflection.
func (c *Command) AppendJSON(dst []byte) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return dst, err
	}
	return appendCommandJSON(dst, c), nil
}

// AppendJSON appends a as JSON to dst after validating it: json.Marshal's bytes, written
// without reflection.
func (a *Ack) AppendJSON(dst []byte) ([]byte, error) {
	if err := a.Validate(); err != nil {
		return dst, err
	}
	return appendAckJSON(dst, a), nil
}

// AppendJSON appends h as JSON to dst after validating it: json.Marshal's bytes, written
// without reflection.
func (h *Heartbeat) AppendJSON(dst []byte) ([]byte, error) {
	if err := h.Validate(); err != nil {
		return dst, err
	}
	return appendHeartbeatJSON(dst, h), nil
}

// ParseCommandJSON decodes and validates one JSON command. The returned strings do not
// alias b. A command whose op is unknown (ErrUnknownOp) is returned with the error, as
// decoded, so that a terminal can refuse it by its messageId; on any other error the
// Command is zero.
func ParseCommandJSON(b []byte) (Command, error) {
	c, ok := parsePlainCommand(b)
	if !ok {
		var err error
		if c, err = decodeCommandJSON(b); err != nil {
			return Command{}, err
		}
	}
	return validCommand(c)
}

// validCommand returns c if it is valid, c with the error if only its op is unknown, and
// the zero Command with the error otherwise.
func validCommand(c Command) (Command, error) {
	if err := c.Validate(); err != nil {
		if errors.Is(err, ErrUnknownOp) {
			return c, err
		}
		return Command{}, err
	}
	return c, nil
}

// ParseAckJSON decodes and validates one JSON ack. The code is required: an ack without
// one is not read as success (firmware that answers in another shape must not look like
// it accepted every command). The returned strings do not alias b.
func ParseAckJSON(b []byte) (Ack, error) {
	a, hasCode, ok := parsePlainAck(b)
	if !ok {
		var err error
		if a, hasCode, err = decodeAckJSON(b); err != nil {
			return Ack{}, err
		}
	}
	if err := a.Validate(); err != nil {
		return Ack{}, err
	}
	if !hasCode {
		return Ack{}, invalid("ack", "code", "missing")
	}
	return a, nil
}

// ParseHeartbeatJSON decodes and validates one JSON heartbeat. The returned strings do
// not alias b.
func ParseHeartbeatJSON(b []byte) (Heartbeat, error) {
	h, ok := parsePlainHeartbeat(b)
	if !ok {
		var err error
		if h, err = decodeHeartbeatJSON(b); err != nil {
			return Heartbeat{}, err
		}
	}
	if err := h.Validate(); err != nil {
		return Heartbeat{}, err
	}
	return h, nil
}

// decodeCommandJSON, decodeAckJSON and decodeHeartbeatJSON decode with encoding/json what
// the plain parsers leave (escapes, other spellings of keys, unknown fields, null, numbers
// in other forms, malformed input); their errors are encoding/json's, wrapped.

func decodeCommandJSON(b []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return Command{}, malformed("command", err)
	}
	return c, nil
}

func decodeAckJSON(b []byte) (a Ack, hasCode bool, err error) {
	var raw struct {
		MessageID string      `json:"messageId"`
		Code      *int        `json:"code"`
		Message   string      `json:"message"`
		Persons   []PersonRev `json:"persons"`
		Next      string      `json:"next"`
		Have      int         `json:"have"`
		Results   []Result    `json:"results"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Ack{}, false, malformed("ack", err)
	}
	a = Ack{MessageID: raw.MessageID, Message: raw.Message, Persons: raw.Persons, Next: raw.Next,
		Have: raw.Have, Results: raw.Results}
	if raw.Code != nil {
		a.Code = *raw.Code
	}
	return a, raw.Code != nil, nil
}

func decodeHeartbeatJSON(b []byte) (Heartbeat, error) {
	var h Heartbeat
	if err := json.Unmarshal(b, &h); err != nil {
		return Heartbeat{}, malformed("heartbeat", err)
	}
	return h, nil
}

var errTrailing = errors.New("trailing bytes after the message")

// ParseCommandMsg decodes and validates one msgp command; b must hold exactly one. As
// with ParseCommandJSON, a command with an unknown op comes back with the error.
func ParseCommandMsg(b []byte) (Command, error) {
	var c Command
	rest, err := c.UnmarshalMsg(b)
	if err != nil {
		return Command{}, malformed("command", err)
	}
	if len(rest) != 0 {
		return Command{}, malformed("command", errTrailing)
	}
	return validCommand(c)
}

// ParseAckMsg decodes and validates one msgp ack; b must hold exactly one.
func ParseAckMsg(b []byte) (Ack, error) {
	var a Ack
	rest, err := a.UnmarshalMsg(b)
	if err != nil {
		return Ack{}, malformed("ack", err)
	}
	if len(rest) != 0 {
		return Ack{}, malformed("ack", errTrailing)
	}
	if err := a.Validate(); err != nil {
		return Ack{}, err
	}
	return a, nil
}

// ParseHeartbeatMsg decodes and validates one msgp heartbeat; b must hold exactly one.
func ParseHeartbeatMsg(b []byte) (Heartbeat, error) {
	var h Heartbeat
	rest, err := h.UnmarshalMsg(b)
	if err != nil {
		return Heartbeat{}, malformed("heartbeat", err)
	}
	if len(rest) != 0 {
		return Heartbeat{}, malformed("heartbeat", errTrailing)
	}
	if err := h.Validate(); err != nil {
		return Heartbeat{}, err
	}
	return h, nil
}

// AppendMsg validates c and appends its msgp encoding to dst.
func (c *Command) AppendMsg(dst []byte) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return dst, err
	}
	return c.MarshalMsg(dst)
}

// AppendMsg validates a and appends its msgp encoding to dst.
func (a *Ack) AppendMsg(dst []byte) ([]byte, error) {
	if err := a.Validate(); err != nil {
		return dst, err
	}
	return a.MarshalMsg(dst)
}

// AppendMsg validates h and appends its msgp encoding to dst.
func (h *Heartbeat) AppendMsg(dst []byte) ([]byte, error) {
	if err := h.Validate(); err != nil {
		return dst, err
	}
	return h.MarshalMsg(dst)
}

// Worst-case msgp sizes of a ListPersons ack, for ListLimitFor: a map of five fields with
// messageId and next at MaxIDLen (str8), code an int64, message at MaxTextLen (str16), the
// persons' array header (array16), and per person a map of id at MaxIDLen and rev.
const (
	listAckFixedMsgSize = 1 + (1 + 9) + (2 + MaxIDLen) + (1 + 4) + 9 + (1 + 7) + (3 + MaxTextLen) +
		(1 + 7) + 3 + (1 + 4) + (2 + MaxIDLen)
	listEntryMsgSize = 1 + (1 + 2) + (2 + MaxIDLen) + (1 + 3) + (1 + 16)
)

// ListLimitFor returns the largest ListPersons limit whose ack, in msgp, fits in maxBytes
// whatever the terminal's ids and message (every one at its bound): the limit to ask of a
// terminal on a serial line whose frames carry at most maxBytes. It is at least 1 and at
// most MaxListLimit.
func ListLimitFor(maxBytes int) int {
	return min(max((maxBytes-listAckFixedMsgSize)/listEntryMsgSize, 1), MaxListLimit)
}

// putFaceFixedMsgSize is the worst-case msgp size of a PutFace without its data's bin
// header and bytes: a map of three fields (messageId at MaxIDLen, op, face) and the face's
// map of four (sha256, size and offset up to MaxFaceSize, each an int32, the "data" key).
const putFaceFixedMsgSize = 1 + (1 + 9) + (2 + MaxIDLen) + (1 + 2) + (1 + 7) + (1 + 4) +
	1 + (1 + 6) + (2 + 2*sha256.Size) + (1 + 4) + 5 + (1 + 6) + 5 + (1 + 4)

// ChunkLimitFor returns the largest PutFace chunk (data bytes) whose command, in msgp,
// fits in maxBytes whatever its messageId (every field at its bound): the chunk size to
// use on a serial line whose frames carry at most maxBytes. It is at most MaxChunkSize,
// and 0 when not even an empty chunk fits.
func ChunkLimitFor(maxBytes int) int {
	room := maxBytes - putFaceFixedMsgSize
	n := 0
	switch { // the data's bin header: 2 bytes up to 255, 3 up to 65535, 5 beyond
	case room-5 > math.MaxUint16:
		n = room - 5
	case room-3 > math.MaxUint8:
		n = min(room-3, math.MaxUint16)
	case room-2 >= 0:
		n = min(room-2, math.MaxUint8)
	}
	return min(n, MaxChunkSize)
}
