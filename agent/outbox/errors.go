package outbox

import "errors"

// Every sentinel error of the package. Intake refusals are wrapped with the numbers that
// caused them; test with errors.Is.
var (
	// ErrClosed is returned by every method called after Close.
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

	// ErrUnknownRecord is returned by Open for a journal record of a kind this release does
	// not know (written by a newer release).
	ErrUnknownRecord = errors.New("outbox: unknown journal record")

	// errSpillChecksum is wrapped in the error of a payload read from the payload file that
	// does not match its checksum (a damaged file): the command stays queued.
	errSpillChecksum = errors.New("checksum mismatch")
)
