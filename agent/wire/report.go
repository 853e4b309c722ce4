package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxDeadLetterPayload bounds the payload copied into a deadletter message when the
// refused bytes are not JSON (or are a whole oversized message): the reason says what was
// wrong, the first bytes say which message it was.
const MaxDeadLetterPayload = 4 << 10

// Reject is a refused task or message, published on faceagent/{gw}/deadletter as
//
//	{"reason":"…","payload":<the task as received, or a string when it was not JSON>}
type Reject struct {
	Reason string
	// Payload is valid JSON: the task as received, or a JSON string holding the (possibly
	// cut) bytes that were not JSON.
	Payload json.RawMessage
}

// NewReject builds a Reject for payload, which is kept as JSON when it is JSON and small
// enough, and as a string otherwise.
func NewReject(reason string, payload []byte) Reject {
	if len(payload) <= MaxDeadLetterPayload && json.Valid(payload) {
		return Reject{Reason: reason, Payload: append(json.RawMessage(nil), payload...)}
	}
	cut := payload
	suffix := ""
	if len(cut) > MaxDeadLetterPayload {
		cut = cut[:MaxDeadLetterPayload]
		// Drop a rune cut in half rather than show it as U+FFFD.
		for i := 0; i < utf8.UTFMax-1 && len(cut) > 0 && !utf8.FullRune(cut[lastRuneStart(cut):]); i++ {
			cut = cut[:len(cut)-1]
		}
		suffix = fmt.Sprintf("… (%d bytes in all)", len(payload))
	}
	s, _ := json.Marshal(string(cut) + suffix) // invalid UTF-8 becomes U+FFFD
	return Reject{Reason: reason, Payload: s}
}

// DeadLetter is the wire form of a Reject.
type DeadLetter struct {
	Reason  string          `json:"reason"`
	Payload json.RawMessage `json:"payload"`
}

// MarshalJSON writes the deadletter message.
func (r Reject) MarshalJSON() ([]byte, error) {
	p := r.Payload
	if len(p) == 0 {
		p = json.RawMessage("null")
	}
	return json.Marshal(DeadLetter{Reason: r.Reason, Payload: p})
}

// ParseDeadLetter reads a deadletter message (for tools and tests).
func ParseDeadLetter(b []byte) (DeadLetter, error) {
	var d DeadLetter
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("deadletter: %s", jsonProblem(err))
	}
	if d.Reason == "" {
		return d, errors.New("deadletter: reason missing")
	}
	return d, nil
}

// Status is a finished task's outcome.
type Status string

// The outcomes (docs/design.md "Reports": a finished task gets exactly one).
const (
	Succeeded  Status = "succeeded"  // the terminal acked with code 0
	Failed     Status = "failed"     // refused by the terminal, or max_tries spent
	Superseded Status = "superseded" // replaced before sending by a later task for the same person
)

// Result is published on faceagent/{gw}/results when a task finishes:
//
//	{"taskId":"t-1","deviceId":"2042253","messageId":"…","status":"succeeded","tries":1,"error":"","durationMs":12}
//
// DurationMs runs from intake (the journal append) to the outcome. A SetWhitelist's result
// carries its counts as well, after durationMs:
//
//	{…,"durationMs":12,"added":3,"deleted":1,"unchanged":9996}
//
// and no other result has them: WhitelistCounts is nil for every other op (so read
// r.Added only where r.WhitelistCounts != nil).
type Result struct {
	TaskID     string `json:"taskId"`
	DeviceID   string `json:"deviceId"`
	MessageID  string `json:"messageId"`
	Status     Status `json:"status"`
	Tries      int    `json:"tries"`
	Error      string `json:"error"`
	DurationMs int64  `json:"durationMs"`
	*WhitelistCounts
}

// WhitelistCounts are a SetWhitelist's changes to the terminal's desired list, counted
// against the list it replaced when the task was taken: Added + Unchanged is the new
// list's length, Deleted + Unchanged the old one's.
type WhitelistCounts struct {
	Added     int `json:"added"`     // persons new to the list, or with a changed record
	Deleted   int `json:"deleted"`   // persons of the old list not in the new one
	Unchanged int `json:"unchanged"` // persons whose record is the same in both
}

// ParseResult reads a result message (for tools and tests) and checks its status.
func ParseResult(b []byte) (Result, error) {
	r, ok := parseResultPlain(b)
	if !ok {
		r = Result{}
		if err := json.Unmarshal(b, &r); err != nil {
			return r, fmt.Errorf("result: %s", jsonProblem(err))
		}
	}
	switch r.Status {
	case Succeeded, Failed, Superseded:
	default:
		return r, fmt.Errorf("result: unknown status %.32q", string(r.Status))
	}
	if r.TaskID == "" {
		return r, errors.New("result: taskId missing")
	}
	if c := r.WhitelistCounts; c != nil && (c.Added < 0 || c.Deleted < 0 || c.Unchanged < 0) {
		return r, fmt.Errorf("result: negative count (added %d, deleted %d, unchanged %d)", c.Added, c.Deleted, c.Unchanged)
	}
	return r, nil
}

func lastRuneStart(b []byte) int {
	i := len(b) - 1
	for i > 0 && len(b)-i < utf8.UTFMax && !utf8.RuneStart(b[i]) {
		i--
	}
	return i
}

func asType[T error](err error, target *T) bool { return errors.As(err, target) }
