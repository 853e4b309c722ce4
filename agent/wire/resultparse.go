package wire

import (
	"github.com/seed0e69bba5/faceagent/internal/jsonplain"
)

// parseResultPlain decodes a result message written the way the agent writes it: one
// object whose members are the Result fields by their exact names, strings without
// escapes or control characters, integers without fraction or exponent. It gives up
// (ok false) on anything else — another spelling of a key, an unknown member, an escape,
// null, a number that is not a plain integer, malformed JSON — and ParseResult then
// decodes with encoding/json, which handles all of it; where it succeeds it gives what
// encoding/json gives (FuzzParseResultPlain). A back office reads one result per task:
// this keeps it from spending more on reflection than the agent spent writing it.
func parseResultPlain(b []byte) (r Result, ok bool) {
	p := jsonplain.NewScanner(b, 0)
	ok = p.Object(func(key []byte) bool {
		switch string(key) { // compared without a copy
		case "taskId":
			return p.Str(&r.TaskID)
		case "deviceId":
			return p.Str(&r.DeviceID)
		case "messageId":
			return p.Str(&r.MessageID)
		case "status":
			var s string
			ok := p.Str(&s)
			r.Status = Status(s)
			return ok
		case "error":
			return p.Str(&r.Error)
		case "tries":
			return p.Int(&r.Tries) // encoding/json refuses what overflows int (32-bit ARM)
		case "durationMs":
			var ok bool
			r.DurationMs, ok = p.Int64()
			return ok
		case "added":
			return p.Int(&counts(&r).Added)
		case "deleted":
			return p.Int(&counts(&r).Deleted)
		case "unchanged":
			return p.Int(&counts(&r).Unchanged)
		}
		return false
	})
	if !ok || !p.End() {
		return Result{}, false
	}
	return r, true
}

// counts is r's WhitelistCounts, made on the first count read, as encoding/json makes
// an embedded struct pointer on the first of its fields.
func counts(r *Result) *WhitelistCounts {
	if r.WhitelistCounts == nil {
		r.WhitelistCounts = new(WhitelistCounts)
	}
	return r.WhitelistCounts
}
