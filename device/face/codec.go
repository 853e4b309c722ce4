package face

import (
	"encoding/json"
	"errors"
)

// JSON is protocol v1 on MQTT (jsonplain.go writes and reads it without reflection,
// encoding/json reads what it leaves); msgp (the generated MarshalMsg/UnmarshalMsg) is
// protocol v1 inside serial frames. Both decoders validate, so a caller gets either a
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
// alias b.
func ParseCommandJSON(b []byte) (Command, error) {
	c, ok := parsePlainCommand(b)
	if !ok {
		var err error
		if c, err = decodeCommandJSON(b); err != nil {
			return Command{}, err
		}
	}
	if err := c.Validate(); err != nil {
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
		MessageID string `json:"messageId"`
		Code      *int   `json:"code"`
		Message   string `json:"message"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Ack{}, false, malformed("ack", err)
	}
	a = Ack{MessageID: raw.MessageID, Message: raw.Message}
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

// ParseCommandMsg decodes and validates one msgp command; b must hold exactly one.
func ParseCommandMsg(b []byte) (Command, error) {
	var c Command
	rest, err := c.UnmarshalMsg(b)
	if err != nil {
		return Command{}, malformed("command", err)
	}
	if len(rest) != 0 {
		return Command{}, malformed("command", errTrailing)
	}
	if err := c.Validate(); err != nil {
		return Command{}, err
	}
	return c, nil
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
