package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/seed0e69bba5/faceagent/device/face"
)

// SyncReason is why a reconciliation of a terminal's whitelist started.
type SyncReason string

// The reasons, in the order a report names them when several hold (serial, digest, count);
// setWhitelist is a SetWhitelist task's own reconciliation.
const (
	SyncSerial       SyncReason = "serial"       // the terminal's hardware serial changed: it was replaced
	SyncDigest       SyncReason = "digest"       // a protocol 2 terminal's digest differs from the desired list's
	SyncCount        SyncReason = "count"        // a protocol 1 terminal holds fewer persons than desired
	SyncSetWhitelist SyncReason = "setWhitelist" // a SetWhitelist task replaced the desired list
)

// SyncStatus is where a reconciliation stands: every one reports SyncStarted, then
// SyncDone or SyncFailed.
type SyncStatus string

// The statuses.
const (
	SyncStarted SyncStatus = "started"
	SyncDone    SyncStatus = "done"
	SyncFailed  SyncStatus = "failed" // the terminal kept refusing; the agent backs off and tries again later
)

// MaxSyncError bounds a sync report's error text.
const MaxSyncError = face.MaxTextLen

// SyncReport is published on faceagent/{gw}/devices/{id}/sync (Topics.DeviceSync) when a
// reconciliation of a terminal's whitelist starts and when it ends:
//
//	{"deviceId":"2042253","reason":"digest","status":"done","missing":2,"extra":1,"changed":0,"at":"2026-11-27T15:04:05.123Z"}
//
// Missing, Extra and Changed count the persons the terminal lacked, held beyond the
// desired list, and held with another record: at "started" what the diff found so far, at
// "done" and "failed" what the reconciliation found in all. Error says why a failed one
// failed; it is absent otherwise (readers of the contract's fields ignore it).
type SyncReport struct {
	DeviceID string     `json:"deviceId"`
	Reason   SyncReason `json:"reason"`
	Status   SyncStatus `json:"status"`
	Missing  int        `json:"missing"`
	Extra    int        `json:"extra"`
	Changed  int        `json:"changed"`
	At       string     `json:"at"` // RFC 3339, the gateway's clock (FormatSyncAt)
	Error    string     `json:"error,omitempty"`
}

// FormatSyncAt is the "at" of a report made at t: RFC 3339 in UTC with milliseconds, so
// that a "started" and its "done" in the same second still read in order.
func FormatSyncAt(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// Validate checks what a report must hold: a device id, a known reason and status,
// counts that are not negative, an RFC 3339 time, and an error text only on a failed
// report, within MaxSyncError.
func (s *SyncReport) Validate() error {
	if err := checkID("deviceId", s.DeviceID, face.MaxIDLen); err != nil {
		return err
	}
	switch s.Reason {
	case SyncSerial, SyncDigest, SyncCount, SyncSetWhitelist:
	default:
		return fmt.Errorf("reason: unknown reason %.32q", string(s.Reason))
	}
	switch s.Status {
	case SyncStarted, SyncDone, SyncFailed:
	default:
		return fmt.Errorf("status: unknown status %.32q", string(s.Status))
	}
	if s.Missing < 0 || s.Extra < 0 || s.Changed < 0 {
		return fmt.Errorf("negative count (missing %d, extra %d, changed %d)", s.Missing, s.Extra, s.Changed)
	}
	if s.At == "" {
		return errors.New("at: missing")
	}
	if _, err := checkTime("at", s.At); err != nil {
		return err
	}
	if s.Error != "" && s.Status != SyncFailed {
		return fmt.Errorf("error: only a failed report carries one (status %s)", s.Status)
	}
	if len(s.Error) > MaxSyncError {
		return fmt.Errorf("error: longer than %d bytes", MaxSyncError)
	}
	return nil
}

// AppendJSON appends the report's message to dst, after checking it with Validate.
func (s *SyncReport) AppendJSON(dst []byte) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return dst, fmt.Errorf("sync report: %w", err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// ParseSyncReport reads a sync report message (for tools and tests) and checks it with
// Validate.
func ParseSyncReport(b []byte) (SyncReport, error) {
	var s SyncReport
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("sync report: %s", jsonProblem(err))
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("sync report: %w", err)
	}
	return s, nil
}
