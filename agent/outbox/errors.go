package outbox

import "errors"

// Every sentinel error of the package. Intake refusals are wrapped with the numbers that
// caused them; test with errors.Is.
var (
	// ErrClosed is returned by every method called after Close, and is the error a Query
	// still pending at Close gets in its Done.
	ErrClosed = errors.New("outbox: closed")

	// ErrDuplicate is returned by Enqueue for a message id the table already holds (or is
	// storing right now): the task is stored once. Callers may acknowledge it upstream.
	ErrDuplicate = errors.New("outbox: duplicate message id")

	// ErrDeviceFull is returned by Enqueue when the device already has
	// Options.MaxQueuedPerDevice commands waiting (backpressure: refuse, never run out of memory).
	ErrDeviceFull = errors.New("outbox: device queue full")

	// ErrFull is returned by Enqueue when the table holds Options.MaxQueued unfinished commands,
	// or Options.MaxQueued results that were not reported yet.
	ErrFull = errors.New("outbox: message table full")

	// ErrInvalidTask is returned by Enqueue for a task without a message id or device id.
	ErrInvalidTask = errors.New("outbox: invalid task")

	// ErrJournal is returned (wrapping the journal's error, e.g. journal.ErrNoSpace) once the
	// journal refused a write: the outbox stops dispatching and refuses intake until it is
	// closed and opened again, which rebuilds the table from what is on disk.
	ErrJournal = errors.New("outbox: journal failed")

	// ErrRefused is wrapped in the error a Query's Done gets when the terminal refused the
	// query (a non-zero ack code: a v1 terminal does not know ListPersons); the error
	// names the code and the terminal's message, and Done gets the ack too.
	ErrRefused = errors.New("outbox: refused by the device")

	// ErrNoAnswer is wrapped in the error a Query's Done gets when MaxTries tries of it
	// went unacked (or failed to send).
	ErrNoAnswer = errors.New("outbox: no answer from the device")
	// ErrSuperseded and ErrExpired are wrapped in the error Options.NoResultDone gets for a
	// command without a result that a later command for its person replaced before it was
	// sent, or whose expiry passed first.
	ErrSuperseded = errors.New("outbox: superseded")
	ErrExpired    = errors.New("outbox: expired")

	// ErrUnknownRecord is returned by Open for a journal record of a kind this release does
	// not know (written by a newer release).
	ErrUnknownRecord = errors.New("outbox: unknown journal record")

	// errSpillChecksum is wrapped in the error of a payload read from the payload file that
	// does not match its checksum (a damaged file): the command stays queued.
	errSpillChecksum = errors.New("checksum mismatch")
)
