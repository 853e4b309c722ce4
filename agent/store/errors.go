package store

import (
	"context"
	"errors"
	"strings"
)

// Errors the store itself reports (`-ERR <text>`, wire fact 6). Each sentinel matches one error
// text of the protocol document; test with errors.Is. A text the document does not list comes
// back as a *ServerError whose Text holds it (the document asks clients to expect new ones).
var (
	// ErrTimestampSkew is returned when the request's __ts is more than a minute ahead of the
	// store's clock: "the request timestamp is too far in the future; ensure that the client and
	// broker system clocks are synchronized".
	ErrTimestampSkew = &ServerError{Text: "the request timestamp is too far in the future; ensure that the client and broker system clocks are synchronized"}
	// ErrFencingTokenRequired is returned when a key is protected by a fencing token and the
	// request carried none: "a fencing token is required for this request".
	ErrFencingTokenRequired = &ServerError{Text: "a fencing token is required for this request"}
	// ErrFencingTokenSkew is returned when the request's __ft is more than a minute ahead of the
	// store's clock: "the request fencing token timestamp is too far in the future; …".
	ErrFencingTokenSkew = &ServerError{Text: "the request fencing token timestamp is too far in the future; ensure that the client and broker system clocks are synchronized"}
	// ErrFencingTokenLowerVersion is returned when the request's fencing token is older than the
	// one protecting the key. The service says "lower version than"; the protocol document
	// misspells it "lower version that" (wire fact 6): both texts map here.
	ErrFencingTokenLowerVersion = &ServerError{Text: "the request fencing token is a lower version than the fencing token protecting the resource"}
	// ErrQuotaExceeded is returned when the store holds as many keys as its quota allows:
	// "the quota has been exceeded".
	ErrQuotaExceeded = &ServerError{Text: "the quota has been exceeded"}
	// ErrSyntax is returned for a payload the store cannot parse: "syntax error".
	ErrSyntax = &ServerError{Text: "syntax error"}
	// ErrNotAuthorized is returned when the client may not touch the key: "not authorized".
	ErrNotAuthorized = &ServerError{Text: "not authorized"}
	// ErrUnknownCommand is returned for a verb the store does not know: "unknown command".
	ErrUnknownCommand = &ServerError{Text: "unknown command"}
	// ErrWrongNumberOfArguments is returned for a command with too few or too many arguments:
	// "wrong number of arguments".
	ErrWrongNumberOfArguments = &ServerError{Text: "wrong number of arguments"}
	// ErrMissingTimestamp is returned for a SET without __ts: "missing timestamp".
	ErrMissingTimestamp = &ServerError{Text: "missing timestamp"}
	// ErrMalformedTimestamp is returned when __ts or __ft is not an HLC: "malformed timestamp".
	ErrMalformedTimestamp = &ServerError{Text: "malformed timestamp"}
	// ErrKeyLengthZero is returned for an empty key: "the key length is zero".
	ErrKeyLengthZero = &ServerError{Text: "the key length is zero"}
)

// Errors of the client side.
var (
	// ErrNotFound is returned by Get for a missing key ("$-1"), and by Del, VDel and
	// KeyNotifyStop when the store answered ":0" (nothing deleted, key not watched). The
	// protocol does not count these as errors; the sentinel lets callers tell them apart.
	ErrNotFound = errors.New("store: key not found")
	// ErrNotApplied is returned when a condition kept the store from acting (":-1", wire fact 1):
	// SET NX on an existing key, SET NEX on a key holding another value, VDEL with a value that
	// does not match. The version returned beside it is the stored value's.
	ErrNotApplied = errors.New("store: not applied")
	// ErrTimeout is returned when no response arrived within the request's timeout. The request
	// may still have been applied. It matches context.DeadlineExceeded too.
	ErrTimeout = timeoutError{}
	// ErrNotConnected is returned at once for a request made while the client has no
	// connection to the broker. Retryable.
	ErrNotConnected = errors.New("store: not connected")
	// ErrConnectionLost is returned at once for a request in flight when the connection
	// dropped; it may or may not have been applied. A request that was still waiting for the
	// connection's subscription gets an error matching both ErrConnectionLost and
	// ErrNotConnected: it was not sent. Retryable.
	ErrConnectionLost = errors.New("store: connection lost while the request was in flight")
	// ErrNoResponder is returned at once when the broker reported that the request reached no
	// subscriber (PUBACK reason 0x10, "No matching subscribers"): no state store is listening
	// behind the broker, for example while the store itself reconnects. The request was not
	// applied. Retryable. (The embedded store never reports it.)
	ErrNoResponder = errors.New("store: no state store is subscribed to the request topic")
	// ErrClosed is returned for requests made after Close.
	ErrClosed = errors.New("store: client closed")
	// ErrProtocol is wrapped by errors about responses the client cannot understand (a
	// response type the command does not allow, a bad __ts).
	ErrProtocol = errors.New("store: protocol violation")
)

