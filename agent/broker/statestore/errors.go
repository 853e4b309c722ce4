package statestore

import "errors"

// Error texts of the state store service. A reply to a failed request is
// exactly "-ERR " + text + "\r\n" (docs/design.md, wire fact 6). The texts are the
// protocol document's, except ErrTextFencingLower, which is spelled the way
// the service and all three SDKs spell it ("than", where the document says
// "that").
const (
	ErrTextTimestampAhead = "the request timestamp is too far in the future; ensure that the client and broker system clocks are synchronized"
	ErrTextFencingNeeded  = "a fencing token is required for this request"
	ErrTextFencingAhead   = "the request fencing token timestamp is too far in the future; ensure that the client and broker system clocks are synchronized"
	ErrTextFencingLower   = "the request fencing token is a lower version than the fencing token protecting the resource"
	ErrTextQuota          = "the quota has been exceeded"
	ErrTextSyntax         = "syntax error"
	ErrTextNotAuthorized  = "not authorized"
	ErrTextUnknown        = "unknown command"
	ErrTextArity          = "wrong number of arguments"
	ErrTextNoTimestamp    = "missing timestamp"
	ErrTextBadTimestamp   = "malformed timestamp"
	ErrTextZeroKey        = "the key length is zero"
)

// Errors returned by Open and by snapshot loading.
var (
	// ErrCorruptSnapshot is returned (wrapped) by New when the persistence
	// snapshot fails its checksum, its magic or its record count. The file is
	// left in place for the operator; nothing is overwritten.
	ErrCorruptSnapshot = errors.New("statestore: corrupt snapshot")

	// ErrClosed is returned by Close when the store was already closed.
	ErrClosed = errors.New("statestore: closed")
)
