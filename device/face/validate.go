package face

import (
	"errors"
	"fmt"
	"time"
)

// Bounds on text fields. They keep a command inside one serial frame and stop a
// misbehaving terminal from making the agent hold megabytes per message.
const (
	MaxIDLen   = 128 // messageId, person id, device id, serial, ListPersons' after and next
	MaxTextLen = 512 // name, message, firmware, time texts
	// MaxListLimit bounds a ListPersons page (the command's limit and the persons of its
	// ack): a page is one message the agent holds at once.
	MaxListLimit = 1000
	// DefaultListLimit is the page size of a ListPersons whose limit is absent or 0.
	DefaultListLimit = 100
)

// ErrMalformed is wrapped by every decode error whose input is not a well-formed message of
// the expected kind (not JSON, not msgp, wrong types, trailing bytes).
var ErrMalformed = errors.New("malformed")

// ErrInvalid is wrapped by every error for a message that decoded but breaks the protocol
// (missing messageId, unknown op, bad time, bad rev or digest, over a bound).
var ErrInvalid = errors.New("invalid")

// ErrUnknownOp is wrapped, with ErrInvalid, by the error for a command whose op is not one
// of this package's. The command's parsers then return what they decoded along with the
// error, so that a terminal can refuse it with an ack carrying its messageId.
var ErrUnknownOp = errors.New("unknown op")

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

// checkRev accepts an empty rev (v1, or a v2 field left out) or RecordRev's wire form.
func checkRev(msg, field, v string) error {
	if v == "" {
		return nil
	}
	if _, err := ParseRev(v); err != nil {
		return invalid(msg, field, fmt.Sprintf("%.32q is not 16 lower-case hex digits", v))
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

// Validate checks c: a messageId and a known op; for AddPerson and DeletePerson a person
// id, RFC 3339 validity bounds, a rev in its wire form when present, field lengths; for
// ListPersons an after within MaxIDLen and a limit from 0 to MaxListLimit.
func (c *Command) Validate() error {
	const m = "command"
	if err := checkID(m, "messageId", c.MessageID); err != nil {
		return err
	}
	switch c.Op {
	case AddPerson, DeletePerson:
	case ListPersons:
		if len(c.After) > MaxIDLen {
			return invalid(m, "after", fmt.Sprintf("longer than %d bytes", MaxIDLen))
		}
		if c.Limit < 0 {
			return invalid(m, "limit", "negative")
		}
		if c.Limit > MaxListLimit {
			return invalid(m, "limit", fmt.Sprintf("more than %d", MaxListLimit))
		}
		return nil
	case "":
		return invalid(m, "op", "missing")
	default:
		return &Error{Message: m, Field: "op", Problem: fmt.Sprintf("unknown op %.64q", string(c.Op)),
			Err: errors.Join(ErrInvalid, ErrUnknownOp)}
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
	if err := checkTime(m, "person.validTo", c.Person.ValidTo); err != nil {
		return err
	}
	return checkRev(m, "person.rev", c.Person.Rev)
}

// PageSize is the number of persons a ListPersons asks for: Limit, or DefaultListLimit
// when Limit is 0.
func (c *Command) PageSize() int {
	if c.Limit == 0 {
		return DefaultListLimit
	}
	return c.Limit
}

// Validate checks a: a messageId, a bounded message and, for a ListPersons page, at most
// MaxListLimit persons with ids in strictly increasing bytewise order and revs in their
// wire form, and a next that is "" or the page's last id.
func (a *Ack) Validate() error {
	const m = "ack"
	if err := checkID(m, "messageId", a.MessageID); err != nil {
		return err
	}
	if err := checkText(m, "message", a.Message); err != nil {
		return err
	}
	if len(a.Persons) > MaxListLimit {
		return invalid(m, "persons", fmt.Sprintf("more than %d", MaxListLimit))
	}
	for i := range a.Persons {
		p := &a.Persons[i]
		if p.ID == "" || len(p.ID) > MaxIDLen || p.Rev == "" || i > 0 && p.ID <= a.Persons[i-1].ID {
			return a.personError(i)
		}
		if _, err := ParseRev(p.Rev); err != nil {
			return invalid(m, fmt.Sprintf("persons[%d].rev", i), fmt.Sprintf("%.32q is not 16 lower-case hex digits", p.Rev))
		}
	}
	if a.Next != "" {
		if len(a.Next) > MaxIDLen {
			return invalid(m, "next", fmt.Sprintf("longer than %d bytes", MaxIDLen))
		}
		if len(a.Persons) == 0 || a.Next != a.Persons[len(a.Persons)-1].ID {
			return invalid(m, "next", "not the last id of the page")
		}
	}
	return nil
}

// personError says what is wrong with the id or rev of a.Persons[i]; kept out of
// Validate's loop so that a valid page formats nothing.
func (a *Ack) personError(i int) error {
	const m = "ack"
	p := &a.Persons[i]
	field := fmt.Sprintf("persons[%d].id", i)
	switch {
	case p.ID == "":
		return invalid(m, field, "missing")
	case len(p.ID) > MaxIDLen:
		return invalid(m, field, fmt.Sprintf("longer than %d bytes", MaxIDLen))
	case p.Rev == "":
		return invalid(m, fmt.Sprintf("persons[%d].rev", i), "missing")
	}
	return invalid(m, field, fmt.Sprintf("%.64q does not sort after %.64q", p.ID, a.Persons[i-1].ID))
}

// Validate checks h. DeviceID may be empty (the transport knows the terminal); Time, when
// present, is RFC 3339; Persons is not negative. Protocol v2's fields: Protocol, Capacity
// and Batch not negative, Serial within MaxIDLen, Digest in its wire form and present when
// Protocol is 2 or more.
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
	if h.Protocol < 0 {
		return invalid(m, "protocol", "negative")
	}
	if len(h.Serial) > MaxIDLen {
		return invalid(m, "serial", fmt.Sprintf("longer than %d bytes", MaxIDLen))
	}
	if h.Digest == "" && h.Protocol >= 2 {
		return invalid(m, "digest", "missing")
	}
	if h.Digest != "" {
		if _, err := ParseDigest(h.Digest); err != nil {
			return invalid(m, "digest", fmt.Sprintf("%.32q is not 16 lower-case hex digits", h.Digest))
		}
	}
	if h.Capacity < 0 {
		return invalid(m, "capacity", "negative")
	}
	if h.Batch < 0 {
		return invalid(m, "batch", "negative")
	}
	return nil
}