// Retryable reports whether err says the request did not get an answer because of the link
// or a store that is not there yet (ErrNotConnected, ErrConnectionLost, ErrTimeout,
// ErrNoResponder): the same request may succeed later. A caller that retries a
// non-idempotent request must accept it may be applied twice.
func Retryable(err error) bool {
	return errors.Is(err, ErrNotConnected) || errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrTimeout) ||
		errors.Is(err, ErrNoResponder)
}

// errLostBeforeSend is returned to a request that was waiting for the connection's
// subscription when that connection dropped. It matches ErrConnectionLost, like every request
// under way when the link drops, and ErrNotConnected too: it was never sent, so it was
// certainly not applied.
var errLostBeforeSend error = lostBeforeSend{}

type lostBeforeSend struct{}

func (lostBeforeSend) Error() string { return "store: connection lost before the request was sent" }

func (lostBeforeSend) Is(target error) bool {
	return target == ErrConnectionLost || target == ErrNotConnected
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "store: request timed out" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// Is lets errors.Is(ErrTimeout, context.DeadlineExceeded) hold, as net errors do.
func (timeoutError) Is(target error) bool {
	return target == context.DeadlineExceeded
}

// ServerError is an error reported by the store (`-ERR <text>`). The sentinels above are
// *ServerError values; errors.Is compares texts, so a ServerError built from a response
// matches its sentinel.
type ServerError struct {
	Text string // the text after "ERR " (or the whole line when the prefix is missing)
}

func (e *ServerError) Error() string { return "store: " + e.Text }

// Is matches another *ServerError with the same text.
func (e *ServerError) Is(target error) bool {
	t, ok := target.(*ServerError)
	return ok && t.Text == e.Text
}

var knownServerErrors = []*ServerError{
	ErrTimestampSkew, ErrFencingTokenRequired, ErrFencingTokenSkew, ErrFencingTokenLowerVersion,
	ErrQuotaExceeded, ErrSyntax, ErrNotAuthorized, ErrUnknownCommand, ErrWrongNumberOfArguments,
	ErrMissingTimestamp, ErrMalformedTimestamp, ErrKeyLengthZero,
}

// lowerVersionThat is the protocol document's spelling of ErrFencingTokenLowerVersion.
const lowerVersionThat = "the request fencing token is a lower version that the fencing token protecting the resource"

// serverError maps the text of a RESP error line ("ERR syntax error", or the document's
// "ERR: syntax error") to its sentinel, or to a new *ServerError for unknown texts.
func serverError(line []byte) error {
	text := string(line) // one allocation: this is the error path
	switch {
	case strings.HasPrefix(text, "ERR: "):
		text = text[len("ERR: "):]
	case strings.HasPrefix(text, "ERR "):
		text = text[len("ERR "):]
	case text == "ERR":
		text = ""
	}
	text = strings.TrimSpace(text)
	if text == lowerVersionThat {
		return ErrFencingTokenLowerVersion
	}
	for _, e := range knownServerErrors {
		if e.Text == text {
			return e
		}
	}
	return &ServerError{Text: text}
}
