package statestore

import (
	"errors"
	"time"

	"github.com/seed0e69bba5/faceagent/hlc"
)

// The typed API (Get, Set, Watch) is for an in-process caller, the store's owner: it
// takes Go values instead of a RESP3 payload and answers with Go values and errors, but
// every request goes through the same checks as the RESP3 command of the same verb
// (checkKey, then setChecked, getChecked or watchChecked): key size, reserved prefixes,
// timestamps and their drift, fencing tokens, the bounds, versions, expiry,
// persistence and notifications. Nothing is encoded or parsed on the way.

// Error is the store's refusal of a typed request: Text is the text the RESP3 command
// would have been answered with after "-ERR " (one of the ErrText* constants). errors.Is
// compares texts, so a refusal matches its sentinel below.
type Error struct {
	Text string
}

func (e *Error) Error() string { return "statestore: " + e.Text }

// Is matches another *Error with the same text.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Text == e.Text
}

// The refusals of the typed API, one per error text it can answer.
var (
	// ErrQuota: a bound refused the request (Options.MaxKeys, MaxBytes,
	// MaxKeySize, MaxValueSize, MaxNotify; Stats tells which).
	ErrQuota = &Error{Text: ErrTextQuota}
	// ErrNotAuthorized: a write of a key under Options.ReservedPrefixes without
	// SetOptions.Owner, or Watch without a Watcher.
	ErrNotAuthorized = &Error{Text: ErrTextNotAuthorized}
	// ErrFencingNeeded: the key is fenced and the request carries no token.
	ErrFencingNeeded = &Error{Text: ErrTextFencingNeeded}
	// ErrFencingLower: the key is fenced with a newer token than the request's.
	ErrFencingLower = &Error{Text: ErrTextFencingLower}
	// ErrTimestampAhead: SetOptions.Timestamp is too far ahead of the store's clock.
	ErrTimestampAhead = &Error{Text: ErrTextTimestampAhead}
	// ErrNoTimestamp: SetOptions.Timestamp is zero (a SET without __ts).
	ErrNoTimestamp = &Error{Text: ErrTextNoTimestamp}
	// ErrZeroKey: the key is empty.
	ErrZeroKey = &Error{Text: ErrTextZeroKey}

	// ErrNotFound is returned by Get for a key that is not stored (GET's "$-1"). It is
	// no refusal.
	ErrNotFound = errors.New("statestore: key not found")
)

// typedErrors are the sentinels errorOf returns for their texts.
var typedErrors = []*Error{ErrQuota, ErrNotAuthorized, ErrFencingNeeded, ErrFencingLower, ErrTimestampAhead,
	ErrNoTimestamp, ErrZeroKey}

// errorOf is the typed error of a refusal text.
func errorOf(text string) error {
	for _, e := range typedErrors {
		if e.Text == text {
			return e
		}
	}
	return &Error{Text: text}
}

// SetOptions are the options of a typed Set.
type SetOptions struct {
	// Timestamp is the request's HLC timestamp (the __ts of a RESP3 SET): the new
	// version is greater than it, and it must not be too far ahead of the store's clock.
	// Required: zero is refused with ErrNoTimestamp. The caller's clock should observe
	// the version Set returns, as a client observes the response's __ts.
	Timestamp hlc.Timestamp
	// Expiry is the key's time to live (PX, whole milliseconds, at least one); 0 or less
	// keeps it until it is overwritten or deleted.
	Expiry time.Duration
	// Owner marks the store's in-process owner: it may write keys under
	// Options.ReservedPrefixes, and MaxKeys and MaxBytes do not refuse its writes there.
	Owner bool
}

// Set stores value under key (a copy of it), as a RESP3 SET without conditions and
// without fencing token would, and returns the new version. The key is volatile (a
// persistent key written by Set becomes volatile, as a SET without aio-persistence
// makes it). A refusal is an *Error (ErrQuota, ErrNotAuthorized, ErrFencingNeeded for a
// fenced key, ErrTimestampAhead, ErrNoTimestamp, ErrZeroKey). Set never blocks on I/O.
func (s *Store) Set(key string, value []byte, o SetOptions) (hlc.Timestamp, error) {
	var none hlc.Timestamp
	req := Request{Owner: o.Owner}
	k := []byte(key)
	if msg := s.checkKey(&req, k, true); msg != "" {
		return none, errorOf(msg)
	}
	if o.Timestamp.IsZero() {
		return none, ErrNoTimestamp
	}
	var opts setOptions
	if o.Expiry > 0 {
		opts.px = max(o.Expiry.Milliseconds(), 1)
	}
	applied, version, msg := s.setChecked(&req, k, value, opts, o.Timestamp, none)
	if msg != "" {
		return none, errorOf(msg)
	}
	if !applied { // only a condition refuses without an error text, and Set has none
		return none, errorOf(ErrTextSyntax)
	}
	return version, nil
}

// Get returns a copy of key's value and its version, ErrNotFound when it is not stored,
// or a refusal (ErrZeroKey, ErrQuota for a key over MaxKeySize) as GET would answer.
func (s *Store) Get(key string) ([]byte, hlc.Timestamp, error) {
	var none hlc.Timestamp
	k := []byte(key)
	if msg := s.checkKey(&Request{}, k, false); msg != "" {
		return nil, none, errorOf(msg)
	}
	value, version, found := s.getChecked(k)
	if !found {
		return nil, none, ErrNotFound
	}
	return append([]byte(nil), value...), version, nil
}

// Watch registers w for key as KEYNOTIFY does: w.Notify is called after each change of
// key (see Watcher), until Unwatch(w). Registering a key twice is one registration. A
// refusal is an *Error: ErrQuota (MaxNotify registrations of w, MaxBytes, MaxKeySize),
// ErrZeroKey, ErrNotAuthorized for a nil w.
func (s *Store) Watch(key string, w Watcher) error {
	k := []byte(key)
	if msg := s.checkKey(&Request{}, k, false); msg != "" {
		return errorOf(msg)
	}
	if w == nil {
		return ErrNotAuthorized
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg := s.watchChecked(k, w); msg != "" {
		return errorOf(msg)
	}
	return nil
}
