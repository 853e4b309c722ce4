package face

import (
	"errors"
	"fmt"
	"time"
)

// Bounds on text fields. They keep a command inside one serial frame and stop a
// misbehaving terminal from making the agent hold megabytes per message.
const (
	MaxIDLen   = 128 // messageId, person id, device id
	MaxTextLen = 512 // name, message, firmware, time texts
)

// ErrMalformed is wrapped by every decode error whose input is not a well-formed message of
// the expected kind (not JSON, not msgp, wrong types, trailing bytes).
var ErrMalformed = errors.New("malformed")

// ErrInvalid is wrapped by every error for a message that decoded but breaks protocol v1
// (missing messageId, unknown op, bad time, over a bound).
var ErrInvalid = errors.New("invalid")

// Error says which message and which field was wrong and why. It wraps ErrMalformed or
// ErrInvalid, and the decoder's own error when there is one.
type Error struct {
	Message string // "command", "ack" or "heartbeat"
	Field   string // JSON name of the field; empty when the whole message is at fault
	Problem string // what is wrong, for people
	Err     error  // ErrMalformed or ErrInvalid, possibly joined with the decoder's error
}

func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("face: %s: %s", e.Message, e.Problem)
	}
	return fmt.Sprintf("face: %s: %s: %s", e.Message, e.Field, e.Problem)
}

func (e *Error) Unwrap() error { return e.Err }

func invalid(msg, field, problem string) error {
	return &Error{Message: msg, Field: field, Problem: problem, Err: ErrInvalid}
}

func malformed(msg string, cause error) error {
	return &Error{Message: msg, Problem: cause.Error(), Err: errors.Join(ErrMalformed, cause)}
}

func checkID(msg, field, v string) error {
	if v == "" {
		return invalid(msg, field, "missing")
	}
	if len(v) > MaxIDLen {
		return invalid(msg, field, fmt.Sprintf("longer than %d bytes", MaxIDLen))
	}
	return nil
}

func checkText(msg, field, v string) error {
	if len(v) > MaxTextLen {
		return invalid(msg, field, fmt.Sprintf("longer than %d bytes", MaxTextLen))
	}
	return nil
}

func checkTime(msg, field, v string) error {
	if v == "" {
		return nil
	}
	if err := checkText(msg, field, v); err != nil {
		return err
	}
	if _, err := time.Parse(time.RFC3339, v); err != nil {
		return invalid(msg, field, fmt.Sprintf("%q is not RFC 3339", v))
	}
	return nil
}

// Validate checks c against protocol v1: a messageId, a known op, a person id, RFC 3339
// validity bounds, field lengths.
func (c *Command) Validate() error {
	const m = "command"
	if err := checkID(m, "messageId", c.MessageID); err != nil {
		return err
	}
	switch c.Op {
	case AddPerson, DeletePerson:
	case "":
		return invalid(m, "op", "missing")
	default:
		return invalid(m, "op", fmt.Sprintf("unknown op %.64q", string(c.Op)))
	}
	if err := checkID(m, "person.id", c.Person.ID); err != nil {
		return err
	}
	if err := checkText(m, "person.name", c.Person.Name); err != nil {
		return err
	}
	if err := checkTime(m, "person.validFrom", c.Person.ValidFrom); err != nil {
		return err
	}
	return checkTime(m, "person.validTo", c.Person.ValidTo)
}

// Validate checks a against protocol v1: a messageId and a bounded message.
func (a *Ack) Validate() error {
	if err := checkID("ack", "messageId", a.MessageID); err != nil {
		return err
	}
	return checkText("ack", "message", a.Message)
}

// Validate checks h against protocol v1. DeviceID may be empty (the transport knows the
// terminal); Time, when present, is RFC 3339; Persons is not negative.
func (h *Heartbeat) Validate() error {
	const m = "heartbeat"
	if len(h.DeviceID) > MaxIDLen {
		return invalid(m, "deviceId", fmt.Sprintf("longer than %d bytes", MaxIDLen))
	}
	if err := checkTime(m, "time", h.Time); err != nil {
		return err
	}
	if err := checkText(m, "firmware", h.Firmware); err != nil {
		return err
	}
	if h.Persons < 0 {
		return invalid(m, "persons", "negative")
	}
	return nil
}
