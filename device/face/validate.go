package face

import (
	"crypto/sha256"
	"encoding/hex"
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
	// MaxBatch bounds the persons of one AddPersons (and the results of its ack), whatever
	// a terminal's heartbeat offers (Heartbeat.BatchSize).
	MaxBatch = 1000
	// MaxFaceSize bounds a face's size: a template is a few KB, a photo a few hundred;
	// the bound keeps a size field from making a terminal or the agent reserve more.
	MaxFaceSize = 4 << 20
	// MaxChunkSize bounds the data of one PutFace (decoded bytes): the most a terminal
	// buffers per command. Serial frames take less (ChunkLimitFor).
	MaxChunkSize = 64 << 10
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

func checkTime(msg, field, v string) error {
	if problem := timeProblem(v); problem != "" {
		return invalid(msg, field, problem)
	}
	return nil
}

// Validate checks c: a messageId and a known op; for AddPerson and DeletePerson a person
// id, RFC 3339 validity bounds, a rev in its wire form when present, field lengths, a face
// with a sha256 in its wire form, a size from 0 to MaxFaceSize and kind template, photo or
// none; for ListPersons an after within MaxIDLen and a limit from 0 to MaxListLimit; for
// PutFace a sha256, a size from 1 to MaxFaceSize, an offset from 0 to MaxFaceSize and at
// most MaxChunkSize bytes of data (a chunk past the size is valid: the terminal refuses it
// with CodeFaceHash); for AddPersons 1 to MaxBatch persons, each as AddPerson's.
func (c *Command) Validate() error {
	const m = "command"
	if err := checkID(m, "messageId", c.MessageID); err != nil {
		return err
	}
	switch c.Op {
	case AddPerson, DeletePerson:
	case PutFace, AddPersons:
		return c.validateCommandV2()
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
	if field, problem := personProblem(&c.Person); field != "" {
		return invalid(m, "person."+field, problem)
	}
	return nil
}

// validateCommandV2 checks what PutFace and AddPersons carry.
func (c *Command) validateCommandV2() error {
	const m = "command"
	if c.Op == PutFace {
		f := &c.Face
		if !isSHA256Hex(f.SHA256) {
			return invalid(m, "face.sha256", sha256Problem(f.SHA256))
		}
		switch {
		case f.Size <= 0:
			return invalid(m, "face.size", "not positive")
		case f.Size > MaxFaceSize:
			return invalid(m, "face.size", fmt.Sprintf("more than %d", MaxFaceSize))
		case f.Offset < 0:
			return invalid(m, "face.offset", "negative")
		case f.Offset > MaxFaceSize:
			return invalid(m, "face.offset", fmt.Sprintf("more than %d", MaxFaceSize))
		case len(f.Data) > MaxChunkSize:
			return invalid(m, "face.data", fmt.Sprintf("more than %d bytes", MaxChunkSize))
		}
		// A chunk running past the size is the terminal's to refuse (CodeFaceHash): it
		// must reach it to be answered.
		return nil
	}
	switch {
	case len(c.Persons) == 0:
		return invalid(m, "persons", "missing")
	case len(c.Persons) > MaxBatch:
		return invalid(m, "persons", fmt.Sprintf("more than %d", MaxBatch))
	}
	for i := range c.Persons {
		if field, problem := personProblem(&c.Persons[i]); field != "" {
			return invalid(m, fmt.Sprintf("persons[%d].%s", i, field), problem)
		}
	}
	return nil
}

// personProblem says which field of p (its JSON name inside the person) is wrong and
// why, or "" for a valid person: an id, RFC 3339 validity bounds, a rev in its wire form
// when present, field lengths, and a face, when present, with its sha256 in hex, a size
// from 0 to MaxFaceSize and a known kind or none. It formats nothing for a valid person.
func personProblem(p *Person) (field, problem string) {
	switch {
	case p.ID == "":
		return "id", "missing"
	case len(p.ID) > MaxIDLen:
		return "id", fmt.Sprintf("longer than %d bytes", MaxIDLen)
	case len(p.Name) > MaxTextLen:
		return "name", fmt.Sprintf("longer than %d bytes", MaxTextLen)
	}
	if problem := timeProblem(p.ValidFrom); problem != "" {
		return "validFrom", problem
	}
	if problem := timeProblem(p.ValidTo); problem != "" {
		return "validTo", problem
	}
	if p.Rev != "" {
		if _, err := ParseRev(p.Rev); err != nil {
			return "rev", fmt.Sprintf("%.32q is not 16 lower-case hex digits", p.Rev)
		}
	}
	if p.Face.IsZero() {
		return "", ""
	}
	switch f := &p.Face; {
	case !isSHA256Hex(f.SHA256):
		return "face.sha256", sha256Problem(f.SHA256)
	case f.Size < 0:
		return "face.size", "negative"
	case f.Size > MaxFaceSize:
		return "face.size", fmt.Sprintf("more than %d", MaxFaceSize)
	case f.Kind != "" && f.Kind != FaceTemplate && f.Kind != FacePhoto:
		return "face.kind", fmt.Sprintf("%.32q is not %q or %q", string(f.Kind), FaceTemplate, FacePhoto)
	}
	return "", ""
}

// timeProblem is checkTime's verdict without the error around it.
func timeProblem(v string) string {
	if v == "" {
		return ""
	}
	if len(v) > MaxTextLen {
		return fmt.Sprintf("longer than %d bytes", MaxTextLen)
	}
	if _, err := time.Parse(time.RFC3339, v); err != nil {
		return fmt.Sprintf("%q is not RFC 3339", v)
	}
	return ""
}

// isSHA256Hex reports whether s is a SHA-256 in its wire form: 64 lower-case hex digits.
func isSHA256Hex(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func sha256Problem(s string) string {
	if s == "" {
		return "missing"
	}
	return fmt.Sprintf("%.70q is not 64 lower-case hex digits", s)
}

// FaceSHA256 returns the SHA-256 of a face's bytes in its wire form (FaceRef.SHA256,
// FaceChunk.SHA256).
func FaceSHA256(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
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
// wire form, and a next that is "" or the page's last id; a have from 0 to MaxFaceSize;
// at most MaxBatch results, each with an id within MaxIDLen.
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
	if a.Have < 0 {
		return invalid(m, "have", "negative")
	}
	if a.Have > MaxFaceSize {
		return invalid(m, "have", fmt.Sprintf("more than %d", MaxFaceSize))
	}
	if len(a.Results) > MaxBatch {
		return invalid(m, "results", fmt.Sprintf("more than %d", MaxBatch))
	}
	for i := range a.Results {
		if id := a.Results[i].ID; id == "" || len(id) > MaxIDLen {
			problem := "missing"
			if id != "" {
				problem = fmt.Sprintf("longer than %d bytes", MaxIDLen)
			}
			return invalid(m, fmt.Sprintf("results[%d].id", i), problem)
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
